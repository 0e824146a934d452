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
   placeholder program in the same harness, never the candidate's code) and *replays* the calls: for
   each timed call (at most :data:`MAX_REPLAYS`, evenly chosen) it sends the same window with an
   ``echo`` request that busy-waits as long as the candidate claimed (capped at :data:`REPLAY_CAP_S`)
   and returns zero arrays of the candidate's answer shapes and dtypes through the same path. Each
   replay's round trip less its trusted wait is one sample of the transport, measured in this
   evaluation, under this load, with the same CPU burst before it (a loaded machine preempts a busy
   process in its transport more often than an idle one: an echo without the wait would under-measure).
4. Over the whole evaluation (the score uses the mean): ``lower = mean(wall) - mean(transport) - 2 *
   se``, with ``se`` the standard error of that difference (calibration spread, ``1/k + 1/n``). If the
   mean claimed time is at least ``lower`` the claims stand (each clipped to its own ``wall``); if not,
   the claims are overruled: each call counts ``wall - mean(transport) - 2 * se``.

An honest candidate gets its own algorithm time except when the transport noise exceeds two standard
errors (rare). A candidate that lies (reports 0, or patches the clock) gets the parent's figure less
the calibrated transport: what it avoids is noise, never the round trip, and its replays (which wait
only as long as it claimed) cannot inflate the calibrated transport.

Torch candidates: the calibration echoes NumPy arrays (a calibration session that imported torch would
cost seconds); converting a tensor (``from_numpy`` on the way in, ``.numpy()`` on the way back) costs
microseconds and is not subtracted.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CALIBRATION_SOURCE", "MAX_REPLAYS", "MIN_T_ALG_S", "REPLAY_CAP_S", "CallTiming", "Timing",
           "answer_signature", "decide", "replay_plan", "replay_wait_ns"]

MAX_REPLAYS = 32
REPLAY_CAP_S = 0.02  # past 20 ms of algorithm the transport (< 1 ms idle) is a small share anyway
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


def replay_plan(calls: Sequence[CallTiming]) -> list[int]:
    """Indices of the calls to replay: all of them, or :data:`MAX_REPLAYS` spread evenly."""
    n = len(calls)
    if n <= MAX_REPLAYS:
        return list(range(n))
    return sorted({round(i * (n - 1) / (MAX_REPLAYS - 1)) for i in range(MAX_REPLAYS)})


def replay_wait_ns(call: CallTiming) -> int:
    """How long the replay of ``call`` busy-waits: what the candidate claimed, capped."""
    return int(min(call.t_jail_s or 0.0, REPLAY_CAP_S) * 1e9)


@dataclass(frozen=True, slots=True)
class Timing:
    """The evaluation's timing verdict.

    Attributes:
        t_alg: per call, the algorithm's time in seconds (what the score uses).
        bounded: True when the claims were overruled by the parent's bound.
        transport_s: mean calibrated transport per call (None without a calibration).
        lower_s: the bound on the mean algorithm time (None without a calibration).
    """

    t_alg: list[float]
    bounded: bool
    transport_s: float | None
    lower_s: float | None


def decide(calls: Sequence[CallTiming], transports: Sequence[float]) -> Timing:
    """Applies the rule of the module docstring to the timed calls and the replays' transports."""
    walls = [c.wall_s for c in calls]
    claims = [min(max(c.t_jail_s, 0.0), c.wall_s) if c.t_jail_s is not None else None for c in calls]
    if not transports:  # no calibration: the parent's round trip is the only trusted figure
        return Timing([max(w, MIN_T_ALG_S) for w in walls], True, None, None)
    k, n = len(transports), len(calls)
    mean_t = statistics.fmean(transports)
    sd = statistics.stdev(transports) if k > 1 else 0.0
    margin = 2.0 * sd * math.sqrt(1.0 / k + 1.0 / n)
    lower = statistics.fmean(walls) - mean_t - margin
    if all(c is not None for c in claims) and statistics.fmean(claims) >= lower:  # type: ignore[arg-type]
        return Timing([max(c, MIN_T_ALG_S) for c in claims], False, mean_t, lower)  # type: ignore[type-var]
    return Timing([max(w - mean_t - margin, MIN_T_ALG_S) for w in walls], True, mean_t, lower)
