"""The evaluate session of ``eplb/v1`` and its accounting: the calls a candidate is timed on, and the
calibration session that replays them.

One evaluation is one sandbox session: an untimed setup call (allocator settings; torch's import for a
torch candidate; the generators' seeds), a few untimed warm-up echoes, then one timed call per window,
back to back, with nothing of ours in between. The session's per-call CPU figures are logged as they
come (:class:`AccountedSession`); after the candidate's session is closed, a session of the evaluator's
own replays every call to measure the transport the timing leaves out (:func:`calibrate`). What the
figures then mean is decided in :mod:`reasearch.evaluators.eplb._timing`; the task scores the answers.

Trust boundary: this is the trusted side. The candidate runs only inside the sandbox session; what comes
back (its answers and the ``t_ns`` it claims) is untrusted data: answers are kept as data and scored by
:mod:`reasearch.evaluators.eplb.scoring` only after the session ends, claims are only ever bounded by the
parent's own clock and the kernel's CPU account (``_timing.decide``). The calibration session runs the
evaluator's placeholder program (``CALIBRATION_SOURCE``), never candidate code.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reasearch.engine.protocol import CallOutcome, RunOutcome, RunRequest, SandboxRunner, SandboxSession
from reasearch.evaluators.eplb._timing import (
    ROUNDS,
    CallTiming,
    Timing,
    answer_signature,
    replay_plan,
    replay_wait_ns,
    reported_seconds,
)
from reasearch.evaluators.result import Status

__all__ = [
    "WARM_ECHOES",
    "AccountedSession",
    "CandidateSession",
    "Payload",
    "calibrate",
    "descendants_cpu",
    "run_candidate",
    "setup_call",
    "timing_metrics",
    "warm_up",
]

WARM_ECHOES = 3  # untimed echoes opening both the candidate's and the calibration session (see warm_up)

Payload = Callable[[np.ndarray], dict[str, Any]]
"""The request of one call on one window (the task's ``_call_payload`` with the weight type fixed)."""


class AccountedSession:
    """A session whose calls' CPU figures (``cpu_s`` and ``cpu_before_s``) are appended to a list."""

    def __init__(self, inner: SandboxSession, log: list[float | None]) -> None:
        self._inner, self._log = inner, log

    @property
    def closed(self) -> bool:
        return bool(getattr(self._inner, "closed", False))

    def call(self, payload: Mapping[str, Any], *, timeout_s: float | None = None) -> CallOutcome:
        out = self._inner.call(payload, timeout_s=timeout_s)
        self._log.extend((getattr(out, "cpu_s", None), getattr(out, "cpu_before_s", None)))
        return out

    def close(self) -> RunOutcome:
        return self._inner.close()

    def __enter__(self) -> AccountedSession:  # a SandboxSession in full (the protocol asks for it)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def descendants_cpu(final: Any, accounted: Sequence[float | None]) -> float | None:
    """The CPU time of the processes the candidate forked: the worker's figure, else (conservatively) the
    session's CPU less the child's own during and between the calls; None where neither is known."""
    measured = getattr(final, "descendants_cpu_s", None)
    if measured is not None:
        return float(measured)
    if not accounted or any(x is None for x in accounted) or not final.cpu_s:
        return None
    return max(0.0, float(final.cpu_s) - sum(x for x in accounted if x is not None))  # none is None (above)


@dataclass(frozen=True, slots=True)
class CandidateSession:
    """What the candidate's session left: its answers (the ``t_ns`` claims taken out), the calls' timings,
    the CPU log of :class:`AccountedSession`, the session's outcome, and the first problem, if any."""

    answers: list[Any]
    calls: list[CallTiming]
    accounted: list[float | None]
    final: RunOutcome
    problem: tuple[Status, str] | None


def run_candidate(runner: SandboxRunner, request: RunRequest, windows: np.ndarray, payload: Payload, *,
                  num_replicas: int, seed: int | None, weight_type: str, deadline: float,
                  time_limit_s: float) -> CandidateSession:
    """Runs the candidate's session: setup, warm-up, then one timed call per window but the last.

    Args:
        runner: the sandbox runner.
        request: the candidate's request (its source and the harness).
        windows: the ``[W, L, E]`` windows; window ``i`` is sent with call ``i`` only.
        payload: the request of one call on one window.
        num_replicas: physical slots per layer (the warm-up echoes an answer of that size).
        seed: seeds the sandbox's generators (None: 0).
        weight_type: ``"torch"`` or ``"numpy"``, for the setup call.
        deadline: ``time.perf_counter()`` time by which every call must be done (the whole session's limit).
        time_limit_s: that limit in seconds, for the feedback.
    """
    answers: list[Any] = []
    calls: list[CallTiming] = []
    accounted: list[float | None] = []  # the child's CPU per call, and before it, as the worker read it
    session = AccountedSession(runner.session(request), accounted)
    problem: tuple[Status, str] | None = None
    try:
        if not getattr(session, "closed", False):  # a candidate that failed to load ends the session
            problem = setup_call(session, seed, weight_type, deadline)
            if problem is None:
                warm_up(session, windows, payload, deadline, num_replicas)
            for i in range(windows.shape[0] - 1 if problem is None else 0):
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    text = (f"the time limit of {time_limit_s:g} s ran out after {i} of "
                            f"{windows.shape[0] - 1} rebalances")
                    problem = (Status.TIMEOUT, text)
                    break
                out = session.call(payload(windows[i]), timeout_s=remaining)
                if out.status is not Status.OK:
                    detail = out.error.strip() or "no further detail"
                    problem = (out.status, f"rebalance on window {i}: {out.status.value}: {detail}")
                    break
                answer = dict(out.value) if isinstance(out.value, Mapping) else out.value
                t_jail = reported_seconds(answer.pop("t_ns", None)) if isinstance(answer, dict) else None
                answers.append(answer)
                calls.append(CallTiming(out.wall_s, t_jail, getattr(out, "cpu_s", None)))
    finally:
        final = session.close()
    return CandidateSession(answers, calls, accounted, final, problem)


def setup_call(session: SandboxSession, seed: int | None, weight_type: str,
               deadline: float) -> tuple[Status, str] | None:
    """The untimed first call: torch's import (torch candidates), the generators' seeds, the allocator."""
    payload = {"setup": True, "seed": 0 if seed is None else int(seed), "weight_type": weight_type}
    out = session.call(payload, timeout_s=max(deadline - time.perf_counter(), 0.001))
    if out.status is not Status.OK:
        detail = out.error.strip() or "no further detail"
        return out.status, f"before the first rebalance: {out.status.value}: {detail}"
    return None


def warm_up(session: SandboxSession, windows: np.ndarray, payload: Payload, deadline: float,
            num_replicas: int) -> None:
    """Untimed echoes of a published answer's size before the first timed call or replay, the same in
    the candidate's session and in the calibration session: a fresh session's first round trips are
    slower (first writes copy pages, first allocations of that size) and must weigh on neither side.
    Their outcome is not used (a session they broke reports it on its next call).

    Every echo carries window 0, the window of the first timed call: the harness runs in the candidate's
    process, so an echo is a window handed to the candidate, and window ``i + 1`` (what the placement
    made on window ``i`` is scored on) must reach it only with call ``i + 1``."""
    L, E = windows.shape[1:]
    echo = [[[L, num_replicas], "<i2"], [[L, E, max(num_replicas - E + 1, 1)], "<i2"], [[L, E], "<i2"]]
    first = payload(windows[0])
    for _ in range(WARM_ECHOES):
        remaining = deadline - time.perf_counter()
        if remaining <= 0 or getattr(session, "closed", False):
            return
        session.call({**first, "echo": echo, "wait_ns": 0}, timeout_s=remaining)


def calibrate(runner: SandboxRunner, request: RunRequest, windows: np.ndarray, answers: Sequence[Any],
              calls: Sequence[CallTiming], payload: Payload,
              num_replicas: int) -> tuple[list[list[float]], list[list[float]], float | None]:
    """Per call, the transport samples of its replays, in a session of our own (see ``_timing``), the
    harness's CPU of each replay beyond its busy-wait (the worker's per-call CPU less the busy-wait's
    own CPU; empty lists where the runner measures no per-call CPU), and the session's CPU time
    per round trip beyond the replays' busy-waits (None if unknown).

    ``request`` runs the evaluator's placeholder program (``CALIBRATION_SOURCE``); ``payload`` sends a
    window as NumPy. Each replay sends the call's own window and echoes arrays of the call's own answer
    shapes and wire dtypes after a busy-wait of its claim; ``ROUNDS`` rounds, forward then backward.
    All lists are empty when the calibration itself fails (then ``t_alg`` falls back to the round trips).
    """
    sigs = [answer_signature(a) if isinstance(a, Mapping) else None for a in answers]
    plan = [i for i in replay_plan(len(calls)) if sigs[i] is not None]
    echoes: list[list[float]] = [[] for _ in calls]
    overheads: list[list[float]] = [[] for _ in calls]
    if not plan:
        return echoes, overheads, None
    session = runner.session(request)
    waited_total = 0.0
    try:
        if getattr(session, "closed", False):
            return echoes, overheads, None
        # the same start as the candidate's session: setup (allocator settings), then the warm-up echoes
        setup = session.call({"setup": True, "seed": 0, "weight_type": "numpy"}, timeout_s=10.0)
        if setup.status is not Status.OK:
            return echoes, overheads, None
        warm_up(session, windows, payload, time.perf_counter() + 10.0, num_replicas)
        order = [i for r in range(ROUNDS) for i in (plan if r % 2 == 0 else plan[::-1])]
        for i in order:
            out = session.call({**payload(windows[i]), "echo": sigs[i], "wait_ns": replay_wait_ns(calls[i])},
                               timeout_s=10.0)
            waited = reported_seconds(out.value.get("t_ns")) if isinstance(out.value, Mapping) else None
            if out.status is not Status.OK or waited is None:
                return [[] for _ in calls], [[] for _ in calls], None
            echoes[i].append(max(out.wall_s - waited, 0.0))
            cpu = getattr(out, "cpu_s", None)
            waited_cpu = reported_seconds(out.value.get("t_cpu_ns"))  # the busy-wait's own CPU
            if cpu is not None and waited_cpu is not None:
                overheads[i].append(cpu - waited_cpu)
            waited_total += waited
    finally:
        final = session.close()
    if any(
        len(o) != len(e) for o, e in zip(overheads, echoes, strict=False)
    ):  # a replay without its CPU: none used
        overheads = [[] for _ in calls]
    if final.status is not Status.OK or not final.cpu_s:
        return echoes, overheads, None
    return echoes, overheads, max(0.0, float(final.cpu_s) - waited_total) / (1 + WARM_ECHOES + len(order))


def timing_metrics(verdict: Timing, calls: Sequence[CallTiming], cpu_bound: float | None,
                   descendants: float | None) -> dict[str, Any]:
    """The timing figures an evaluation reports beside its score (none of them scored on its own)."""
    return {
        "t_transport_s": verdict.transport_s,
        "t_transport_slack_s": verdict.slack_s,
        "t_transport_per_window_s": list(verdict.transport_per_call_s),
        "t_excess_s": verdict.excess_s,
        "t_call_limit_s": verdict.limit_s,
        "t_alg_floor_s": verdict.floor_s,
        "t_alg_floor_per_window_s": list(verdict.floor_per_call_s),
        "cpu_for_calls_s": cpu_bound,
        "cpu_per_window_s": [c.cpu_s for c in calls],
        "cpu_alg_per_window_s": list(verdict.cpu_alg_per_call_s),
        "cpu_harness_s": verdict.cpu_overhead_s,
        "cpu_slack_s": verdict.cpu_slack_s,
        "cpu_descendants_s": descendants,
        "t_alg_bounded_windows": verdict.bounded_calls,
        "t_alg_source": verdict.source,
        "t_call_s": statistics.fmean(c.wall_s for c in calls),
        "t_call_per_window_s": [c.wall_s for c in calls],
        "t_claimed_per_window_s": [c.t_jail_s for c in calls],
    }
