# reasearch: jail (imported inside the sandbox: see reasearch/engine/_runtime.py)
"""The harness that runs inside the sandbox around a transaction-scheduling candidate.

It seeds ``random``, ``numpy.random`` (and torch, when the candidate imported it) from the payload
seed, builds each workload, calls the candidate's ``get_best_schedule`` once per workload (in order,
as the published evaluator does) with what its signature asks for (``workload``, and ``num_seqs``
and ``seed`` when it takes them) and sends back only plain lists. The trusted side re-validates everything and
recomputes every makespan: nothing this code returns is believed.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

from reasearch.evaluators._entry_call import bind_entry, seed_args, seed_everything
from reasearch.evaluators.txn_scheduling.workload import Workload

__all__ = ["ENTRY_ARGS", "run_schedules", "split_result", "plain_schedule"]

ENTRY_ARGS = seed_args(
    {"workload": ("workload", "wl"), "num_seqs": ("num_seqs", "n_seqs", "num_sequences")},
    positional=("workload", "num_seqs"),
    required=("workload",),
    forms=("(workload)", "(workload, num_seqs)", "(workload, num_seqs, seed=...)", "(workload, seed=...)"),
)
"""Published schedulers take the workload, most also ``num_seqs`` (positionally), some a seed."""

_MAX_ENTRIES = 100_000  # a longer "schedule" is not copied back (it is invalid either way)


def _is_number(x: Any) -> bool:
    """True for ints and floats, NumPy scalars included (bool excluded)."""
    if isinstance(x, bool):
        return False
    if isinstance(x, (int, float)):
        return True
    return hasattr(x, "dtype") and getattr(x, "ndim", 1) == 0 and x.dtype.kind in "iuf"


def _is_sequence(x: Any) -> bool:
    """True for what can be a schedule: lists, tuples, ranges, 1-D arrays."""
    return isinstance(x, (list, tuple, range)) or (hasattr(x, "tolist") and getattr(x, "ndim", 0) == 1)


def split_result(result: Any) -> tuple[Any, Any]:
    """``(reported_makespan, schedule)`` from ``schedule`` or ``(makespan, schedule)``."""
    if isinstance(result, (tuple, list)) and len(result) == 2 and _is_number(result[0]) and _is_sequence(result[1]):
        return result[0], result[1]
    return None, result


def plain_schedule(schedule: Any) -> list[Any] | dict[str, str]:
    """A schedule as a plain list (NumPy ints become ints), or ``{"error": ...}`` when it is not a list."""
    if not _is_sequence(schedule):
        return {"error": f"returned {type(schedule).__name__}, not a list of transaction indices"}
    if len(schedule) > _MAX_ENTRIES:
        return {"error": f"returned {len(schedule)} entries"}
    items = schedule.tolist() if hasattr(schedule, "tolist") else list(schedule)
    out: list[Any] = []
    for x in items:
        if isinstance(x, (bool, int, float, str)) or x is None:
            out.append(x)
            continue
        try:
            out.append(operator.index(x))  # NumPy integers
        except TypeError:
            out.append(repr(x)[:40])  # kept visible for the error message, never used as an index
    return out


def _finite_or_none(x: Any) -> float | None:
    """A reported makespan as a finite float, or None (it is only ever compared, never believed)."""
    try:
        value = float(x)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def run_schedules(entry_fn: Callable[..., Any], payload: dict[str, Any]) -> dict[str, Any]:
    """Calls the candidate on every workload of ``payload``.

    Args:
        entry_fn: the candidate's ``get_best_schedule``.
        payload: ``{"seed": int, "num_seqs": int, "workloads": [{"name": str, "txns": {txn: ops}}]}``.

    Returns:
        ``{"schedules": [list | {"error": text}, ...], "reported": [number | None, ...]}``, one entry per
        workload, in payload order.
    """
    seed = seed_everything(payload.get("seed"))
    num_seqs = int(payload["num_seqs"])
    call = bind_entry(entry_fn, ENTRY_ARGS)  # refuses an entry point it cannot call, naming the forms
    schedules: list[Any] = []
    reported: list[Any] = []
    for item in payload["workloads"]:
        workload = Workload(item["txns"], name=item["name"])
        makespan, schedule = split_result(call({"workload": workload, "num_seqs": num_seqs, "seed": seed}))
        schedules.append(plain_schedule(schedule))
        reported.append(_finite_or_none(makespan))
    return {"schedules": schedules, "reported": reported}
