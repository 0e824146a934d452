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
   The replays run twice; each call's sample is the smaller of its two (a transient preemption of the
   calibration must not inflate the transport a liar would be credited with).
4. Robust figures of the replays: ``T`` the median of the per-call samples, ``sigma`` 1.4826 times
   their median absolute deviation, ``drift`` the difference between the two rounds' medians; ``B``
   the median of ``wall - T`` over the calls (the parent's own figure of the algorithm); the noise
   allowance ``slack = max(2 * sigma * sqrt(1 + 1/k), 2 * drift)``.
5. If the calibration is unusable (``B <= 0``: the replays' transport exceeded the calls' own round
   trips; or ``slack > max(0.25 * B, 50 us)``: the machine is too noisy to separate the transport from
   the algorithm), every call counts its round trip, as before (``t_alg_source`` says so).
6. Otherwise a call's floor is ``wall - T - slack``, and the claims are overruled (``t_alg = floor``)
   * on every call whose claim is below its floor, when the median claim is below ``B - slack`` (claims
     too small across the board);
   * else on each call whose claim is below its floor *and* below 0.8 times the median claim (a claim
     too small for its own round trip and out of line with the others).
   Every other call keeps its claim (never above its ``wall``).

An honest candidate keeps its own clock's figures: a transport spike makes one call's round trip long
while its claim stays in line with the others. A candidate that lies on every call gets the parent's
figures less ``T + slack``; one that lies on some calls only is caught on each call whose claim is out
of line. What a liar can avoid is the noise allowance (at most a quarter of its real time, or 50 us)
or, on fewer than half of its calls, a fifth of their time; never the round trip. Its replays, which
wait only as long as it claimed, cannot inflate ``T``. On a machine too loaded to calibrate, nobody
gains: every candidate is timed by its round trips.

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

__all__ = [
    "CALIBRATION_SOURCE", "CLOCK", "MAX_REPLAYS", "MAX_SLACK_FRACTION", "MIN_T_ALG_S", "NOISE_FLOOR_S",
    "OUTLIER_FRACTION", "REPLAY_CAP_S", "CallTiming", "Timing", "answer_signature", "decide", "replay_plan",
    "replay_wait_ns", "reported_seconds",
]

MAX_REPLAYS = 4  # per round; two rounds: the calibration costs ~8 round trips
REPLAY_CAP_S = 0.005  # past 5 ms of algorithm the transport (< 1 ms idle) is a small share anyway
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
        bounded_calls: how many claims the parent's figures overruled.
        source: ``"sandbox clock"`` (calibrated) or why the round trips were used instead.
        transport_s: the median calibrated transport per call (None without a calibration).
        slack_s: the noise allowance (None without a calibration).
    """

    t_alg: list[float]
    bounded_calls: int
    source: str
    transport_s: float | None
    slack_s: float | None


MAX_SLACK_FRACTION = 0.25
NOISE_FLOOR_S = 50e-6
OUTLIER_FRACTION = 0.8
CLOCK = "sandbox clock"


def decide(calls: Sequence[CallTiming], rounds: Sequence[Sequence[float]]) -> Timing:
    """Applies the rule of the module docstring to the timed calls and the replay rounds' transports."""
    walls = [c.wall_s for c in calls]

    def round_trips(why: str, median_t: float | None = None, slack: float | None = None) -> Timing:
        return Timing([max(w, MIN_T_ALG_S) for w in walls], len(walls), f"round trip ({why})", median_t, slack)

    rounds = [list(r) for r in rounds if r]
    if not rounds:
        return round_trips("no calibration")
    samples = [min(values) for values in zip(*rounds)]
    k = len(samples)
    median_t = statistics.median(samples)
    sigma = 1.4826 * statistics.median(abs(t - median_t) for t in samples)
    drift = max(statistics.median(r) for r in rounds) - min(statistics.median(r) for r in rounds)
    slack = max(2.0 * sigma * math.sqrt(1.0 + 1.0 / k), 2.0 * drift)
    parent = statistics.median(w - median_t for w in walls)
    if parent <= 0:
        return round_trips("the calibration contradicts the calls", median_t, slack)
    if slack > max(MAX_SLACK_FRACTION * parent, NOISE_FLOOR_S):
        return round_trips("the machine was too noisy to calibrate", median_t, slack)
    claims = [c.t_jail_s for c in calls]
    known = [c for c in claims if c is not None]
    typical = statistics.median(known) if known else 0.0
    across_the_board = len(known) < len(claims) or typical < parent - slack
    t_alg: list[float] = []
    bounded = 0
    for call, claim in zip(calls, claims):
        floor = call.wall_s - median_t - slack
        suspect = claim is None or across_the_board or claim < OUTLIER_FRACTION * typical
        if suspect and (claim is None or claim < floor):
            bounded += 1
            t_alg.append(max(min(floor, call.wall_s), MIN_T_ALG_S))
        else:
            t_alg.append(max(min(claim, call.wall_s), MIN_T_ALG_S))  # type: ignore[type-var]
    return Timing(t_alg, bounded, CLOCK, median_t, slack)
