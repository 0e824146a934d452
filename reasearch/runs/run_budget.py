"""A run's budget rules around the store's reservations, outside the :class:`~reasearch.runs.Run` class.

Costs as :class:`Unit` amounts (finite, >= 0), the words of a refused reservation (a fleet-wide cap says
so), whether a refusal is only what other drivers hold in flight, and a fleet member's fleet-wide caps
and what its fleet has left. Costs come from the task's trusted side (its declared estimate and the
measured evaluation costs), never from candidate output; a bad amount is a ConfigError.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reasearch.errors import ConfigError
from reasearch.evaluators.result import EvalResult, Provenance, Status
from reasearch.runs.fleet_link import FleetLink
from reasearch.runs.ledger import Budget, Unit, refusal_message
from reasearch.runs.store import Refusal, Store

__all__ = ["cost_units", "fleet_caps", "fleet_left", "held_by_others_only", "refusal_text", "refused_result",
           "refused_while_held"]


def refusal_text(refusal: tuple[Unit, float, float]) -> str:
    """The feedback of a refused reservation; a fleet-wide cap says so (raising the run's cap would not help)."""
    unit, used, cap = refusal
    fleet_id = getattr(refusal, "fleet_id", None)
    if fleet_id is None:
        return refusal_message(unit, used, cap)
    return (f"fleet {fleet_id}'s {unit.label} budget is spent: {used:g}/{cap:g} used or held by its members; "
            f"this request was not run (raise the fleet's '{unit.value}' cap to continue)")


def held_by_others_only(refusal: Refusal, amounts: Mapping[Unit, float]) -> bool:
    """True when the request would fit but for what other drivers of the run hold (not the budget's end)."""
    unit, used, cap = refusal
    held = getattr(refusal, "held_by_others", 0.0)
    return held > 0 and Budget({unit: cap}).allows(unit, used - held, float(amounts.get(unit, 0.0)))


def refused_result(refusal: Refusal, estimate: Mapping[Unit, float], *, provenance: Provenance) -> EvalResult:
    """The ``REFUSED`` result recorded at a step whose evaluation does not fit under a cap (nothing ran)."""
    unit, used, cap = refusal
    return EvalResult.failure(
        Status.REFUSED, refusal_text(refusal),
        metrics={"unit": unit.value, "used": used, "cap": cap, "left": max(cap - used, 0.0), "needed": estimate[unit]},
        provenance=provenance)


def refused_while_held(refusal: Refusal, *, step: int, waited_s: float, provenance: Provenance) -> EvalResult:
    """The ``REFUSED`` result, not recorded, of a step that other drivers' evaluations in flight kept out
    after ``waited_s`` seconds of waiting (the step can be run again once they end)."""
    unit, used, cap = refusal
    return EvalResult.failure(
        Status.REFUSED,
        f"the {unit.value} budget is held by evaluations in flight of other drivers of this run "
        f"({refusal.held_by_others:g} of {used:g}/{cap:g} used or held) after waiting {waited_s:g} s; "
        f"step {step} was not recorded: run it again once they finish",
        metrics={"unit": unit.value, "used": used, "cap": cap, "held_by_others": refusal.held_by_others,
                 "recorded": False},
        provenance=provenance)


def cost_units(costs: Mapping[Any, Any]) -> dict[Unit, float]:
    """Costs keyed by :class:`Unit`, each a finite amount >= 0."""
    out: dict[Unit, float] = {}
    for key, value in costs.items():
        amount = float(value)
        if not (amount >= 0 and amount != float("inf")):
            raise ConfigError(f"an evaluation cost must be a finite amount >= 0, not {key}={value!r}")
        out[Unit(key)] = amount
    return out


def fleet_caps(config: Mapping[str, Any]) -> tuple[str, dict[Unit, float]] | None:
    """``(fleet id, fleet-wide caps)`` of a fleet member (its run ``config``) with such caps; else None."""
    link = FleetLink.from_config(config)
    caps = Budget.from_dict(link.caps).units() if link is not None else {}
    return (link.id, caps) if link is not None and caps and link.id else None


def fleet_left(store: Store, config: Mapping[str, Any], left: dict[Unit, float | None]) -> dict[Unit, float | None]:
    """``left`` lowered to what the run's fleet has left under its fleet-wide caps (if any)."""
    link = FleetLink.from_config(config)
    caps = Budget.from_dict(link.caps).units() if link is not None else {}
    if link is None or not caps:
        return left
    used = store.fleet_usage(link.id)
    for unit, cap in caps.items():
        rest = max(cap - used.get(unit, 0.0), 0.0)
        own = left.get(unit)
        left[unit] = rest if own is None else min(own, rest)
    return left
