"""``CirclePackingTask``: n circles in the unit square, maximize the sum of radii (strict validity)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from reasearch.evaluators._geometry_task import GeometryParams, GeometryTask
from reasearch.evaluators.circle_packing._records import BEST_KNOWN, BEST_KNOWN_SOURCE, SEED_SCORES
from reasearch.evaluators.params import Range, meta, spec_params
from reasearch.evaluators.result import EvalResult
from reasearch.evaluators.spec import TaskSpec
from reasearch.native.geometry import ViolationKind, packing_violation

__all__ = ["BEST_KNOWN", "SEED_SCORES", "SIZES", "CirclePackingParams", "CirclePackingTask"]

SIZES = range(23, 33)


_ENTRY_ALIASES = ("run_packing", "construct_packing")
ROUNDING_LEVEL = 1e-9
"""Violations all below this are float64 rounding of touching circles (still INVALID; the feedback says so)."""


def _parse(data: Any, n: int) -> tuple[np.ndarray, np.ndarray] | str:
    """The candidate's centers and radii as float64 arrays, or the reason they are unusable."""
    if not isinstance(data, Mapping) or "centers" not in data or "radii" not in data:
        return "the answer must hold 'centers' and 'radii' (return (centers, radii) from run())"
    arrays = []
    for key, shape in (("centers", (n, 2)), ("radii", (n,))):
        try:
            raw = np.asarray(data[key])
        except (TypeError, ValueError) as exc:
            return f"{key} is not an array of numbers: {exc}"
        if raw.dtype.kind not in "iuf":
            return f"{key} must be numbers, got dtype {raw.dtype}"
        if raw.shape != shape:
            return f"{key} must have shape {shape}, got {raw.shape}"
        arrays.append(np.ascontiguousarray(raw, dtype=np.float64))
    return arrays[0], arrays[1]


@dataclass(frozen=True, slots=True)
class CirclePackingParams(GeometryParams):
    """The parameters of ``circle_packing/n{n}-v1`` (constructor, ``--params`` and ``spec.params`` come from here)."""

    family: ClassVar[str] = "circle_packing"

    n: int = field(default=26, metadata=meta("number of circles (23..32 are registered).", Range(ge=2)))


class CirclePackingTask(GeometryTask[CirclePackingParams]):
    """Pack ``n`` disjoint circles into the unit square, maximizing the sum of their radii.

    Validity has no tolerance: every radius finite and ``>= 0``, ``r_i <= x_i``, ``r_i <= y_i``,
    ``x_i + r_i <= 1``, ``y_i + r_i <= 1`` and ``r_i + r_j <= |c_i - c_j|`` for every pair, each an IEEE
    float64 comparison of float64 arithmetic (so a packing can pass and still overlap by ~1e-18 in exact
    arithmetic, as in every peer's check; one failing only by violations below 1e-9 is still invalid,
    and its feedback says so and gives the LP-repaired sum).
    The score is the sum of radii, recomputed from the raw arrays; ``normalized_score`` divides it by
    the best known sum. Feedback names the worst violation and gives ``lp_sum``, the optimal sum of
    radii for the candidate's own centers (an LP solved with HiGHS).

    Parameters: :class:`CirclePackingParams` (``n``, ``time_limit_s``, ``memory_mb``).
    """

    seed_package = __package__

    harness = "reasearch.evaluators.circle_packing.harness:run_candidate"

    def _make_spec(self) -> TaskSpec:
        p = self.params
        n = p.n
        return TaskSpec(
            id=f"circle_packing/n{n}-v1",
            version=1,
            direction="maximize",
            time_limit_s=p.time_limit_s,
            memory_mb=p.memory_mb,
            best_known=BEST_KNOWN.get(n),
            best_known_source=BEST_KNOWN_SOURCE if n in BEST_KNOWN else "",
            entry_point="run",
            entry_aliases=_ENTRY_ALIASES,
            deterministic=True,
            seed_score=SEED_SCORES.get(n),
            seed_score_rtol=1e-12,
            params=spec_params(p),
        )

    def describe(self) -> str:
        n = self.n
        best = BEST_KNOWN.get(n)
        best_line = f"Best known sum for n={n}: {best:.12f} (Packomania).\n" if best else ""
        return (
            f"Circle packing in the unit square, n={n} circles.\n"
            "Write a Python module defining `run()` (aliases accepted: `run_packing`, `construct_packing`) "
            f"that returns `(centers, radii)`: centers an ({n}, 2) array, radii an ({n},) array "
            "(a tuple with more items is fine; only the first two are read). Parameters are passed by name "
            f"when the function has them: `n` or `num_circles` gets {n}, `seed` the evaluation seed; "
            "`random` and `numpy.random` are seeded with it before the call.\n"
            "Valid iff every value is finite, r_i >= 0, r_i <= x_i, r_i <= y_i, x_i + r_i <= 1, "
            "y_i + r_i <= 1 and r_i + r_j <= |c_i - c_j| for every pair, with NO tolerance: each check is an "
            "IEEE float64 comparison of float64 arithmetic (touching circles computed with rounding error "
            "are rejected; a packing that passes may still overlap by ~1e-18 in exact arithmetic).\n"
            "Score: the sum of radii, recomputed by the evaluator (maximize).\n"
            + best_line
            + "Feedback: the worst violated constraint and `lp_sum`, the best sum of radii for your own "
            "centers. The same LP is available to your program: "
            "`from reasearch.native.lp import optimal_radii` (or from reasearch.evaluators.circle_packing); "
            "`optimal_radii(centers)` returns radii that pass the strict check (~1 ms).\n"
            f"Limits: {self.params.time_limit_s:g} s wall time, {self.params.memory_mb} MB memory; NumPy, SciPy "
            "and numba are available, no network."
        )

    def payload(self, seed: int | None) -> dict[str, Any]:
        """The evaluation seed and the number of circles (passed to an entry point that asks for them)."""
        return {"seed": 0 if seed is None else int(seed), "n": self.n}

    def render_png(self, result: EvalResult | Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
        """Draws the solution of an OK result (or raw answer data) to a PNG (see :func:`render_packing`)."""
        from reasearch.evaluators.circle_packing.render import render_packing

        return render_packing(result, path)

    def score_solution(self, data: Any, *, seed: int | None = None) -> EvalResult:
        n = self.n
        parsed = _parse(data, n)
        if isinstance(parsed, str):
            return self.invalid(parsed)
        centers, radii = parsed
        violation = packing_violation(centers, radii)
        lp_sum = _lp_sum(centers)
        metrics: dict[str, Any] = {"n": n, "violations": violation.count, "lp_sum": lp_sum}
        lp_text = "" if lp_sum is None else f" The optimal radii for your centers sum to lp_sum={lp_sum:.12f}."
        if not violation.valid:
            metrics["worst_violation"] = violation.kind.name.lower()
            metrics["worst_violation_amount"] = violation.amount
            if violation.kind is not ViolationKind.NONFINITE:
                metrics["sum_radii"] = math.fsum(radii.tolist())
            text = f"Invalid packing: {violation.describe()}.{lp_text}"
            if violation.kind is not ViolationKind.NONFINITE and violation.amount < ROUNDING_LEVEL:
                metrics["rounding_only"] = True
                if lp_sum is not None:
                    metrics["lp_repaired_sum"] = lp_sum
                text += (f" Every violation is below {ROUNDING_LEVEL:g}: the packing fails only by float64 "
                         "rounding (no tolerance is applied; each check is an IEEE float64 comparison). "
                         + (f"Repaired by the LP (optimal_radii(centers), strictly valid) it scores "
                            f"{lp_sum:.12f}." if lp_sum is not None else
                            "Shrink the radii slightly, or use optimal_radii(centers)."))
            return self.invalid(text, metrics=metrics)
        score = math.fsum(radii.tolist())
        metrics["sum_radii"] = score
        if lp_sum is not None:
            metrics["lp_gap"] = lp_sum - score
        best = self.spec.best_known
        rel = f" ({score / best:.6f} of the best known {best:.12f})" if best else ""
        feedback = f"Valid packing of {n} circles; sum of radii {score:.12f}{rel}.{lp_text}"
        if lp_sum is not None and lp_sum - score > 1e-9:
            feedback += f" Re-optimizing the radii alone would gain {lp_sum - score:.3g}."
        return self.result(
            score,
            metrics=metrics,
            feedback=feedback,
            solution={"centers": centers.tolist(), "radii": radii.tolist()},
        )


def _lp_sum(centers: np.ndarray) -> float | None:
    """Optimal sum of radii for these centers; None when some center lies outside the square.

    Feedback only: a solver failure on adversarial centers costs the agent this hint, never the score.
    """
    if not np.all(np.isfinite(centers)) or np.any(centers < 0.0) or np.any(centers > 1.0):
        return None
    from reasearch.native.lp import LPError, optimal_radii

    try:
        return math.fsum(optimal_radii(centers).tolist())
    except LPError:
        return None
