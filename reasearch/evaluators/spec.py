# reasearch: jail (imported inside the sandbox: see reasearch/engine/_runtime.py)
"""``TaskSpec``: the JSON-round-trippable description of a task."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from reasearch.evaluators.scores import is_better

__all__ = ["TaskSpec"]

Direction = Literal["maximize", "minimize"]


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """Static facts about a task (one registered id).

    Attributes:
        id: registry id, e.g. ``circle_packing/n26-v1``.
        version: the ``-vN`` of the id; bumped whenever scoring changes.
        direction: ``maximize`` or ``minimize``.
        time_limit_s: wall-time limit of one evaluation.
        memory_mb: address-space limit of one evaluation.
        best_known: best known score (raw), or None.
        best_known_source: where ``best_known`` comes from.
        entry_point: the function a candidate defines.
        entry_aliases: other accepted names (so published seed programs run unchanged).
        deterministic: False when the same candidate and seed can score differently (timed scores);
            such tasks are never cached.
        seed_score: the recorded score of ``seed_program()`` under seed 0 (checked by ``check_task``).
        seed_score_rtol: relative tolerance of that check (0 for exact tasks).
        params: the constructor parameters that made this task.
        task_class: ``"package.module:Class"`` that builds it (Gymnasium's ``EnvSpec.entry_point``):
            ``reasearch.make(spec)`` rebuilds the task exactly from the spec alone, registered or not.
    """

    id: str
    version: int
    direction: Direction
    time_limit_s: float
    memory_mb: int
    best_known: float | None = None
    best_known_source: str = ""
    entry_point: str = "run"
    entry_aliases: tuple[str, ...] = ()
    deterministic: bool = True
    seed_score: float | None = None
    seed_score_rtol: float = 1e-9
    params: Mapping[str, Any] = field(default_factory=dict)
    task_class: str = ""

    def __post_init__(self) -> None:
        if self.direction not in ("maximize", "minimize"):
            raise ValueError(f"direction must be 'maximize' or 'minimize', not {self.direction!r}")
        if not (self.id.endswith(f"-v{self.version}") or self.id.endswith(f"/v{self.version}")):
            raise ValueError(f"task id {self.id!r} must end with -v{self.version} (or be 'namespace/v{self.version}')")
        for name in ("time_limit_s", "memory_mb", "best_known", "seed_score", "seed_score_rtol"):
            value = getattr(self, name)
            if isinstance(value, float) and not math.isfinite(value):  # a spec read back from JSON can hold NaN
                raise ValueError(f"task spec {self.id}: {name} must be a finite number, not {value!r}")
        object.__setattr__(self, "entry_aliases", tuple(self.entry_aliases))
        object.__setattr__(self, "params", dict(self.params))

    @property
    def entries(self) -> tuple[str, ...]:
        """The entry point followed by its aliases, in lookup order."""
        return (self.entry_point, *self.entry_aliases)

    def normalize(self, score: float) -> float | None:
        """Score relative to best known; 1.0 = best known, higher is better in both directions."""
        if self.best_known is None or self.best_known == 0:
            return None
        if self.direction == "maximize":
            return float(score) / self.best_known
        return self.best_known / float(score) if score > 0 else None

    def is_better(self, a: float, b: float | None) -> bool:
        """True when score ``a`` beats ``b`` (None is beaten by anything)."""
        return is_better(self.direction, a, b)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["entry_aliases"] = list(self.entry_aliases)
        d["params"] = dict(self.params)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TaskSpec:
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown TaskSpec keys: {sorted(unknown)}")
        return cls(**d)

    @classmethod
    def from_json(cls, s: str) -> TaskSpec:
        return cls.from_dict(json.loads(s))
