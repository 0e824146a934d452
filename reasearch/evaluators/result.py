"""Frozen evaluation records: :class:`Status`, :class:`Provenance` and :class:`EvalResult`."""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from reasearch.engine.protocol import Status

__all__ = ["Status", "Provenance", "EvalResult"]




@dataclass(frozen=True, slots=True)
class Provenance:
    """Everything needed to reproduce (or distrust) a result."""

    task_id: str
    task_version: int
    evaluator_hash: str
    candidate_sha256: str
    seed: int | None
    sandbox_mode: str
    versions: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["versions"] = dict(self.versions)
        d["params"] = dict(self.params)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Provenance:
        return cls(**{k: d[k] for k in d})


def _clean_float(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


@dataclass(frozen=True, slots=True)
class EvalResult:
    """The outcome of one evaluation.

    Attributes:
        status: how it ended; ``score`` is set only when ``status`` is ``OK``.
        score: the task's raw objective (direction given by the task spec).
        normalized_score: score relative to the best known value (1.0 = best known; higher is
            better for both directions).
        metrics: plain numbers and strings the task reports beside the score.
        feedback: text for the agent: what was wrong, and where.
        wall_s: wall time of the candidate run, measured by the trusted side.
        cpu_s: CPU time of the candidate run (rusage of the child), measured by the trusted side.
        provenance: task id and version, evaluator hash, candidate hash, seed, sandbox mode, versions.
        solution: the candidate's answer as plain JSON data (for reports and pictures), or None.
        cached: True when served from the evaluation cache at zero cost.
    """

    status: Status
    score: float | None
    normalized_score: float | None
    metrics: Mapping[str, Any]
    feedback: str
    wall_s: float
    cpu_s: float
    provenance: Provenance | None = None
    solution: Mapping[str, Any] | None = None
    cached: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.status, Status):
            object.__setattr__(self, "status", Status(self.status))
        if self.status is not Status.OK and (self.score is not None or self.normalized_score is not None):
            raise ValueError(f"a {self.status} result cannot carry a score (failures never earn fitness)")
        if self.status is Status.OK and self.score is None:
            raise ValueError("an OK result needs a score")
        if self.status is Status.OK and not math.isfinite(float(self.score)):  # type: ignore[arg-type]
            raise ValueError("an OK result needs a finite score")

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @classmethod
    def failure(
        cls,
        status: Status,
        feedback: str,
        *,
        wall_s: float = 0.0,
        cpu_s: float = 0.0,
        metrics: Mapping[str, Any] | None = None,
        provenance: Provenance | None = None,
    ) -> EvalResult:
        """A result without a score (any status but ``OK``)."""
        if status is Status.OK:
            raise ValueError("failure() needs a non-OK status")
        return cls(status, None, None, dict(metrics or {}), feedback, wall_s, cpu_s, provenance)

    def with_(self, **changes: Any) -> EvalResult:
        """A copy with some fields replaced (the record itself is frozen)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "score": _clean_float(self.score),
            "normalized_score": _clean_float(self.normalized_score),
            "metrics": _jsonable(self.metrics),
            "feedback": self.feedback,
            "wall_s": float(self.wall_s),
            "cpu_s": float(self.cpu_s),
            "provenance": self.provenance.to_dict() if self.provenance else None,
            "solution": _jsonable(self.solution) if self.solution is not None else None,
            "cached": bool(self.cached),
        }

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EvalResult:
        prov = d.get("provenance")
        return cls(
            status=Status(d["status"]),
            score=d.get("score"),
            normalized_score=d.get("normalized_score"),
            metrics=dict(d.get("metrics") or {}),
            feedback=d.get("feedback", ""),
            wall_s=float(d.get("wall_s", 0.0)),
            cpu_s=float(d.get("cpu_s", 0.0)),
            provenance=Provenance.from_dict(prov) if prov else None,
            solution=d.get("solution"),
            cached=bool(d.get("cached", False)),
        )

    @classmethod
    def from_json(cls, s: str) -> EvalResult:
        return cls.from_dict(json.loads(s))


def _jsonable(obj: Any) -> Any:
    """Turns NumPy scalars/arrays and tuples into plain JSON types (non-finite floats -> None)."""
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy arrays and scalars
        return _jsonable(obj.tolist())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, enum.Enum):
        return obj.value
    return obj
