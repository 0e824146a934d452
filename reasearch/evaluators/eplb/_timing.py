"""How EPLB's ``t_alg`` is measured: the algorithm, not the sandbox transport, out of the candidate's reach.

The problem: the parent can only time a whole round trip (send one window, the worker relays it, the
candidate computes, the three arrays are framed and copied back), 1-3 ms on top of the algorithm on
a 2-core machine. A clock inside the sandbox sees only the algorithm, but it runs in the candidate's
own process, where the candidate can patch anything (the harness's clock, the number it reports,
the code around the call).

The choice: both, each bounding the other.

1. The harness reads ``time.perf_counter_ns`` (bound when the harness module was imported, before any
   candidate code ran) around the candidate's call only and reports it: the *claim* ``c``.
2. The parent times each round trip itself: ``w``. What the claim leaves out, ``w - c``, is the
   call's apparent transport.
3. After the candidate's session is closed (its processes are killed with it), the parent opens a
   *calibration* session of its own (a trusted placeholder program in the same harness, never the
   candidate's code) and *replays* every call (at most :data:`MAX_REPLAYS`, drawn at random when
   there are more) in :data:`ROUNDS` rounds, forward then backward (a drift of the machine's load
   weighs on every call alike): an ``echo`` request with the call's own window, arrays of the call's
   own answer (shapes and wire dtypes; integers built as int64 and narrowed on the same path as a
   published program's int64 answer), and a busy-wait as long as the call's claim (capped at
   :data:`REPLAY_CAP_S`: a machine preempts the transport after a long burst more often). Each
   replay's round trip less its own trusted clock is one transport sample; a call's reference
   transport ``e`` is the mean of its samples. Both sessions open alike: setup (allocator settings),
   then a few untimed warm-up echoes, so that neither side's first round trips are slower.
4. Noise and allowance: a call's excess ``d = w - c - e`` is, for an honest call, one transport sample
   less the mean of two; its spread ``s_d`` comes from each call's two replays (1.4826 times the
   median absolute difference, scaled). The *allowance* ``a`` is the largest of :data:`NOISE_FLOOR_S`,
   ``Z`` standard errors of the mean excess (from the differences of replays adjacent in time, clipped
   like the excesses: the fast noise that averages out), the drift between the two rounds, and
   :data:`BIAS_FRACTION` of the transport (the replays run after the calls, in another process). The
   per-call *limit* is ``C = max(CALL_Z * s_d, a)``.
5. ``t_alg = c + max(0, D - a) + max(0, d - C)``, where ``D`` is the mean over the calls of ``d``
   clipped to ``[-C, C]``; a call without a usable claim counts ``w - e - C``. The raises, summed,
   are capped (scaled down alike) by the CPU time the calls could have hidden: the candidate's session CPU (the kernel's
   account of its whole process tree) less, per call, the evaluator's own CPU per round trip (the
   calibration session's CPU beyond its busy-waits, spread over all its round trips: never less than
   a round trip costs) less the claims, less ``a`` per call. Useful work is CPU work, so a
   candidate cannot hide more than that; when the calibration ran under a different load than the
   calls (``D`` high for an honest candidate), the honest claims stand. Never above ``w``;
   never below the *floor* ``4 a`` (``a / MAX_SLACK_FRACTION``): a shorter time cannot be told from
   the transport's noise, so an honest 20 us algorithm counts the floor, and so does a liar. When the
   floor reaches the median round trip the machine is too noisy: every call counts its round trip.
   ``t_alg_source`` names the case (``"sandbox clock"``, ``"sandbox clock, floored ..."`` when the
   floor decides most calls, ``"round trip (why)"``).

Why this bounds a liar: summed over the calls, ``t_alg >= true time - n * a - sum(e - true
transport)`` (the CPU cap keeps it: the CPU time beyond the claims is at least the time they hide,
less what the candidate's own round trips cost below ours): a candidate that under-reports, on every call or on some, by a little or a lot, keeps
on average at most the allowance ``a`` (at most a quarter of the time it is credited with, by the
floor), plus the calibration's own error (zero on average). An honest candidate keeps its claims:
``D`` is sampling noise (rarely above ``a``), and a call is raised only by a transport hiccup larger
than ``C``, by the hiccup's excess.

What is not closed: the work around the call inside the sandbox (reading the window, narrowing the
answer's integers, framing it) runs in the candidate's process; a candidate that replaces it by faster
code can claim that much less unnoticed (tens to a few hundred microseconds at L = 58, E = 256, more
with an answer padded with replica columns); a candidate returning narrow integers is credited the
narrowing of int64 arrays it did not do. The replays cannot be slowed by the candidate: they run
after its processes are killed, with no code of its, and each waits only as long as its call claimed.

Torch candidates: the calibration echoes NumPy arrays (a calibration session that imported torch would
cost seconds); converting a tensor (``from_numpy`` on the way in, ``.numpy()`` on the way back) costs
microseconds and is not subtracted.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "BIAS_FRACTION", "CALIBRATION_SOURCE", "CALL_Z", "CLOCK", "MAX_REPLAYS", "MAX_SLACK_FRACTION", "MIN_T_ALG_S",
    "NOISE_FLOOR_S",
    "REPLAY_CAP_S", "ROUNDS", "Z", "CallTiming", "Timing", "answer_signature", "decide", "replay_plan",
    "replay_wait_ns", "reported_seconds", "signature_bytes",
]

MAX_REPLAYS = 32  # calls replayed per round; ROUNDS rounds: at most 64 replays per evaluation
ROUNDS = 2
REPLAY_CAP_S = 0.005  # past 5 ms of algorithm the transport (1-3 ms) is a small share anyway
CALIBRATION_SOURCE = (
    '"""The evaluator\'s own placeholder: echo requests never call it."""\n'
    "def rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus):\n"
    "    raise RuntimeError('the calibration session only echoes')\n"
)
_MAX_T_NS = 10**12  # a reported time beyond 1000 s is not a time
MIN_T_ALG_S = 1e-6  # below the clocks' useful resolution; keeps 0.002 / t_alg finite
MAX_SLACK_FRACTION = 0.25  # the allowance may be at most this share of the median claim ...
NOISE_FLOOR_S = 50e-6  # ... or this, whichever is larger; it is never smaller than this
Z = 2.0  # the allowance: Z standard errors of the mean excess (an honest D above it: ~2%, and CPU-capped)
CALL_Z = 4.0  # a call's own excess beyond CALL_Z spreads of one call is not noise
BIAS_FRACTION = 0.05  # the replays run after the calls, in another process: their transport may differ by this share
CLOCK = "sandbox clock"


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
    """``[[shape, dtype], ...]`` of the three arrays of an answer as it crossed the wire (what its replay echoes)."""
    sig = []
    for name in ("phy2log", "log2phy", "logcnt"):
        arr = answer.get(name)
        shape = [int(s) for s in getattr(arr, "shape", ())]
        dtype = np.dtype(getattr(arr, "dtype", "int64"))
        sig.append([shape, dtype.str if dtype.kind in "biuf" else "<i8"])
    return sig


def signature_bytes(sig: Sequence[Sequence[Any]]) -> int:
    """The bytes of the arrays a signature describes."""
    return sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize for shape, dtype in sig)


def replay_plan(n: int, rng: random.Random | None = None) -> list[int]:
    """Indices of the calls to replay: all ``n``, or :data:`MAX_REPLAYS` of them drawn at random.

    Random (from the operating system's generator unless ``rng`` is given), so that a candidate
    cannot know which of its calls go unreplayed; every call is bounded all the same (step 6).
    """
    if n <= MAX_REPLAYS:
        return list(range(n))
    return sorted((rng or random.SystemRandom()).sample(range(n), MAX_REPLAYS))


def replay_wait_ns(call: CallTiming) -> int:
    """How long the replay of ``call`` busy-waits: what the candidate claimed, capped."""
    return int(min(call.t_jail_s or 0.0, REPLAY_CAP_S) * 1e9)


@dataclass(frozen=True, slots=True)
class Timing:
    """The evaluation's timing verdict.

    Attributes:
        t_alg: per call, the algorithm's time in seconds (what the score uses).
        bounded_calls: how many calls count more than their claim (the parent's figures overruled it).
        source: ``"sandbox clock"``, ``"sandbox clock, floored ..."`` or ``"round trip (why)"``.
        transport_s: the median reference transport per call (None without a calibration).
        slack_s: the allowance ``a`` (None without a calibration).
        excess_s: ``D``, the calls' mean (clipped) excess over their replays (None without a calibration).
        transport_per_call_s: each call's reference transport ``e`` (empty without a calibration).
        limit_s: ``C``, the per-call limit (None without a calibration).
        floor_s: the least ``t_alg`` of a call, four times the allowance (None without a calibration).
    """

    t_alg: list[float]
    bounded_calls: int
    source: str
    transport_s: float | None
    slack_s: float | None
    excess_s: float | None = None
    transport_per_call_s: tuple[float, ...] = ()
    limit_s: float | None = None
    floor_s: float | None = None


def decide(calls: Sequence[CallTiming], echoes: Sequence[Sequence[float]], cpu_bound_s: float | None = None) -> Timing:
    """Applies the rule of the module docstring.

    Args:
        calls: the timed calls, in order.
        echoes: per call, the transport samples (seconds) of its replays, one per round; empty for a
            call not replayed. Within a round the calls were replayed in index order or its reverse.
        cpu_bound_s: the CPU time the candidate's process tree had for its calls (its session's CPU
            less the evaluator's own per-round-trip CPU, measured in the calibration session), or None.
    """
    walls = [c.wall_s for c in calls]

    def round_trips(why: str, median_t: float | None = None, slack: float | None = None,
                    excess: float | None = None, refs: Sequence[float] = ()) -> Timing:
        return Timing([max(w, MIN_T_ALG_S) for w in walls], len(walls), f"round trip ({why})", median_t, slack,
                      excess, tuple(refs))

    if not calls:
        return round_trips("no calls")
    if len(echoes) != len(calls):
        raise ValueError(f"{len(echoes)} replay lists for {len(calls)} calls")
    own = {i: statistics.fmean(e) for i, e in enumerate(echoes) if e}
    pairs = [e[0] - e[1] for e in echoes if len(e) >= 2]
    if not own or not pairs:
        return round_trips("no calibration")
    typical_ref = statistics.median(own.values())
    refs = [own.get(i, typical_ref) for i in range(len(calls))]
    per_call = min(len(e) for e in echoes if e)
    # One call's excess d = w - c - e is one transport sample less the mean of `per_call` others: its
    # noise is that of a difference of two samples scaled by sqrt((1 + 1/per_call) / 2). Per call, the
    # spread of its two rounds' difference (slow drift included) sets the per-call limit; the mean
    # excess averages only the fast noise, measured between replays adjacent in time (replays run in
    # call order, then in reverse: echoes[i][r] and echoes[i + 1][r] are neighbours).
    scale = math.sqrt((1.0 + 1.0 / per_call) / 2.0)
    s_d = 1.4826 * statistics.median(abs(p) for p in pairs) * scale
    limit = max(CALL_Z * s_d, NOISE_FLOOR_S)
    replayed = [e for e in echoes if len(e) >= per_call]
    adjacent = [b[r] - a[r] for a, b in zip(replayed, replayed[1:]) for r in range(per_call)] or pairs
    noise = [min(max(p * scale, -limit), limit) for p in adjacent]  # honest excesses' fast noise, clipped
    spread = statistics.pstdev(noise) if len(noise) > 1 else limit
    drift = abs(statistics.median(pairs))
    median_t = statistics.median(refs)
    claims = [None if c.t_jail_s is None else min(c.t_jail_s, c.wall_s) for c in calls]
    known = [i for i, c in enumerate(claims) if c is not None]
    allowance = max(NOISE_FLOOR_S, Z * spread / math.sqrt(max(len(known), 1)), drift, BIAS_FRACTION * median_t)
    limit = max(limit, allowance)
    floor = allowance / MAX_SLACK_FRACTION  # below this, a time cannot be told from the transport's noise
    median_w = statistics.median(walls)
    if floor >= median_w:
        why = (f"the machine was too noisy to calibrate: allowance {allowance * 1e6:.0f} us; "
               f"{1 / MAX_SLACK_FRACTION:g}x that reaches the median round trip {median_w * 1e6:.0f} us")
        return round_trips(why, median_t, allowance, None, refs)
    excess = {i: walls[i] - claims[i] - refs[i] for i in known}  # type: ignore[operator]
    mean_excess = statistics.fmean(min(max(x, -limit), limit) for x in excess.values()) if known else None
    shift = max(0.0, (mean_excess or 0.0) - allowance)
    raise_by = {i: shift + max(0.0, excess[i] - limit) for i in known}
    total = sum(raise_by.values())
    if cpu_bound_s is not None and total > 0:  # the kernel's CPU account bounds what the claims can hide
        hidden = max(0.0, cpu_bound_s - sum(claims[i] for i in known) - len(known) * allowance)  # type: ignore[misc]
        raise_by = {i: r * min(1.0, hidden / total) for i, r in raise_by.items()}
    t_alg: list[float] = []
    bounded = floored = 0
    for i, (w, claim) in enumerate(zip(walls, claims)):
        if claim is None:  # no usable claim: the round trip less this call's transport and the limit
            value, raised = w - refs[i] - limit, True
        else:
            value = claim + raise_by[i]
            raised = value > claim
        floored += value < floor
        t_alg.append(max(min(max(value, floor), w), MIN_T_ALG_S))
        bounded += raised or value < floor
    source = CLOCK
    if 2 * floored > len(calls):
        source = (f"{CLOCK}, floored at {1 / MAX_SLACK_FRACTION:g}x the allowance ({floor * 1e6:.0f} us): "
                  "shorter times cannot be told from the transport's noise")
    return Timing(t_alg, bounded, source, median_t, allowance, mean_excess, tuple(refs), limit, floor)
