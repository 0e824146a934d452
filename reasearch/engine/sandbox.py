"""The warm sandbox pool: long-lived workers, one jail each, a forked child per evaluation.

The engine process (this module) is the trusted side. It talks to each worker through a
:class:`~reasearch.engine._handle.WorkerHandle` (a pair of pipes carrying the framed, pickle-free
protocol of :mod:`reasearch.engine._wire`), measures wall time itself around each request, and
decides every status from what was observed, with the pure functions of
:mod:`reasearch.engine._verdict` (see there for the rules). If a worker does not answer within a
request's wall limit plus a grace period, this side kills the worker's whole jail, respawns it, and
reports ``TIMEOUT``.

A worker that dies (for instance because a candidate killed it) is respawned; the request it was
serving ends as ``CRASH`` and the next request is served normally. A worker that retires (its
clean-up failed, or its scratch filesystem is short of space) is replaced before the request it
refused, which then runs on the fresh worker. Engine faults raise
:class:`~reasearch.errors.SandboxError` with their traceback; nothing is retried blindly.

Trust: the engine trusts the worker's report (the worker is engine code inside the jail, shielded
from its children by a second uid where one can be mapped), never the child's: the child only
produces the result frame, whose size the worker caps while reading and whose content the engine
decodes without pickle. Wall time is the engine's own clock around request and reply (a harness's
first import and ``warmup()`` in a worker is evaluator time and is not counted).

The pool is cut by concern: :mod:`reasearch.engine._pool_schedule` chooses the worker (a
:class:`~reasearch.engine._pool_schedule.WorkerScheduler` the pool holds), :mod:`reasearch.engine._fit`
reads which image a request needs, and
:mod:`reasearch.engine._pool_session` holds :class:`PoolSession`; this module starts, exchanges with and
closes the workers. Every public name stays importable from here.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from reasearch.engine import _wire
from reasearch.engine._fit import fit_profile
from reasearch.engine._handle import WorkerDied, WorkerHandle, WorkerRetired, WorkerStuck
from reasearch.engine._pool_schedule import WorkerScheduler
from reasearch.engine._pool_session import PoolSession, _Failed
from reasearch.engine._procs import set_child_subreaper
from reasearch.engine._runtime import RUNTIME_PACKAGES
from reasearch.engine._verdict import classify, decode_value_frame
from reasearch.engine.config import DEFAULT_PRELOAD, SandboxConfig, SandboxMode
from reasearch.engine.isolation import make_launcher
from reasearch.engine.protocol import Limits, RunOutcome, RunRequest, Status
from reasearch.engine.waits import waiting
from reasearch.errors import ConfigError, SandboxError

__all__ = ["DEFAULT_PRELOAD", "PoolSession", "SandboxConfig", "SandboxMode", "SandboxPool", "close_default_pool",
           "default_pool", "fit_profile"]


def _limits_dict(limits: Limits) -> dict[str, Any]:
    return {
        "wall_s": float(limits.wall_s),
        "outer_wall_s": float(limits.outer_wall_s()),
        "cpu_s": float(limits.effective_cpu_s()),
        "memory_mb": int(limits.memory_mb),
        "nproc": int(limits.nproc),
        "fsize_mb": int(limits.fsize_mb),
        "nofile": int(limits.nofile),
        "output_bytes": int(limits.output_bytes),
        "result_bytes": int(limits.result_bytes),
    }


def _check_request(request: RunRequest) -> None:
    if not isinstance(request, RunRequest):
        raise TypeError(f"expected a RunRequest, got {type(request).__name__}")
    entry = [request.entry] if isinstance(request.entry, str) else list(request.entry)
    if not entry or not all(isinstance(e, str) and e.isidentifier() for e in entry):
        raise ConfigError(f"RunRequest.entry must name Python functions; got {request.entry!r}")
    if request.harness is not None and (":" not in request.harness):
        raise ConfigError(f"RunRequest.harness must look like 'package.module:function'; got {request.harness!r}")
    if request.preload is not None and (isinstance(request.preload, str) or not all(
            isinstance(m, str) and m and all(part.isidentifier() for part in m.split(".")) for m in request.preload)):
        raise ConfigError(f"RunRequest.preload must be a sequence of module names or None; got {request.preload!r}")
    lim = request.limits
    if not (lim.wall_s > 0 and lim.effective_cpu_s() > 0 and lim.memory_mb > 0 and lim.nproc > 0
            and lim.nofile >= 8 and lim.output_bytes >= 0 and lim.result_bytes > 0):
        raise ConfigError(f"RunRequest.limits out of range: {lim}")


def _collect_stamps(stamps: dict[str, int], head: dict[str, Any], blobs: list[memoryview]) -> None:
    """Adds the worker's and the child's stamps of a stamped reply to ``stamps`` (ints only; never raises)."""
    got = head.get("stamps")
    parts: list[Any] = []
    if isinstance(got, dict):
        parts += [got.get("req"), got.get("prev")]
    try:
        child = decode_value_frame(blobs, head)
    except Exception:  # a child's bytes: display data only, never an error
        child = None
    if child is not None and isinstance(child[0], dict):
        parts.append(child[0].get("t"))
    for part in parts:
        if isinstance(part, dict):
            stamps.update({k: v for k, v in part.items()
                           if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)})


class SandboxPool:
    """A pool of warm sandbox workers (thread-safe; implements ``SandboxRunner``).

    Args:
        config: a :class:`SandboxConfig`; default: auto mode, one worker per core.

    Raises:
        SandboxUnavailableError: ``mode="nsjail"`` was asked for and cannot run here.
        SandboxError: a worker failed to start.

    Example:
        >>> with SandboxPool(SandboxConfig(workers=2)) as pool:
        ...     out = pool.run(RunRequest(source="def run(x):\\n    return x + 1\\n", payload={"x": 1}))
        ...     out.value
        2
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        if not isinstance(self.config, SandboxConfig):
            raise ConfigError(f"config must be a SandboxConfig, not {type(self.config).__name__}")
        set_child_subreaper()
        self._tmp = Path(tempfile.mkdtemp(prefix="reasearch-pool-"))
        os.chmod(self._tmp, 0o711)
        try:
            # The first start after an install builds the jail's runtime (seconds): a person is told what waits.
            with waiting(f"the sandbox to start ({self.config.mode} mode: checking or building the jail's runtime)"):
                self._launcher = make_launcher(self.config, self._tmp)
        except BaseException:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise
        self._closed = False
        self._restarts = 0
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        # Workers are started (and restarted, and replaced for another image) by this one thread,
        # which lives as long as the pool: each worker dies with the thread that started it.
        self._spawner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sandbox-spawn")
        self._workers = [WorkerHandle(i, self._launcher, self.config, self._tmp, self._count_restart,
                                      spawn=self._spawn)
                         for i in range(self.config.n_workers)]
        # Modules a profile may name: what the jail's runtime holds (see _runtime.build_runtime).
        importable = ({"reasearch"} | set(RUNTIME_PACKAGES) | set(self.config.runtime_packages)
                      | {m.partition(".")[0] for m in self.config.preload})
        self._schedule = WorkerScheduler(self.config, self._workers, importable, self._launcher.keepalive)
        if self.config.lazy_start:
            for w in self._workers:
                w.cold = True  # started by the scheduler's acquire, on first need, with the image that need asks for
        try:
            for w in self._workers:
                if not w.cold:
                    w.start()
            for w in self._workers:
                if not w.cold:
                    w.wait_ready(self.config.start_timeout_s)
        except BaseException:
            self.close()
            raise
        self._schedule.admit(self._workers)

    def _spawn(self, popen: Any) -> Any:
        return self._spawner.submit(popen).result()

    def _count_restart(self) -> None:
        self._restarts += 1

    @property
    def mode(self) -> str:
        """``"nsjail"`` or ``"process"``."""
        return self._launcher.mode

    @property
    def isolation(self) -> str:
        """One line: the mode and what it does (and does not) isolate."""
        return self._launcher.describe()

    @property
    def workers(self) -> int:
        return len(self._workers)

    @property
    def restarts(self) -> int:
        """How many times a worker was respawned (it died, or did not answer and was killed)."""
        return self._restarts

    @property
    def profile_switches(self) -> int:
        """How many times an idle worker was replaced by one with another warm image (profile)."""
        return self._schedule.switches

    def profiles(self) -> list[tuple[str, ...]]:
        """The warm image of each worker, by slot."""
        return [w.profile for w in self._workers]

    @property
    def separate_child_uid(self) -> bool:
        """True when each child runs as a uid other than its worker's (it cannot signal the worker)."""
        return self._launcher.separate_child_uid

    def ping(self) -> list[dict[str, Any]]:
        """Asks every worker for its state (waits for busy ones): the pids of its pre-forked child and
        of its zygote (None without one), as seen inside the worker's PID namespace. Used by tests
        that look for stray processes."""
        states = []
        taken = [self._schedule.acquire() for _ in self._workers]
        try:
            for w in taken:
                w.send({"op": "ping"})
                try:
                    head, _, _ = w.reply(time.monotonic() + self.config.grace_s)
                except WorkerRetired:
                    w.restart()
                    w.send({"op": "ping"})
                    head, _, _ = w.reply(time.monotonic() + self.config.grace_s)
                states.append({"worker": w.index, "pid": w.proc.pid if w.proc else None,
                               "idle_child": head.get("idle_child"), "zygote": head.get("zygote")})
        finally:
            for w in taken:
                self._schedule.release(w)
        return sorted(states, key=lambda d: d["worker"])

    def worker_info(self) -> list[dict[str, Any]]:
        """What each worker reported at start (pid, uid, interpreter, preload seconds)."""
        return [dict(w.info) for w in self._workers]

    def _exchange(self, w: WorkerHandle, op: str, obj: Any, wall_s: float,
                  stamps: dict[str, int] | None = None) -> tuple[dict[str, Any], list[memoryview], float]:
        """One request/reply with worker ``w`` -> (reply header, blobs, start of the candidate's clock).

        Worker death or silence becomes a :class:`_Failed` (after the worker was respawned)."""
        if self._closed:
            raise SandboxError("this SandboxPool is closed; create a new one (or use default_pool())")
        t0 = time.monotonic()
        try:
            for attempt in range(2):
                if op in ("run", "session"):
                    req: RunRequest = obj
                    header: dict[str, Any] = {"op": op, "source": req.source,
                              "entry": [req.entry] if isinstance(req.entry, str) else list(req.entry),
                              "harness": req.harness, "limits": _limits_dict(req.limits)}
                    if stamps is not None:
                        header["stamps"] = True
                        stamps["e_worker"] = w.index
                        stamps["e_start"] = time.monotonic_ns()
                    w.send(header, {"payload": dict(req.payload), "files": dict(req.files)}, stamps)
                elif op == "call":
                    w.send({"op": "call", "timeout_s": wall_s}, dict(obj))
                else:
                    w.send({"op": op})
                try:
                    outer = obj.limits.outer_wall_s() if op in ("run", "session") else None
                    return w.reply(t0 + wall_s + self.config.grace_s, wall_s, t0, outer)
                except WorkerRetired as exc:
                    # Only an idle worker retires (never one holding a session): the request never
                    # started, so it goes once to the fresh worker (its clock restarts there).
                    if attempt or op not in ("run", "session", "ping"):
                        raise SandboxError(f"sandbox worker {w.index} retired twice in a row: {exc}") from None
                    w.restart()
                    t0 = time.monotonic()
            raise AssertionError("unreachable")
        except _wire.NotPlainDataError as exc:
            raise ConfigError(f"request payload is not plain data (JSON types and NumPy arrays): {exc}") from None
        except WorkerStuck:
            waited = time.monotonic() - t0
            waits = f" (+ {w.waited_s:.2f} s its candidate waited for a CPU)" if w.waited_s > 0 else ""
            tail = w.log_tail(1000)
            w.kill()
            w.restart()
            raise _Failed(RunOutcome(Status.TIMEOUT, None, waited, 0.0,
                                     error=f"the sandbox worker did not answer within {wall_s:g} s + "
                                     f"{self.config.grace_s:g} s grace{waits}; its jail was killed and respawned. "
                                     f"Worker log tail:\n{tail}", sandbox_mode=self.mode)) from None
        except WorkerDied:
            waited = time.monotonic() - t0
            try:
                code = w.proc.wait(timeout=1.0) if w.proc else None
            except subprocess.TimeoutExpired:
                code = None
            w.kill()
            w.restart()
            raise _Failed(RunOutcome(Status.CRASH, None, waited, 0.0,
                                     error=f"the sandbox worker died during the request (exit status {code}); "
                                     "it was respawned. A candidate that kills its worker ends here.",
                                     exit_code=code, sandbox_mode=self.mode)) from None
        except SandboxError:
            raise  # the worker reported an engine error and is still in step with us
        except BaseException:
            # Interrupted mid-request (KeyboardInterrupt, a bug): the worker's next reply would answer
            # the wrong request, so it is killed; the next acquire starts a fresh one.
            w.kill()
            raise

    # -- the SandboxRunner API
    def profile_of(self, request: RunRequest) -> tuple[str, ...]:
        """The warm image (sorted module names) that serves ``request`` (see
        :meth:`~reasearch.engine._pool_schedule.WorkerScheduler.profile_of`).

        Raises:
            ConfigError: the request names a module outside the pool's runtime.
        """
        return self._schedule.profile_of(request)

    def prestart(self, request: RunRequest) -> bool:
        """Starts, in the background, a never-started slot of a lazy pool with the image that will serve
        ``request``; False when no slot is cold or one with that image is up or on its way (see
        :meth:`~reasearch.engine._pool_schedule.WorkerScheduler.prestart`).

        Raises:
            ConfigError: as :meth:`profile_of`.
        """
        return self._schedule.prestart(request)

    def run(self, request: RunRequest) -> RunOutcome:
        """Runs one request in a free worker (blocks; thread-safe).

        The worker is one whose warm image is the request's profile (:meth:`profile_of`).

        Returns:
            A :class:`RunOutcome` whose status the engine decided from what it observed.

        Raises:
            ConfigError: the request is malformed (bad entry, harness, preload or limits, non-plain payload).
            SandboxError: the engine failed (a harness that cannot be imported, a worker that cannot
                be started); candidate failures never raise.
        """
        return self._run(request, None)

    def run_stamped(self, request: RunRequest) -> tuple[RunOutcome, dict[str, int]]:
        """:meth:`run`, plus monotonic ns stamps of each step (benchmarks only; see ``reasearch bench``).

        Stamps: ``e_*`` taken here (``e_worker``: the worker's slot), ``w_*`` by the worker
        (``w_cpu_ns``: its own CPU clock), ``c_*`` by the child (only on an ``OK`` outcome; a
        candidate could forge them, so they are for display only), ``p_*`` by the worker after its
        previous reply (teardown of the previous child, the next fork, clean-up), ``child_cpu_*``
        and ``p_child_cpu_ns``: the child's CPU ns before its request, at the reply, and over its
        whole life (the previous child's, exit included).
        """
        stamps: dict[str, int] = {}
        return self._run(request, stamps), stamps

    def _run(self, request: RunRequest, stamps: dict[str, int] | None) -> RunOutcome:
        _check_request(request)
        w = self._schedule.acquire(self.profile_of(request))
        try:
            try:
                head, blobs, t0 = self._exchange(w, "run", request, request.limits.wall_s, stamps)
            except _Failed as exc:
                return exc.outcome
            if stamps is not None:
                stamps["e_recv"] = time.monotonic_ns()
            out = classify(head, blobs, request.limits, time.monotonic() - t0, self.mode, oom_rose=w.oom_rose)
            if stamps is not None:
                stamps["e_done"] = time.monotonic_ns()
                _collect_stamps(stamps, head, blobs)
            return out
        finally:
            self._schedule.release(w)

    def fork_floor(self, n: int = 200, profile: tuple[str, ...] | None = None) -> list[int]:
        """ns per bare fork + ``_exit(0)`` + reap of a worker's warm image, measured inside its jail
        (benchmarks only: the floor under any evaluation served by that image)."""
        w = self._schedule.acquire(self.profile_of(RunRequest(source="", preload=profile)))
        try:
            w.send({"op": "floor", "n": int(n)})
            head, _, _ = w.reply(time.monotonic() + 60.0 + self.config.grace_s)
            return [int(x) for x in head.get("fork_exit_ns") or []]
        finally:
            self._schedule.release(w)

    def submit(self, request: RunRequest) -> concurrent.futures.Future[RunOutcome]:
        """Runs a request on the pool's own threads; returns a future of its :class:`RunOutcome`."""
        with self._lock:
            if self._closed:
                raise SandboxError("this SandboxPool is closed; create a new one (or use default_pool())")
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(self.workers, thread_name_prefix="sandbox")
            return self._executor.submit(self.run, request)

    def session(self, request: RunRequest) -> PoolSession:
        """Starts a session: the candidate is imported once, then served call by call.

        The worker stays reserved until the session is closed (use it as a context manager). If the
        candidate fails to load, the returned session is already closed and :meth:`PoolSession.close`
        returns the failure; every :meth:`PoolSession.call` then answers ``CRASH``.
        """
        _check_request(request)
        w = self._schedule.acquire(self.profile_of(request))
        sess = PoolSession(self, w, request, self._schedule.release)
        sess._open()
        return sess

    def close(self) -> None:
        """Stops every worker (killing their jails) and removes the pool's temporary files."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            ex, self._executor = self._executor, None
        background = self._schedule.close()  # waiters see the pool closed
        for t in background:  # a worker being started in the background is killed below, once up
            t.join(self.config.start_timeout_s)
        if ex is not None:
            ex.shutdown(wait=True, cancel_futures=True)
        for w in self._workers:
            w.kill()
        self._spawner.shutdown(wait=True)
        self._launcher.cleanup()
        shutil.rmtree(self._tmp, ignore_errors=True)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SandboxPool(mode={self.mode!r}, workers={self.workers}, closed={self._closed})"


_default: SandboxPool | None = None
_default_lock = threading.Lock()
_atexit_registered = False


def default_pool() -> SandboxPool:
    """The process-wide pool: started on first use, closed at exit, recreated if it was closed."""
    global _default, _atexit_registered
    with _default_lock:
        if _default is None or _default.closed:
            _default = SandboxPool(SandboxConfig(lazy_start=True))  # a process may evaluate only once
            if not _atexit_registered:
                atexit.register(close_default_pool)
                _atexit_registered = True
        return _default


def close_default_pool() -> None:
    """Closes the process-wide pool if it is running (a later :func:`default_pool` starts a new one)."""
    global _default
    with _default_lock:
        pool, _default = _default, None
    if pool is not None:
        pool.close()

