"""How EPLB's ``t_alg`` is measured: the algorithm, not the sandbox transport, out of the candidate's reach.

The problem: the parent can only time a whole round trip (send one window, the worker relays it, the
candidate computes, the three arrays are framed and copied back), ~0.6 ms on top of the algorithm.
A clock inside the sandbox sees only the algorithm, but it runs in the candidate's own process, where
the candidate can patch anything (including the harness's clock or the number it reports).

The choice: both, each bounding the other.

1. The harness reads ``time.perf_counter_ns`` (bound when the harness module was imported, before any
   candidate code ran) around the candidate's call only and reports it as ``t_jail``.
2. The parent times each round trip itself (``wall``).
3. After the candidate's session, the parent opens a *calibration* session of its own (a trusted
   placeholder program in the same harness, never the candidate's code) and sends the same window
   with an ``echo`` request: the harness returns zero arrays of the candidate's answer shapes and
   dtypes through the same path. The median of :data:`CALIBRATION_CALLS` such round trips is the
   transport cost ``t_transport`` of one call, measured in this evaluation, under this load.
4. Per call: ``t_alg = min(wall, max(t_jail, wall - t_transport))``.

An honest candidate gets its own algorithm time (``t_jail``), except on a call whose transport was
slower than the calibrated median, where it gets ``wall - t_transport``. A candidate that lies (reports
0, or patches the clock) gets ``wall - t_transport``: the transport it avoids is the difference between
this call's transport and the calibrated median, i.e. noise, never the whole round trip. It can never
claim more than ``wall`` nor less than the parent's own figure minus the trusted transport.

Torch candidates: the calibration echoes NumPy arrays (a calibration session that imported torch would
cost seconds); converting a tensor (``from_numpy`` on the way in, ``.numpy()`` on the way back) costs
microseconds and is not subtracted.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CALIBRATION_CALLS", "CALIBRATION_SOURCE", "MIN_T_ALG_S", "CallTiming", "answer_signature", "bounded_t_alg"]

CALIBRATION_CALLS = 5
CALIBRATION_SOURCE = (
    '"""The evaluator\'s own placeholder: echo requests never call it."""\n'
    "def rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus):\n"
    "    raise RuntimeError('the calibration session only echoes')\n"
)
_MAX_T_NS = 10**12  # a reported time beyond 1000 s is not a time
MIN_T_ALG_S = 1e-6  # below the clocks' useful resolution; keeps 0.002 / t_alg finite


@dataclass(frozen=True, slots=True)
class CallTiming:
    """One timed call: the parent's round trip and the time the sandbox reported (None if unusable)."""

    wall_s: float
    t_jail_s: float | None


def reported_seconds(value: Any) -> float | None:
    """The harness's ``t_ns`` as seconds, or None when it is not a plausible non-negative integer."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        return None
    ns = int(value)
    return ns / 1e9 if 0 <= ns <= _MAX_T_NS else None


def answer_signature(answer: Mapping[str, Any]) -> list[list[Any]]:
    """``[[shape, dtype], ...]`` of the three arrays of an answer (what the calibration echoes)."""
    sig = []
    for name in ("phy2log", "log2phy", "logcnt"):
        arr = answer.get(name)
        shape = list(getattr(arr, "shape", ()))
        dtype = str(getattr(arr, "dtype", "int64"))
        sig.append([shape, dtype if np.dtype(dtype).kind in "biuf" else "int64"])
    return sig


def signature_bytes(sig: Sequence[Sequence[Any]]) -> int:
    return sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize for shape, dtype in sig)


def transport_of(calibration: Sequence[CallTiming]) -> float | None:
    """The median round trip of the echo calls, less what the harness itself reported (~0)."""
    usable = [c.wall_s - (c.t_jail_s or 0.0) for c in calibration]
    return statistics.median(usable) if usable else None


def bounded_t_alg(call: CallTiming, transport_s: float | None) -> tuple[float, bool]:
    """``(t_alg, bounded)``: the algorithm's time of one call; ``bounded`` when the parent's bound decided it.

    Without a calibration (``transport_s`` None) the parent's own round trip is the only figure trusted.
    """
    if transport_s is None:
        return call.wall_s, True
    floor = max(call.wall_s - transport_s, 0.0)
    if call.t_jail_s is None or call.t_jail_s < floor:
        return max(floor, MIN_T_ALG_S), True
    return max(min(call.t_jail_s, call.wall_s), MIN_T_ALG_S), False
