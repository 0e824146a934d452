"""``HeilbronnTask``: n points in the unit square, maximize the smallest triangle area."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from reasearch.evaluators._geometry_task import GeometryParams, GeometryTask
from reasearch.evaluators.heilbronn._records import BEST_KNOWN, BEST_KNOWN_SOURCES, SEED_SCORES
from reasearch.evaluators.params import Range, meta, spec_params
from reasearch.evaluators.result import EvalResult
from reasearch.evaluators.spec import TaskSpec
from reasearch.native.geometry import min_triangle_area, smallest_triangles

__all__ = ["BEST_KNOWN", "SEED_SCORES", "SIZES", "HeilbronnParams", "HeilbronnTask"]

SIZES = range(11, 16)


_FEEDBACK_TRIANGLES = 5


def _parse(data: Any, n: int) -> np.ndarray | str:
    """The candidate's points as a float64 (n, 2) array, or the reason they are unusable."""
    if not isinstance(data, Mapping) or "points" not in data:
        return "the answer must hold 'points' (return an (n, 2) array from run())"
    try:
        raw = np.asarray(data["points"])
    except (TypeError, ValueError) as exc:
        return f"points is not an array of numbers: {exc}"
    if raw.dtype.kind not in "iuf":
        return f"points must be numbers, got dtype {raw.dtype}"
    if raw.shape != (n, 2):
        return f"points must have shape ({n}, 2), got {raw.shape}"
    return np.ascontiguousarray(raw, dtype=np.float64)


@dataclass(frozen=True, slots=True)
class HeilbronnParams(GeometryParams):
    """The parameters of ``heilbronn/n{n}-v1`` (constructor, ``--params`` and ``spec.params`` come from here)."""

    family: ClassVar[str] = "heilbronn"

    n: int = field(default=12, metadata=meta("number of points (11..15 are registered).", Range(ge=3)))


class HeilbronnTask(GeometryTask[HeilbronnParams]):
    """Place ``n`` points in the unit square so that the smallest triangle they form is as large as possible.

    Valid iff every coordinate is finite and inside [0, 1] with no tolerance. The score is the minimum
    of ``|x1(y2-y3) + x2(y3-y1) + x3(y1-y2)| / 2`` over all C(n, 3) triples (maximize), recomputed by
    the compiled kernel; ``normalized_score`` divides it by the best known area. Feedback lists the
    smallest triangles with their point indices.

    Parameters: :class:`HeilbronnParams` (``n``, ``time_limit_s``, ``memory_mb``).
    """

    seed_package = __package__

    harness = "reasearch.evaluators.heilbronn.harness:run_candidate"

    def _make_spec(self) -> TaskSpec:
        p = self.params
        n = p.n
        return TaskSpec(
            id=f"heilbronn/n{n}-v1",
            version=1,
            direction="maximize",
            time_limit_s=p.time_limit_s,
            memory_mb=p.memory_mb,
            best_known=BEST_KNOWN.get(n),
            best_known_source=BEST_KNOWN_SOURCES.get(n, ""),
            entry_point="run",
            entry_aliases=("construct_points", "heilbronn"),
            deterministic=True,
            seed_score=SEED_SCORES.get(n),
            seed_score_rtol=1e-12,
            params=spec_params(p),
        )

    def describe(self) -> str:
        n = self.n
        best = BEST_KNOWN.get(n)
        best_line = f"Best known minimum area for n={n}: {best:.13f} ({BEST_KNOWN_SOURCES[n]}).\n" if best else ""
        return (
            f"Heilbronn triangle problem in the unit square, n={n} points.\n"
            f"Write a Python module defining `run()` that returns an ({n}, 2) array of points "
            "(a dict {'points': ...} is accepted too). Parameters are passed by name when the function has "
            f"them: `n` or `num_points` gets {n}, `seed` the evaluation seed; `random` and `numpy.random` "
            "are seeded with it before the call.\n"
            "Valid iff every coordinate is finite and inside [0, 1], with NO tolerance.\n"
            "Score: the smallest area over all triangles formed by three of the points, "
            "|x1(y2-y3) + x2(y3-y1) + x3(y1-y2)| / 2 (maximize); collinear or repeated points score 0.\n"
            + best_line
            + "Feedback: the smallest triangles, with their point indices and areas.\n"
            "Fast kernels for your own search: `from reasearch.native.geometry import min_triangle_area, "
            "min_triangle` (`min_triangle(points)` returns (area, i, j, k); ~1 us at n=15).\n"
            f"Limits: {self.params.time_limit_s:g} s wall time, {self.params.memory_mb} MB memory; NumPy, SciPy "
            "and numba are available, no network."
        )

    def payload(self, seed: int | None) -> dict[str, Any]:
        """The evaluation seed and the number of points (passed to an entry point that asks for them)."""
        return {"seed": 0 if seed is None else int(seed), "n": self.n}

    def render_png(self, result: EvalResult | Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
        """Draws the solution of an OK result (or raw answer data) to a PNG (see :func:`render_points`)."""
        from reasearch.evaluators.heilbronn.render import render_points

        return render_points(result, path)

    def score_solution(self, data: Any, *, seed: int | None = None) -> EvalResult:
        n = self.n
        parsed = _parse(data, n)
        if isinstance(parsed, str):
            return self.invalid(parsed)
        points = parsed
        finite = np.isfinite(points).all(axis=1)
        if not finite.all():
            first = int(np.flatnonzero(~finite)[0])
            return self.invalid(f"Invalid: point {first} has a non-finite coordinate {points[first].tolist()}.")
        outside = ((points < 0.0) | (points > 1.0)).any(axis=1)
        if outside.any():
            bad = np.flatnonzero(outside)
            # How far the worst point sticks out, so the agent knows the size of the mistake.
            excess = np.maximum(-points, points - 1.0).max(axis=1)
            worst = int(bad[np.argmax(excess[bad])])
            return self.invalid(
                f"Invalid: {bad.size} point(s) outside [0, 1]^2 (no tolerance); worst is point {worst} "
                f"at {points[worst].tolist()}, {excess[worst]:.6g} outside.",
                metrics={"n": n, "points_outside": int(bad.size)},
            )
        area = min_triangle_area(points)
        smallest = smallest_triangles(points, _FEEDBACK_TRIANGLES)
        best = self.spec.best_known
        rel = f" ({area / best:.6f} of the best known {best:.13f})" if best else ""
        listing = "; ".join(f"({i}, {j}, {k}): {a:.6g}" for a, (i, j, k) in smallest)
        feedback = f"Valid; smallest triangle area {area:.13f}{rel}. Smallest triangles (indices: area): {listing}."
        return self.result(
            area,
            metrics={
                "n": n,
                "min_area": area,
                "smallest_triangles": [{"indices": list(t), "area": a} for a, t in smallest],
            },
            feedback=feedback,
            solution={"points": points.tolist()},
        )
