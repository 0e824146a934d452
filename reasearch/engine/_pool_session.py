"""A pool session: a candidate kept alive in one worker of a :class:`~reasearch.engine.sandbox.SandboxPool`
for many timed calls (``SandboxPool.session``; the ``SandboxSession`` protocol).

The session holds its worker until it is closed; every call's status, wall and CPU time are decided on
this side from what the worker observed (:mod:`reasearch.engine._verdict`), as for one-shot runs.
:class:`PoolSession` is re-exported by :mod:`reasearch.engine.sandbox` and :mod:`reasearch.engine`.

Trust: trusted side. It trusts the worker's report (engine code in the jail), never the child's: the
child's answer is decoded without pickle (:func:`~reasearch.engine._verdict.child_result`), and a
session whose child misbehaves ends as a failed outcome, never an exception.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from reasearch.engine._handle import WorkerHandle
from reasearch.engine._verdict import child_result, classify
from reasearch.engine.protocol import CallOutcome, RunOutcome, RunRequest, Status

__all__ = ["PoolSession"]


class _Pool(Protocol):
    """What a session asks of its :class:`~reasearch.engine.sandbox.SandboxPool` (typed here so that this
    module does not import the pool's, which imports it)."""

    @property
    def mode(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    def _exchange(self, w: WorkerHandle, op: str, obj: Any, wall_s: float,
                  stamps: dict[str, int] | None = None) -> tuple[dict[str, Any], list[memoryview], float]: ...


class _Failed(Exception):
    """A request ended without a normal reply (worker stuck or died); carries the outcome to return."""

    def __init__(self, outcome: RunOutcome) -> None:
        super().__init__(outcome.error)
        self.outcome = outcome


def _ns_as_s(value: Any) -> float | None:
    """A worker's CPU figure (non-negative int ns) in seconds; None when absent or malformed."""
    return value / 1e9 if type(value) is int and value >= 0 else None


class PoolSession:
    """A candidate kept alive in one worker for many timed calls (see ``SandboxSession``).

    The worker is reserved for the session's lifetime; :meth:`close` releases it. Each
    :meth:`call`'s ``wall_s`` is measured by the engine around request and response.
    """

    def __init__(self, pool: _Pool, worker: WorkerHandle, request: RunRequest,
                 release: Callable[[WorkerHandle], None]) -> None:
        self._pool = pool
        self._release = release  # gives the worker back to the pool's scheduler
        self._worker = worker
        self._request = request
        self._t0 = time.monotonic()
        self._final: RunOutcome | None = None
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self._final is not None

    def _end(self, outcome: RunOutcome) -> RunOutcome:
        self._final = outcome
        self._release(self._worker)
        return outcome

    def _open(self) -> RunOutcome | None:
        """Starts the child; returns a final outcome if it failed to load (the session is then closed)."""
        lim = self._request.limits
        try:
            head, blobs, self._t0 = self._pool._exchange(self._worker, "session", self._request, lim.wall_s)
        except _Failed as exc:
            return self._end(exc.outcome)
        if head.get("kind") == "session_ready":
            return None
        return self._end(classify(head, blobs, lim, time.monotonic() - self._t0, self._pool.mode,
                                  oom_rose=self._worker.oom_rose))

    def call(self, payload: Mapping[str, Any], *, timeout_s: float | None = None) -> CallOutcome:
        """Sends one payload; the child answers ``harness(entry_fn, payload)``.

        Args:
            payload: plain data (JSON types and NumPy arrays).
            timeout_s: wall limit of this call; default the request's ``limits.wall_s``. A call past
                it kills the child: the outcome is ``TIMEOUT`` and the session is over.

        Returns:
            A :class:`CallOutcome`; after the session ended every call answers ``CRASH``.
        """
        with self._lock:
            if self._final is not None:
                return CallOutcome(Status.CRASH, None, 0.0, error=f"session is over ({self._final.status}: "
                                   f"{self._final.error or 'closed'})")
            limit = float(timeout_s if timeout_s is not None else self._request.limits.wall_s)
            t0 = time.perf_counter()
            try:
                head, blobs, _ = self._pool._exchange(self._worker, "call", payload, limit)
            except _Failed as exc:
                self._end(exc.outcome)
                return CallOutcome(exc.outcome.status, None, time.perf_counter() - t0, error=exc.outcome.error)
            wall = time.perf_counter() - t0
            if head.get("kind") == "call_done":
                kind, value, err = child_result(head, blobs)
                cpu_s, cpu_before_s = _ns_as_s(head.get("cpu_ns")), _ns_as_s(head.get("cpu_before_ns"))
                if kind == "ok":
                    return CallOutcome(Status.OK, value, wall, cpu_s=cpu_s, cpu_before_s=cpu_before_s)
                return CallOutcome(Status.OOM if kind == "oom" else Status.CRASH, None, wall, error=err,
                                   cpu_s=cpu_s, cpu_before_s=cpu_before_s)
            final = classify(head, blobs, self._request.limits, time.monotonic() - self._t0, self._pool.mode,
                             oom_rose=self._worker.oom_rose)
            if head.get("killed") == "wall":
                final = RunOutcome(Status.TIMEOUT, None, final.wall_s, final.cpu_s, final.stdout, final.stderr,
                                   f"call killed at its wall-time limit of {limit:g} s", final.exit_code,
                                   final.signal, final.sandbox_mode)
            self._end(final)
            return CallOutcome(final.status, None, wall, error=final.error)

    def close(self) -> RunOutcome:
        """Stops the child and releases the worker; returns the session's outcome (``OK`` if it was healthy)."""
        with self._lock:
            if self._final is not None:
                return self._final
            if self._pool.closed:  # its worker was killed with the pool
                self._final = RunOutcome(Status.CRASH, None, time.monotonic() - self._t0, 0.0,
                                         error="the pool was closed while this session was open",
                                         sandbox_mode=self._pool.mode)
                return self._final
            try:
                head, blobs, _ = self._pool._exchange(self._worker, "close", None, 1.0)
            except _Failed as exc:
                return self._end(exc.outcome)
            out = classify(head, blobs, self._request.limits, time.monotonic() - self._t0, self._pool.mode)
            if out.status is Status.CRASH and out.exit_code == 0 and out.signal is None:
                out = RunOutcome(Status.OK, None, out.wall_s, out.cpu_s, out.stdout, out.stderr, "", 0, None,
                                 out.sandbox_mode)
            elif out.signal == signal.SIGKILL and out.status is Status.OOM:
                out = RunOutcome(Status.OK, None, out.wall_s, out.cpu_s, out.stdout, out.stderr, "", None,
                                 out.signal, out.sandbox_mode)  # the close itself killed it
            return self._end(dataclasses.replace(out, descendants_cpu_s=_ns_as_s(head.get("descendants_cpu_ns"))))

    def __enter__(self) -> PoolSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten session must not hold its worker forever
        if getattr(self, "_final", True) is None:
            try:
                self.close()
            except Exception:
                pass
