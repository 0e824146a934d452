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
   clipped to ``[-C, C]``; a call without a usable claim counts ``w - e - C``. With the per-call CPU
   of step 6 each raise is capped first (step 6). The raises, summed, are then capped (scaled down
   alike) by the CPU time the calls could have hidden: the candidate's session CPU (the kernel's
   account of its whole process tree) less, per call, the evaluator's own CPU per round trip (the
   calibration session's CPU beyond its busy-waits, spread over all its round trips) less the claims,
   less ``a`` per call. Never above ``w``; never below the call's *floor*: ``4 a`` (``a /
   MAX_SLACK_FRACTION``), or lower where the call's CPU vouches for less (step 7): a shorter time
   cannot be told from the noise. When the median floor reaches the median round trip the machine is
   too noisy: every call counts its round trip. ``t_alg_source`` names the case (``"sandbox clock"``,
   ``"sandbox clock, floored ..."`` when the floor decides most calls, ``"round trip (why)"``).
6. Per-call CPU, where the runner measures it (``CallOutcome.cpu_s``: the worker reads the kernel's
   CPU clock of the candidate's whole process, all threads, exited ones included, when it hands the
   payload over and when the answer arrives; the process can raise it only by running, never lower it;
   ``RunOutcome.descendants_cpu_s`` ``U``: what the processes it forked used over the session). The
   replays give the harness's own CPU per call, ``o = cpu - busy-wait`` (the busy-wait's own CPU, read
   by the evaluator's harness: a preempted busy-wait used less CPU than its wall time), ``o_i``
   the mean of call ``i``'s replays; the CPU allowance ``eps`` is the largest of
   :data:`NOISE_FLOOR_S`, ``Z`` standard errors of the mean ``o`` (from the two rounds' differences),
   the rounds' drift and :data:`CPU_BIAS_FRACTION` of the median ``o``; per call ``eps_c = max(eps,
   CALL_Z * s_o)``. ``A_i = cpu_i - o_i`` is the CPU the call's process spent beyond the harness: the
   algorithm's, in all its threads. Each call's raise is capped by ``max(0, A_i - c_i)``: an honest
   single-threaded call whose round trip had a hiccup, or whose replays ran under a lighter load, did
   not spend the time the raise would add. What the caps cut is given back up to ``U`` in all (work
   moved into a forked helper shows only there), and the raises, summed, are capped by ``sum(A_i - c_i)
   + U - n eps``. A multi-threaded call (``A_i`` above its claim) is capped by nothing: the wall decides.
7. The floor of a call with CPU evidence is ``min(4 a, max(4 eps, A_i + U / n - eps_c))``, and the
   mean ``t_alg`` is at least ``min(4 a, mean(A) + U / n - eps)`` (the shortfall spread over the calls
   in proportion to their room below ``w``). An honest single-threaded claim is thus kept whatever the
   transport's noise (its ``A`` is its claim, within ``eps``), and an honest 20 us algorithm counts
   ``4 eps``.

Why this bounds a liar: summed over the calls, ``t_alg >= true time - n * a - sum(e - true
transport)`` (the CPU cap keeps it: the CPU time beyond the claims is at least the time they hide,
less what the candidate's own round trips cost below ours): a candidate that under-reports, on every
call or on some, by a little or a lot, keeps on average at most the allowance ``a`` (at most a quarter
of the time it is credited with, by the floor ``4 a``), plus the calibration's own error (zero on
average). The per-call CPU (steps 6, 7) never raises that bound: hidden work is CPU work, in the
process (in ``A_i``, whatever its threads) or in forked processes (in ``U``), so a cap ``A_i - c_i``
(plus ``U``) cuts a raise only below the work the call hid, less the CPU's own error (``eps`` on the
mean). Where the CPU lowers a floor below ``4 a``, the call counts at least its CPU less ``eps_c``
(the mean: less ``eps``), so a liar's claim of little keeps at most about ``eps`` on average (at most
a quarter of ``4 eps``). An honest candidate keeps its claims: ``D`` is sampling noise (rarely above
``a``), a call is raised only by a transport hiccup larger than ``C``, by the hiccup's excess, and a
single-threaded one not even then (its CPU shows it did not spend the time).

What is not closed: the work around the call inside the sandbox (reading the window, narrowing the
answer's integers, framing it) runs in the candidate's process; a candidate that replaces it by faster
code can claim that much less unnoticed, by the wall and by the CPU alike (tens to a few hundred microseconds at L =
58, E = 256, more
with an answer padded with replica columns); a candidate returning narrow integers is credited the
narrowing of int64 arrays it did not do. Conversely an answer cold in the cache (arrays computed long
before the call and returned again untouched) costs the harness's narrowing more CPU and time than the
replays' freshly written arrays (about 0.2 ms for the seed's answer here): neither account can tell that
from work hidden after the clock, so it counts. The replays cannot be slowed by the candidate: they run
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
    "BIAS_FRACTION",
    "CALIBRATION_SOURCE",
    "CALL_Z",
    "CLOCK",
    "CPU_BIAS_FRACTION",
    "MAX_REPLAYS",
    "MAX_SLACK_FRACTION",
    "MIN_T_ALG_S",
    "NOISE_FLOOR_S",
    "REPLAY_CAP_S",
    "ROUNDS",
    "Z",
    "CallTiming",
    "Timing",
    "answer_signature",
    "decide",
    "replay_plan",
    "replay_wait_ns",
    "reported_seconds",
    "signature_bytes",
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
CPU_BIAS_FRACTION = (
    0.1  # the harness's CPU per call in the candidate's process may differ from its replays' by this share
)


@dataclass(frozen=True, slots=True)
class CallTiming:
    """One timed call: the parent's round trip, the time the sandbox reported (None if unusable), and the
    CPU time the candidate's process spent during the call, read by the worker from the kernel's clock
    (``CallOutcome.cpu_s``; None where unavailable)."""

    wall_s: float
    t_jail_s: float | None
    cpu_s: float | None = None


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
        floor_s: the floor of a call without CPU evidence, four times the allowance (None without a
            calibration); a call with CPU evidence may have a lower one (step 6).
        cpu_overhead_s: the harness's median CPU per replay beyond its busy-wait (None without CPU evidence).
        cpu_slack_s: the CPU allowance ``eps`` (None without CPU evidence).
        cpu_alg_per_call_s: per call, the CPU evidence of the algorithm ``A`` (None where unknown).
        floor_per_call_s: per call, its floor (empty without a calibration).
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
    cpu_overhead_s: float | None = None
    cpu_slack_s: float | None = None
    cpu_alg_per_call_s: tuple[float | None, ...] = ()
    floor_per_call_s: tuple[float, ...] = ()


def _spread(pairs: Sequence[float], scale: float) -> float:
    """The spread of one sample less the mean of others, from differences of pairs (1.4826 MAD, scaled)."""
    return 1.4826 * statistics.median(abs(p) for p in pairs) * scale


def decide(calls: Sequence[CallTiming], echoes: Sequence[Sequence[float]], cpu_bound_s: float | None = None,
           overheads: Sequence[Sequence[float]] | None = None, descendants_cpu_s: float | None = None) -> Timing:
    """Applies the rule of the module docstring.

    Args:
        calls: the timed calls, in order.
        echoes: per call, the transport samples (seconds) of its replays, one per round; empty for a
            call not replayed. Within a round the calls were replayed in index order or its reverse.
        cpu_bound_s: the CPU time the candidate's process tree had for its calls (its session's CPU
            less the evaluator's own per-round-trip CPU, measured in the calibration session), or None.
        overheads: per call, the harness's CPU of each of its replays beyond the replay's busy-wait (the
            replay's ``cpu_s`` less the busy-wait's own CPU), in the order of ``echoes``; None or empty lists
            without CPU evidence.
        descendants_cpu_s: the CPU time of the processes the candidate's process forked, over its
            session (None: unknown, then no call's raise is capped by its own CPU).
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
    s_d = _spread(pairs, scale)
    limit = max(CALL_Z * s_d, NOISE_FLOOR_S)
    replayed = [e for e in echoes if len(e) >= per_call]
    adjacent = [b[r] - a[r] for a, b in zip(replayed, replayed[1:], strict=False) for r in range(per_call)] or pairs
    noise = [min(max(p * scale, -limit), limit) for p in adjacent]  # honest excesses' fast noise, clipped
    spread = statistics.pstdev(noise) if len(noise) > 1 else limit
    drift = abs(statistics.median(pairs))
    median_t = statistics.median(refs)
    claims = [None if c.t_jail_s is None else min(c.t_jail_s, c.wall_s) for c in calls]
    known = [i for i, c in enumerate(claims) if c is not None]
    claim_of = {i: c for i, c in enumerate(claims) if c is not None}  # known's claims, typed float
    allowance = max(NOISE_FLOOR_S, Z * spread / math.sqrt(max(len(known), 1)), drift, BIAS_FRACTION * median_t)
    limit = max(limit, allowance)
    floor = allowance / MAX_SLACK_FRACTION  # below this, a time cannot be told from the transport's noise
    cpu = _cpu_evidence(calls, overheads, len(known))
    floors = [floor] * len(calls)
    if cpu is not None and descendants_cpu_s is not None:  # step 7: a call's CPU evidence may vouch for less
        alg, eps, call_eps, _ = cpu
        helpers = max(0.0, descendants_cpu_s) / len(calls)
        floors = [floor if a is None else min(floor, max(eps / MAX_SLACK_FRACTION, a + helpers - call_eps))
                  for a in alg]
    median_w = statistics.median(walls)
    if statistics.median(floors) >= median_w:
        why = (f"the machine was too noisy to calibrate: allowance {allowance * 1e6:.0f} us; "
               f"{1 / MAX_SLACK_FRACTION:g}x that reaches the median round trip {median_w * 1e6:.0f} us")
        if cpu is not None:
            why += ", and so does the calls' CPU evidence"
        return round_trips(why, median_t, allowance, None, refs)
    excess = {i: walls[i] - claim_of[i] - refs[i] for i in known}
    mean_excess = statistics.fmean(min(max(x, -limit), limit) for x in excess.values()) if known else None
    shift = max(0.0, (mean_excess or 0.0) - allowance)
    raise_by = {i: shift + max(0.0, excess[i] - limit) for i in known}
    if cpu is not None and descendants_cpu_s is not None and known:  # step 6: each call's own CPU bounds its raise
        alg, eps, _, _ = cpu
        alg_of = {i: a for i in known if (a := alg[i]) is not None}  # the calls with CPU evidence
        have = list(alg_of)
        room = {i: max(0.0, alg_of[i] - claim_of[i]) for i in have}
        capped = {i: min(r, room.get(i, r)) for i, r in raise_by.items()}
        deficit = {i: raise_by[i] - capped[i] for i in known}
        lost = sum(deficit.values())
        if lost > 0:  # work moved into forked processes shows only in their CPU: it restores what it can
            back = min(1.0, max(0.0, descendants_cpu_s) / lost)
            capped = {i: capped[i] + back * deficit[i] for i in known}
        total = sum(capped.values())
        hidden = sum(alg_of[i] - claim_of[i] for i in have) + max(0.0, descendants_cpu_s) - len(have) * eps
        if len(have) == len(known) and total > 0:  # all calls measured: their CPU, summed, bounds the raises
            capped = {i: r * min(1.0, max(0.0, hidden) / total) for i, r in capped.items()}
        raise_by = capped
    total = sum(raise_by.values())
    if cpu_bound_s is not None and total > 0:  # the kernel's CPU account bounds what the claims can hide
        hidden = max(0.0, cpu_bound_s - sum(claim_of[i] for i in known) - len(known) * allowance)
        raise_by = {i: r * min(1.0, hidden / total) for i, r in raise_by.items()}
    t_alg: list[float] = []
    bounded = floored = 0
    for i, (w, claim, call_floor) in enumerate(zip(walls, claims, floors, strict=False)):
        if claim is None:  # no usable claim: the round trip less this call's transport and the limit
            value, raised = w - refs[i] - limit, True
        else:
            value = claim + raise_by[i]
            raised = value > claim
        floored += value < call_floor
        t_alg.append(max(min(max(value, call_floor), w), MIN_T_ALG_S))
        bounded += raised or value < call_floor
    if cpu is not None and descendants_cpu_s is not None and all(a is not None for a in cpu[0]):
        # The per-call floors allow for one call's CPU noise; on the mean only the mean-level allowance:
        # the mean time is at least the mean CPU evidence (helpers' CPU included) less eps, up to the floor.
        alg, eps, _, _ = cpu
        alg_all = [a for a in alg if a is not None]  # every one, as tested above
        target = min(floor, statistics.fmean(alg_all) + max(0.0, descendants_cpu_s) / len(calls) - eps)
        short = target * len(calls) - sum(t_alg)
        slack = [max(0.0, w - t) for w, t in zip(walls, t_alg, strict=False)]
        if short > 1e-12 and sum(slack) > 0:
            part = min(1.0, short / sum(slack))
            bounded += sum(1 for r, t, c in zip(slack, t_alg, claims, strict=False) if r > 0 and (c is None or t <= c))
            t_alg = [t + r * part for t, r in zip(t_alg, slack, strict=False)]
    source = CLOCK
    if 2 * floored > len(calls):
        source = (f"{CLOCK}, floored at {1 / MAX_SLACK_FRACTION:g}x the allowance ({floor * 1e6:.0f} us)"
                  + (" or the call's CPU evidence" if cpu is not None else "")
                  + ": shorter times cannot be told from the transport's noise")
    cpu_fields: dict[str, Any] = {"floor_per_call_s": tuple(floors)}
    if cpu is not None:
        cpu_fields.update(cpu_overhead_s=cpu[3], cpu_slack_s=cpu[1], cpu_alg_per_call_s=tuple(cpu[0]))
    return Timing(
        t_alg,
        min(bounded, len(calls)),
        source,
        median_t,
        allowance,
        mean_excess,
        tuple(refs),
        limit,
        floor,
        **cpu_fields,
    )


def _cpu_evidence(calls: Sequence[CallTiming], overheads: Sequence[Sequence[float]] | None,
                  n: int) -> tuple[list[float | None], float, float, float] | None:
    """Per call, ``A = cpu - o`` (the CPU its process spent beyond the harness's own, ``o`` the mean over
    the call's replays), the CPU allowance ``eps`` (mean level), the per-call one ``max(eps, CALL_Z *
    spread)`` and the median ``o``; None without CPU evidence (no call's CPU, or no replay's)."""
    if not overheads or len(overheads) != len(calls):
        return None
    own = {i: statistics.fmean(o) for i, o in enumerate(overheads) if o}
    pairs = [o[0] - o[1] for o in overheads if len(o) >= 2]
    if not own or not pairs or all(c.cpu_s is None for c in calls):
        return None
    typical = statistics.median(own.values())
    per_call = min(len(o) for o in overheads if o)
    s_o = _spread(pairs, math.sqrt((1.0 + 1.0 / per_call) / 2.0))
    eps = max(NOISE_FLOOR_S, Z * s_o / math.sqrt(max(n, 1)), abs(statistics.median(pairs)), CPU_BIAS_FRACTION * typical)
    alg = [None if c.cpu_s is None else c.cpu_s - own.get(i, typical) for i, c in enumerate(calls)]
    return alg, eps, max(eps, CALL_Z * s_o), typical
