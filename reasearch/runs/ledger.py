"""Budget units, caps and the arithmetic of the one ledger (docs/architecture.md, invariant 4).

The ledger itself is a table of the run store (:mod:`reasearch.runs.store`): every debit is a row
keyed by ``(run, step, unit, note)``, so replaying a step never debits twice, and the debit of an
evaluation is written in the same transaction as its result. This module holds what is independent
of storage: the units, a run's caps, and how "used / left / refused" are computed and worded.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reasearch.errors import ConfigError

__all__ = ["Unit", "Budget", "LedgerEntry", "refusal_message"]


class Unit(str, enum.Enum):
    """A unit of budget. Each run caps any subset of them."""

    EVALUATIONS = "evaluations"  # evaluator calls (program tasks)
    STUDENT_CALLS = "student_calls"  # student-model calls (prompt tasks)
    EXPERIMENTS = "experiments"  # training runs (training tasks)
    GPU_SECONDS = "gpu_seconds"
    TOKENS = "tokens"  # model tokens (input + output) of the agent and its helpers
    STUDENT_TOKENS = "student_tokens"  # student-model tokens (input + output) of prompt tasks, apart from the agent's
    DOLLARS = "dollars"
    MODEL_CALLS = "model_calls"
    SUBMISSIONS = "submissions"  # private-split scores of a competition-style task (tabular/csv-v2's submit)

    def __str__(self) -> str:
        return self.value

    @property
    def label(self) -> str:
        """Singular words for messages: ``evaluation budget spent: 50/50 used``."""
        return _LABELS[self]


_LABELS = {
    Unit.EVALUATIONS: "evaluation",
    Unit.STUDENT_CALLS: "student-call",
    Unit.EXPERIMENTS: "experiment",
    Unit.GPU_SECONDS: "GPU-seconds",
    Unit.TOKENS: "token",
    Unit.STUDENT_TOKENS: "student-token",
    Unit.DOLLARS: "dollar",
    Unit.MODEL_CALLS: "model-call",
    Unit.SUBMISSIONS: "submission",
}


def _unit(key: Unit | str) -> Unit:
    try:
        return key if isinstance(key, Unit) else Unit(str(key))
    except ValueError:
        raise ConfigError(f"unknown budget unit {key!r}; known units: {[u.value for u in Unit]}") from None


@dataclass(frozen=True, slots=True)
class Budget:
    """Caps per unit. A unit that is missing has no cap.

    Attributes:
        caps: the cap of each capped unit (finite, >= 0).
    """

    caps: Mapping[Unit | str, float] = field(default_factory=dict)  # normalized to Unit keys

    def __post_init__(self) -> None:
        caps: dict[Unit, float] = {}
        for key, value in dict(self.caps).items():
            unit = _unit(key)
            try:
                cap = float(value)
            except (TypeError, ValueError):
                raise ConfigError(f"budget cap for {unit.value} must be a number, not {value!r}") from None
            if not math.isfinite(cap) or cap < 0:
                raise ConfigError(f"budget cap for {unit.value} must be finite and >= 0, not {value!r}")
            caps[unit] = cap
        object.__setattr__(self, "caps", caps)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Budget:
        """``Budget.from_dict({"evaluations": 50, "dollars": 2.5})``; unknown units are an error."""
        return cls(dict(d or {}))

    def to_dict(self) -> dict[str, float]:
        return {_unit(unit).value: cap for unit, cap in self.caps.items()}

    def cap(self, unit: Unit | str) -> float | None:
        return self.caps.get(_unit(unit))

    def units(self) -> dict[Unit, float]:
        """The caps, keyed by :class:`Unit`."""
        return {_unit(u): c for u, c in self.caps.items()}

    def left(self, unit: Unit | str, used: float) -> float | None:
        """What is left of ``unit`` after ``used`` (never negative); None when uncapped."""
        cap = self.cap(unit)
        return None if cap is None else max(cap - used, 0.0)

    def allows(self, unit: Unit | str, used: float, amount: float = 1.0) -> bool:
        """True when ``amount`` more of ``unit`` fits under its cap.

        An amount of 0 (a cost known only afterwards, such as GPU-seconds) needs something left: the
        evaluation that crosses such a cap is the last one it lets start.
        """
        cap = self.cap(unit)
        if cap is None:
            return True
        return used < cap if amount == 0 else used + amount <= cap + 1e-12


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One debit: ``amount`` of ``unit`` spent by ``run_id`` at ``step`` (``note`` says on what)."""

    run_id: str
    step: int
    unit: Unit
    amount: float
    note: str = ""
    ts: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "step": self.step, "unit": self.unit.value, "amount": self.amount,
                "note": self.note, "ts": self.ts}


def _num(x: float) -> str:
    return f"{x:g}" if float(x).is_integer() else f"{x:.4g}"


def refusal_message(unit: Unit, used: float, cap: float) -> str:
    """The feedback of a refused request: ``evaluation budget spent: 50/50 used``."""
    return (f"{unit.label} budget spent: {_num(used)}/{_num(cap)} used, {_num(max(cap - used, 0.0))} left; "
            f"this request was not run (raise the run's '{unit.value}' cap to continue)")
