"""Certified records: a claimed result re-scored in exact rational arithmetic, written as a certificate.

The candidate runs in the sandbox exactly as ``Task.evaluate`` runs it (never on the host); what it
returns is plain data, and every float in it is converted exactly (each float64 is a dyadic rational).
The trusted side then checks every constraint without rounding: for circle packing each wall
(``x - r >= 0``, ``x + r <= 1``, same for ``y``), ``r >= 0`` and every pair
(``(r_i + r_j)^2 <= dx^2 + dy^2``, no square root), the score being the exact sum of radii; for Heilbronn
each point inside [0, 1]^2, the score being the exact smallest ``|cross| / 2`` over every triple.

A certificate says which kind a claim is: ``strict`` (every constraint holds exactly), ``tolerant``
(some constraint fails exactly, but none by more than the stated tolerance, 1e-6 by default: the slack
some published packings need) or ``invalid``. It also records the task's own float64 verdict, which is
how a packing can score under the task and still overlap by ~1e-18 in exact arithmetic.

Trust boundary: the candidate's answer is hostile data; this module only reads numbers from it.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import numpy as np

from reasearch.engine.protocol import SandboxRunner
from reasearch.errors import ConfigError
from reasearch.evaluators.base import Task, candidate_sha256, default_runner
from reasearch.evaluators.result import Status

__all__ = [
    "CERTIFICATE_FORMAT", "DEFAULT_TOLERANCE", "Certificate", "ExactCheck", "Kind", "Violation",
    "certify", "check_packing", "check_points", "supports_certification",
]

CERTIFICATE_FORMAT = "reasearch-certificate/1"
DEFAULT_TOLERANCE = Fraction(1, 10**6)
"""The overlap slack some published circle packings are checked with; within it a claim is ``tolerant``."""

Kind = Literal["strict", "tolerant", "invalid"]

_SQRT_BITS = 256  # an irrational overlap is reported as an upper bound within 2**-256 of the true value


@dataclasses.dataclass(frozen=True, slots=True)
class Violation:
    """The largest broken constraint: where, and by how much (exact, or an upper bound within 2**-256)."""

    where: str
    amount: Fraction
    exact: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class ExactCheck:
    """The outcome of an exact check: kind, exact score (None when none can be computed), worst violation."""

    kind: Kind
    score: Fraction | None
    max_violation: Violation | None
    violations: int
    reason: str


# ------------------------------------------------------------------------------------- exact checks


def _scaled(values: Sequence[float]) -> tuple[list[int], int]:
    """Integers ``I`` and a power of two ``D`` with ``values[k] == I[k] / D`` exactly (all must be finite)."""
    fracs = [Fraction(v) for v in values]  # exact for every finite float
    den = max((f.denominator for f in fracs), default=1)  # all powers of two: the largest is a common one
    return [f.numerator * (den // f.denominator) for f in fracs], den


def _sqrt_lower(value: Fraction) -> tuple[Fraction, bool]:
    """A rational ``L <= sqrt(value)`` within ``2**-_SQRT_BITS`` of it, and whether ``L`` is exact."""
    num, den = value.numerator, value.denominator
    root = math.isqrt(num * den << (2 * _SQRT_BITS))
    exact = root * root == num * den << (2 * _SQRT_BITS)
    return Fraction(root, den << _SQRT_BITS), exact


def _float(f: Fraction) -> float:
    """``float(f)``, or an infinity where it is beyond float64 (a hostile answer's sum can be)."""
    try:
        return float(f)
    except OverflowError:
        return math.inf if f > 0 else -math.inf


def _finite(values: Sequence[float]) -> bool:
    return all(math.isfinite(v) for v in values)


def _kind(worst: Violation | None, within: bool) -> Kind:
    if worst is None:
        return "strict"
    return "tolerant" if within else "invalid"


def check_packing(centers: Sequence[Sequence[float]], radii: Sequence[float],
                  tolerance: Fraction = DEFAULT_TOLERANCE) -> ExactCheck:
    """Exact check of circles in the unit square (every wall, every pair) and their exact sum of radii.

    Args:
        centers: (n, 2) floats.
        radii: (n,) floats.
        tolerance: the largest violation (length units: wall excess, or ``r_i + r_j - |c_i - c_j|``)
            that still makes the packing ``tolerant`` rather than ``invalid``.

    Returns:
        An :class:`ExactCheck` whose score is the exact sum of radii.
    """
    xs, ys, rs = [float(c[0]) for c in centers], [float(c[1]) for c in centers], [float(r) for r in radii]
    if not _finite(xs + ys + rs):
        return ExactCheck("invalid", None, None, 0, "a center or radius is not finite")
    ints, den = _scaled(xs + ys + rs)
    n = len(rs)
    X, Y, R = ints[:n], ints[n:2 * n], ints[2 * n:]
    tol = tolerance * den  # in the scaled integer units
    worst: Violation | None = None
    count = 0
    within = True

    def broken(where: str, amount: Fraction, exact: bool, ok_within: bool) -> None:
        nonlocal worst, count, within
        count += 1
        within = within and ok_within
        if worst is None or amount > worst.amount:
            worst = Violation(where, amount, exact)

    for i in range(n):
        for where, excess in ((f"circle {i} has a negative radius", -R[i]),
                              (f"circle {i} crosses the left wall (x - r < 0)", R[i] - X[i]),
                              (f"circle {i} crosses the bottom wall (y - r < 0)", R[i] - Y[i]),
                              (f"circle {i} crosses the right wall (x + r > 1)", X[i] + R[i] - den),
                              (f"circle {i} crosses the top wall (y + r > 1)", Y[i] + R[i] - den)):
            if excess > 0:
                broken(where, Fraction(excess, den), True, excess <= tol)
    for i, j in itertools.combinations(range(n), 2):
        s = R[i] + R[j]
        d2 = (X[i] - X[j]) ** 2 + (Y[i] - Y[j]) ** 2
        if s > 0 and s * s > d2:
            lower, exact = _sqrt_lower(Fraction(d2))
            ok_within = s - tol <= 0 or (s - tol) ** 2 <= d2  # s - sqrt(d2) <= tol, decided exactly
            broken(f"circles {i} and {j} overlap", (s - lower) / den, exact, ok_within)
    score = Fraction(sum(R), den)
    reason = "every constraint holds exactly" if worst is None else (
        f"{count} constraint(s) broken in exact arithmetic; worst: {worst.where} by {_float(worst.amount):.6g}")
    return ExactCheck(_kind(worst, within), score, worst, count, reason)


def check_points(points: Sequence[Sequence[float]], tolerance: Fraction = DEFAULT_TOLERANCE) -> ExactCheck:
    """Exact check of points in [0, 1]^2 and the exact smallest triangle area over every triple.

    Args:
        points: (n, 2) floats.
        tolerance: the largest distance outside the square that still makes the layout ``tolerant``.

    Returns:
        An :class:`ExactCheck` whose score is the exact minimum of ``|cross| / 2`` (0 for collinear points).
    """
    xs, ys = [float(p[0]) for p in points], [float(p[1]) for p in points]
    if not _finite(xs + ys):
        return ExactCheck("invalid", None, None, 0, "a coordinate is not finite")
    ints, den = _scaled(xs + ys)
    n = len(xs)
    X, Y = ints[:n], ints[n:]
    worst: Violation | None = None
    count = 0
    within = True
    for i in range(n):
        excess = max(-X[i], -Y[i], X[i] - den, Y[i] - den)
        if excess > 0:
            count += 1
            within = within and Fraction(excess, den) <= tolerance
            if worst is None or Fraction(excess, den) > worst.amount:
                worst = Violation(f"point {i} lies outside [0, 1]^2", Fraction(excess, den))
    twice = min((abs(X[i] * (Y[j] - Y[k]) + X[j] * (Y[k] - Y[i]) + X[k] * (Y[i] - Y[j]))
                 for i, j, k in itertools.combinations(range(n), 3)), default=None)
    score = None if twice is None else Fraction(twice, 2 * den * den)
    reason = "every point lies in [0, 1]^2 exactly" if worst is None else (
        f"{count} point(s) outside [0, 1]^2 in exact arithmetic; worst: {worst.where} by {_float(worst.amount):.6g}")
    return ExactCheck(_kind(worst, within), score, worst, count, reason)


# ----------------------------------------------------------------------------- tasks that certify


def _array(data: Any, key: str, shape: tuple[int, ...]) -> np.ndarray | str:
    """``data[key]`` as a float64 array of ``shape``, or why it is unusable (hostile data: no coercion of text)."""
    if not isinstance(data, Mapping) or key not in data:
        return f"the answer holds no {key!r}"
    try:
        raw = np.asarray(data[key])
    except (TypeError, ValueError) as exc:
        return f"{key} is not an array of numbers: {exc}"
    if raw.dtype.kind not in "iuf":
        return f"{key} must be numbers, got dtype {raw.dtype}"
    if raw.shape != shape:
        return f"{key} must have shape {shape}, got {raw.shape}"
    return np.asarray(raw, dtype=np.float64)


def _packing(task: Task, data: Any, tolerance: Fraction) -> tuple[ExactCheck, dict[str, Any] | None]:
    n = int(task.n)  # type: ignore[attr-defined]
    centers, radii = _array(data, "centers", (n, 2)), _array(data, "radii", (n,))
    for arr in (centers, radii):
        if isinstance(arr, str):
            return ExactCheck("invalid", None, None, 0, arr), None
    assert isinstance(centers, np.ndarray) and isinstance(radii, np.ndarray)
    c, r = centers.tolist(), radii.tolist()
    solution = {"centers": [[x.hex(), y.hex()] for x, y in c], "radii": [v.hex() for v in r]}
    return check_packing(c, r, tolerance), solution


def _points(task: Task, data: Any, tolerance: Fraction) -> tuple[ExactCheck, dict[str, Any] | None]:
    points = _array(data, "points", (int(task.n), 2))  # type: ignore[attr-defined]
    if isinstance(points, str):
        return ExactCheck("invalid", None, None, 0, points), None
    p = points.tolist()
    return check_points(p, tolerance), {"points": [[x.hex(), y.hex()] for x, y in p]}


def _checker(task: Task) -> Any:
    """The exact checker of a task, or None (tasks without an exact arithmetic check)."""
    from reasearch.evaluators.circle_packing.task import CirclePackingTask
    from reasearch.evaluators.heilbronn.task import HeilbronnTask

    if isinstance(task, CirclePackingTask):
        return _packing
    if isinstance(task, HeilbronnTask):
        return _points
    return None


def supports_certification(task: Task) -> bool:
    """Whether ``task`` has an exact arithmetic check (circle packing and Heilbronn do)."""
    return _checker(task) is not None


def _recheck_solution(task_id: str, solution: Mapping[str, Any], tolerance: Fraction) -> ExactCheck:
    """The exact check of a certificate's own solution (floats stored as ``float.hex``)."""
    if task_id.startswith("circle_packing/"):
        return check_packing([[float.fromhex(x), float.fromhex(y)] for x, y in solution["centers"]],
                             [float.fromhex(v) for v in solution["radii"]], tolerance)
    if task_id.startswith("heilbronn/"):
        return check_points([[float.fromhex(x), float.fromhex(y)] for x, y in solution["points"]], tolerance)
    raise ConfigError(f"{task_id} has no exact certification")


# --------------------------------------------------------------------------------------- certificate


def _frac(f: Fraction | None) -> dict[str, Any] | None:
    """``{"exact": "p/q", "float": x}``; ``x`` is null where the value is beyond float64 (JSON has no infinity)."""
    if f is None:
        return None
    x = _float(f)
    return {"exact": f"{f.numerator}/{f.denominator}", "float": x if math.isfinite(x) else None}


def _unfrac(d: Mapping[str, Any] | None) -> Fraction | None:
    return None if d is None else Fraction(d["exact"])


@dataclasses.dataclass(frozen=True, slots=True)
class Certificate:
    """A claimed result re-scored exactly. JSON: :meth:`to_json` / :meth:`from_json` (they round-trip).

    ``kind`` is ``strict``, ``tolerant`` or ``invalid``; ``score`` is the exact score (a ``Fraction``);
    ``float_status``/``float_score`` are the task's own float64 verdict on the same answer; ``solution``
    holds the answer's floats as ``float.hex`` so anyone can re-check it (:meth:`recheck`).
    """

    task_id: str
    task_version: int
    task_params: dict[str, Any]
    candidate_sha256: str
    evaluator_hash: str
    certifier_hash: str
    seed: int | None
    sandbox_mode: str
    kind: Kind
    reason: str
    tolerance: Fraction
    score: Fraction | None
    max_violation: Violation | None
    violations: int
    float_status: str
    float_score: float | None
    solution: dict[str, Any] | None
    created: str
    reasearch_version: str

    def to_dict(self) -> dict[str, Any]:
        worst = self.max_violation
        return {
            "format": CERTIFICATE_FORMAT,
            "task_id": self.task_id, "task_version": self.task_version, "task_params": self.task_params,
            "candidate_sha256": self.candidate_sha256, "evaluator_hash": self.evaluator_hash,
            "certifier_hash": self.certifier_hash, "seed": self.seed, "sandbox_mode": self.sandbox_mode,
            "kind": self.kind, "reason": self.reason, "tolerance": _frac(self.tolerance), "score": _frac(self.score),
            "max_violation": None if worst is None else {
                "where": worst.where, **(_frac(worst.amount) or {}), "bound": "exact" if worst.exact else "upper"},
            "violations": self.violations,
            "float_check": {"status": self.float_status, "score": self.float_score},
            "solution": self.solution, "created": self.created, "reasearch_version": self.reasearch_version,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Certificate:
        if d.get("format") != CERTIFICATE_FORMAT:
            raise ConfigError(f"not a {CERTIFICATE_FORMAT} certificate (format {d.get('format')!r})")
        worst = d["max_violation"]
        tolerance = _unfrac(d["tolerance"])
        assert tolerance is not None
        return cls(
            task_id=d["task_id"], task_version=int(d["task_version"]), task_params=dict(d["task_params"]),
            candidate_sha256=d["candidate_sha256"], evaluator_hash=d["evaluator_hash"],
            certifier_hash=d["certifier_hash"], seed=d["seed"], sandbox_mode=d["sandbox_mode"], kind=d["kind"],
            reason=d["reason"], tolerance=tolerance, score=_unfrac(d["score"]),
            max_violation=None if worst is None else Violation(
                worst["where"], Fraction(worst["exact"]), worst["bound"] == "exact"),
            violations=int(d["violations"]), float_status=d["float_check"]["status"],
            float_score=d["float_check"]["score"], solution=d["solution"], created=d["created"],
            reasearch_version=d["reasearch_version"],
        )

    @classmethod
    def from_json(cls, text: str) -> Certificate:
        return cls.from_dict(json.loads(text))

    def recheck(self) -> ExactCheck:
        """The exact check of the stored solution, redone from the certificate alone (no sandbox)."""
        if self.solution is None:
            return ExactCheck("invalid", None, None, 0, self.reason)
        return _recheck_solution(self.task_id, self.solution, self.tolerance)

    def summary(self) -> str:
        """A few lines for a person: kind, exact score, worst violation, the task's float verdict."""
        lines = [f"{self.task_id}: {self.kind} ({self.reason})"]
        if self.score is not None:
            lines.append(f"  exact score {self.score.numerator}/{self.score.denominator}")
            lines.append(f"  = {_float(self.score)!r}")
        if self.max_violation is not None:
            w = self.max_violation
            bound = "exact" if w.exact else "upper bound"
            lines.append(f"  max violation {_float(w.amount):.6g} ({bound}): {w.where}; "
                         f"tolerance {_float(self.tolerance):g}")
        fs = "" if self.float_score is None else f" score {self.float_score!r}"
        lines.append(f"  task's float64 check: {self.float_status}{fs}")
        lines.append(f"  candidate sha256 {self.candidate_sha256}; evaluator {self.evaluator_hash}")
        sandbox = ("process (no filesystem or network isolation)" if self.sandbox_mode == "process"
                   else self.sandbox_mode)
        lines.append(f"  sandbox={sandbox}")
        return "\n".join(lines)


def _certifier_hash() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def certify(task: Task, candidate_source: str, *, seed: int | None = 0,
            tolerance: Fraction = DEFAULT_TOLERANCE, executor: SandboxRunner | None = None) -> Certificate:
    """Runs the candidate in the sandbox (as ``Task.evaluate`` does) and re-scores its answer exactly.

    Args:
        task: a circle packing or Heilbronn task (see :func:`supports_certification`).
        candidate_source: the candidate program's source text.
        seed: the evaluation seed.
        tolerance: the largest exact violation a ``tolerant`` claim may have (>= 0).
        executor: a sandbox runner; default: the process-wide warm pool.

    Returns:
        A :class:`Certificate`; a candidate that fails to run gives an ``invalid`` one.

    Raises:
        ConfigError: the task has no exact certification, or the tolerance is negative.
    """
    from reasearch import __version__

    checker = _checker(task)
    if checker is None:
        raise ConfigError(f"{task.spec.id} has no exact certification; tasks that have one: "
                          "circle_packing/n{N}-v1, heilbronn/n{N}-v1")
    tolerance = Fraction(tolerance)
    if tolerance < 0:
        raise ConfigError(f"the tolerance must be >= 0, got {float(tolerance):g}")
    if not isinstance(candidate_source, str):
        raise TypeError(f"candidate_source must be str, not {type(candidate_source).__name__}")
    runner = executor if executor is not None else default_runner()
    outcome = runner.run(task.build_request(candidate_source, seed=seed))
    float_result = task.result_from_outcome(outcome, candidate_source, seed=seed)
    if outcome.status is Status.OK:
        check, solution = checker(task, outcome.value, tolerance)
    else:
        first = (float_result.feedback.strip().splitlines() or [outcome.status.value])[0]
        check, solution = ExactCheck("invalid", None, None, 0, f"the candidate did not run: {first}"), None
    spec = task.spec
    return Certificate(
        task_id=spec.id, task_version=spec.version, task_params=dict(spec.params),
        candidate_sha256=candidate_sha256(candidate_source), evaluator_hash=task.evaluator_hash(),
        certifier_hash=_certifier_hash(), seed=seed, sandbox_mode=outcome.sandbox_mode, kind=check.kind,
        reason=check.reason, tolerance=tolerance, score=check.score, max_violation=check.max_violation,
        violations=check.violations, float_status=float_result.status.value, float_score=float_result.score,
        solution=solution, created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        reasearch_version=__version__,
    )
