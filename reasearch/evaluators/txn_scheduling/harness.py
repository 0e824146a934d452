# reasearch: jail (imported inside the sandbox: see reasearch/engine/_runtime.py)
"""The harness that runs inside the sandbox around a transaction-scheduling candidate.

It seeds ``random`` and ``numpy.random`` from the payload seed, builds each workload, calls the
candidate's ``get_best_schedule(workload, num_seqs)`` once per workload (in order, as the published
evaluator does) and sends back only plain lists. The trusted side re-validates everything and
recomputes every makespan: nothing this code returns is believed.
"""

from __future__ import annotations

import math
import operator
import random
from collections.abc import Callable
from typing import Any

import numpy as np

from reasearch.evaluators.txn_scheduling.workload import Workload

__all__ = ["run_schedules", "split_result", "plain_schedule"]

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
    seed = int(payload.get("seed") or 0)
    random.seed(seed)
    np.random.seed(seed % 2**32)  # NumPy's legacy seed must fit in 32 bits
    num_seqs = int(payload["num_seqs"])
    schedules: list[Any] = []
    reported: list[Any] = []
    for item in payload["workloads"]:
        workload = Workload(item["txns"], name=item["name"])
        makespan, schedule = split_result(entry_fn(workload, num_seqs))
        schedules.append(plain_schedule(schedule))
        reported.append(_finite_or_none(makespan))
    return {"schedules": schedules, "reported": reported}
