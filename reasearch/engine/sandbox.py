"""The warm sandbox pool: long-lived workers, one jail each, a forked child per evaluation.

The engine process (this module) is the trusted side. It talks to each worker over a pair of pipes
with the framed, pickle-free protocol of :mod:`reasearch.engine._wire`, measures wall time itself
around each request, and decides every status from what was observed:

* wall time past ``limits.wall_s``: the worker kills the child's whole tree -> ``TIMEOUT``; if the
  worker itself does not answer within the limit plus a grace period, this side kills the worker's
  whole jail, respawns it, and reports ``TIMEOUT``;
* CPU time (``wait4`` rusage of the child and every reaped descendant, reported by the worker, never
  by the child) past the limit, or death by ``SIGXCPU`` -> ``TIMEOUT``;
* a ``MemoryError`` reported by the child, or a ``SIGKILL`` nobody on our side sent -> ``OOM``;
* anything else abnormal (exception, exit code, signal, garbage or oversized result, missing entry
  point) -> ``CRASH`` with the reason.

A worker that dies (for instance because a candidate killed it) is respawned; the request it was
serving ends as ``CRASH`` and the next request is served normally. Engine faults raise
:class:`~reasearch.errors.SandboxError` with their traceback; nothing is retried blindly.

Trust: the engine trusts the worker's report (the worker is engine code inside the jail, shielded
from its children by a second uid where one can be mapped), never the child's: the child only
produces the result frame, whose size the worker caps while reading and whose content the engine
decodes without pickle. Wall time is the engine's own clock around request and reply (a harness's
first import and ``warmup()`` in a worker is evaluator time and is not counted).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import enum
import math
import os
import queue
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from reasearch.engine import _wire
from reasearch.engine._procs import (
    descendants_of,
    kill_orphans,
    reap_jail_orphans,
    reap_pids,
    set_child_subreaper,
    stop_and_wait,
)
from reasearch.errors import ConfigError, SandboxError
from reasearch.engine.protocol import CallOutcome, Limits, RunOutcome, RunRequest
from reasearch.engine.protocol import Status

__all__ = ["DEFAULT_PRELOAD", "PoolSession", "SandboxConfig", "SandboxMode", "SandboxPool"]


DEFAULT_PRELOAD: tuple[str, ...] = ("numpy", "scipy.optimize", "numba", "reasearch.native")
_REPLY_CAP = 1 << 34


class SandboxMode(str, enum.Enum):
    """Isolation mode: ``AUTO`` picks ``NSJAIL`` where it works, else ``PROCESS`` (with a loud warning)."""

    AUTO = "auto"
    NSJAIL = "nsjail"
    PROCESS = "process"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class SandboxConfig:
    """Configuration of a :class:`SandboxPool` (unknown keys are an error).

    Attributes:
        mode: ``"auto"`` (nsjail where it works, else process mode with a warning logged once),
            ``"nsjail"`` (raise :class:`~reasearch.errors.SandboxUnavailableError` if it cannot run)
            or ``"process"`` (rlimits and process groups only: no filesystem or network isolation).
        workers: number of warm workers; default ``os.cpu_count()``.
        preload: modules each worker imports before it forks any child.
        numba_cache_dir: base folder for per-worker ``NUMBA_CACHE_DIR`` folders (process mode; inside
            a jail each worker's cache lives in the jail's own ``/tmp``); default: a per-pool temp dir.
        runtime_packages: extra top-level packages made importable inside the jail, beyond
            :data:`reasearch.engine._runtime.RUNTIME_PACKAGES` (NumPy, SciPy, numba, highspy, torch, ...)
            and the ``preload`` modules.
        start_timeout_s: how long a worker may take to start and preload before the pool raises.
        grace_s: how long past a request's wall limit the engine waits for a worker before killing
            its jail (the worker normally answers right at the limit).
        scratch_min_free_mb: a worker whose scratch filesystem has less free space than this after
            cleaning up behind a candidate retires, and the engine replaces it before its next request.
    """

    mode: str = "auto"
    workers: int | None = None
    preload: tuple[str, ...] = DEFAULT_PRELOAD
    numba_cache_dir: str | None = None
    runtime_packages: tuple[str, ...] = ()
    start_timeout_s: float = 120.0
    grace_s: float = 5.0
    scratch_min_free_mb: int = 64

    def __post_init__(self) -> None:
        try:
            SandboxMode(self.mode)
        except ValueError:
            raise ConfigError(f"SandboxConfig.mode must be one of auto, nsjail, process; got {self.mode!r}") from None
        if self.workers is not None and (not isinstance(self.workers, int) or self.workers < 1):
            raise ConfigError(f"SandboxConfig.workers must be a positive int or None; got {self.workers!r}")
        if isinstance(self.preload, str) or not all(isinstance(m, str) for m in self.preload):
            raise ConfigError("SandboxConfig.preload must be a sequence of module names")
        object.__setattr__(self, "preload", tuple(self.preload))
        if isinstance(self.runtime_packages, str) or not all(isinstance(m, str) for m in self.runtime_packages):
            raise ConfigError("SandboxConfig.runtime_packages must be a sequence of package names")
        object.__setattr__(self, "runtime_packages", tuple(self.runtime_packages))
        if self.start_timeout_s <= 0 or self.grace_s <= 0:
            raise ConfigError("SandboxConfig.start_timeout_s and grace_s must be positive")
        if not isinstance(self.scratch_min_free_mb, int) or self.scratch_min_free_mb < 0:
            raise ConfigError(f"SandboxConfig.scratch_min_free_mb must be an int >= 0; got {self.scratch_min_free_mb!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SandboxConfig:
        """Builds a config from a mapping; unknown keys raise :class:`~reasearch.errors.ConfigError`."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown SandboxConfig keys {unknown}; known keys: {sorted(known)}")
        return cls(**dict(data))

    @property
    def n_workers(self) -> int:
        return self.workers or os.cpu_count() or 1


def _limits_dict(limits: Limits) -> dict[str, Any]:
    return {
        "wall_s": float(limits.wall_s),
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
    lim = request.limits
    if not (lim.wall_s > 0 and lim.effective_cpu_s() > 0 and lim.memory_mb > 0 and lim.nproc > 0
            and lim.nofile >= 8 and lim.output_bytes >= 0 and lim.result_bytes > 0):
        raise ConfigError(f"RunRequest.limits out of range: {lim}")


class _WorkerDied(Exception):
    """The worker's pipe closed (it died) while a request was in flight."""


class _WorkerStuck(Exception):
    """The worker did not answer in time."""


class _WorkerRetired(Exception):
    """The worker refused a request because it must be replaced (its clean-up failed, or its scratch
    filesystem is short of space); the request did not start."""


class _Worker:
    """Engine-side handle of one worker process (a jail in nsjail mode)."""

    def __init__(self, pool: SandboxPool, index: int) -> None:
        self.pool = pool
        self.index = index
        self.proc: subprocess.Popen[bytes] | None = None
        self.buf = bytearray()
        self.info: dict[str, Any] = {}
        self.child_pid: int | None = None
        self.log_path = pool._tmp / f"worker-{index}.log"
        self.generation = 0

    # -- life cycle
    def start(self) -> None:
        self.generation += 1
        self.buf.clear()
        argv, env = self.pool._launcher.worker_command(self.index)
        with open(self.log_path, "ab") as log_fh:  # the worker keeps its own copy of the descriptor
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_fh,
                                         env=env, close_fds=True, start_new_session=True)

    def wait_ready(self, timeout: float) -> None:
        try:
            head, _ = self.recv(time.monotonic() + timeout)
        except (_WorkerDied, _WorkerStuck) as exc:
            self.kill()
            raise SandboxError(f"sandbox worker {self.index} failed to start ({type(exc).__name__[1:]}).\n"
                               f"Worker log ({self.log_path}):\n{self.log_tail()}") from None
        if head.get("kind") != "ready":
            self.kill()
            raise SandboxError(f"sandbox worker {self.index} sent {head!r} instead of 'ready'")
        if head.get("errors"):
            self.kill()
            details = "\n".join(f"{k}:\n{v}" for k, v in head["errors"].items())
            raise SandboxError(f"sandbox worker could not preload modules (check SandboxConfig.preload):\n{details}")
        self.info = head

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode("utf-8", errors="replace")
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """Kills the worker (its whole jail in nsjail mode) and whatever its children left behind."""
        proc = self.proc
        if proc is None:
            return
        if self.pool._launcher.mode == "process":
            # Freeze the worker first, so that it cannot fork between the snapshot and the kill.
            stop_and_wait(proc.pid)
        tree = descendants_of(proc.pid)  # snapshot: once the worker is gone they come back to us
        for target in (proc.pid, *tree):
            try:
                os.kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        for f in (proc.stdin, proc.stdout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        if self.pool._launcher.mode == "process":
            kill_orphans(child_pgid=self.child_pid, uid=self.pool._launcher.child_uid(self.index))
        reap_pids(tree)
        reap_jail_orphans()  # a jail dies with its nsjail; its processes came back to us to be reaped
        self.child_pid = None
        self.proc = None

    def restart(self) -> None:
        self.pool._restarts += 1
        self.kill()
        self.start()
        self.wait_ready(self.pool.config.start_timeout_s)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- frames
    def send(self, header: dict[str, Any], value: Any = None) -> None:
        if self.proc is None or self.proc.stdin is None:
            raise _WorkerDied()
        data = _wire.encode_frame(header, value, path="payload")
        try:
            _wire.write_all(self.proc.stdin.fileno(), data)
        except (BrokenPipeError, OSError):
            raise _WorkerDied() from None

    def recv(self, deadline: float | None) -> tuple[dict[str, Any], list[memoryview]]:
        """Reads one reply frame before ``deadline`` (monotonic seconds; None: no deadline)."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            if len(self.buf) >= _wire.FRAME_LEN.size:
                (n,) = _wire.FRAME_LEN.unpack_from(self.buf)
                if n > _REPLY_CAP:
                    self.kill()  # out of step: a fresh worker is started on next use
                    raise SandboxError(f"sandbox worker sent a {n}-byte frame: protocol corrupted")
                end = _wire.FRAME_LEN.size + n
                if len(self.buf) >= end:
                    body = bytes(self.buf[_wire.FRAME_LEN.size:end])
                    del self.buf[:end]
                    try:
                        return _wire.split_body(body)
                    except _wire.WireError as exc:
                        self.kill()
                        raise SandboxError(f"sandbox worker sent a malformed frame: {exc}") from None
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                raise _WorkerStuck()
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise _WorkerDied()
            self.buf += chunk

    def reply(self, deadline: float, wall_s: float | None = None,
              t_start: float | None = None) -> tuple[dict[str, Any], list[memoryview], float]:
        """Next reply that is not a notice; returns it with the time the candidate's clock started.

        Notices: ``started`` records the child's pid (for clean-up should the worker die);
        ``warming``/``warmed`` bracket the first import (and ``warmup()``) of a harness module in
        the worker, which may compile numba kernels: that time is the evaluator's, so the deadline
        is suspended meanwhile and the request's wall clock starts again at ``warmed``.
        """
        t_start = time.monotonic() if t_start is None else t_start  # the clock starts before the send
        while True:
            head, blobs = self.recv(deadline)
            kind = head.get("kind")
            if kind == "started":
                self.child_pid = head.get("pid")
                continue
            if kind == "warming":
                deadline = time.monotonic() + self.pool.config.start_timeout_s
                continue
            if kind == "warmed":  # the worker's own measure: our thread may read this notice late
                t_start += max(0.0, float(head.get("warm_s") or 0.0))
                if wall_s is not None:
                    deadline = time.monotonic() + wall_s + self.pool.config.grace_s
                continue
            if kind == "retired":
                raise _WorkerRetired(str(head.get("reason")))
            if head.get("kind") == "done":
                self.child_pid = None
            if head.get("kind") == "engine_error":
                raise SandboxError(f"sandbox worker {self.index} failed:\n{head.get('error')}")
            return head, blobs, t_start


def _decode_value_frame(blobs: list[memoryview], head: dict[str, Any]) -> tuple[dict[str, Any], Any] | None:
    """The child's own frame, carried as the worker reply's value (bytes); None when absent."""
    holder = head.get("value")
    if holder is None:
        return None
    raw = _wire.decode_value(holder, blobs)  # the worker sends the raw frame body as one bytes blob
    if not isinstance(raw, bytes):
        raise SandboxError("sandbox worker reply carries a non-bytes result")
    return _wire.decode_frame(raw)


def _child_result(head: dict[str, Any], blobs: list[memoryview]) -> tuple[str, Any, str]:
    """(kind, value, error) from the child's frame: kind is ok, oom, error, garbage or none."""
    try:
        got = _decode_value_frame(blobs, head)
    except _wire.WireError as exc:
        return "garbage", None, f"the candidate's result pipe carried garbage ({exc})"
    except (RecursionError, ValueError, TypeError) as exc:  # defence in depth: never raise on a child's bytes
        return "garbage", None, f"the candidate's result pipe carried garbage ({type(exc).__name__}: {exc})"
    if got is None:
        return "none", None, ""
    child_head, value = got
    kind = child_head.get("kind")
    if kind == "ok":
        return "ok", value, ""
    if kind == "oom":
        return "oom", None, "MemoryError: the candidate ran out of its memory limit"
    if kind == "error":
        return "error", None, str(child_head.get("error", ""))
    return "garbage", None, f"the candidate's result pipe carried an unknown frame kind {kind!r}"


def _classify(head: dict[str, Any], blobs: list[memoryview], limits: Limits, wall_s: float, mode: str) -> RunOutcome:
    """Decides the status of a finished child from what the worker observed (see the module doc)."""
    exit_code, sig = head.get("exit_code"), head.get("signal")
    cpu_s = float(head.get("cpu_s") or 0.0)
    common: dict[str, Any] = {"wall_s": wall_s, "cpu_s": cpu_s, "stdout": head.get("stdout", ""),
                              "stderr": head.get("stderr", ""), "exit_code": exit_code, "signal": sig,
                              "sandbox_mode": mode}
    cpu_limit = limits.effective_cpu_s()
    cpu_hard = max(1, math.ceil(cpu_limit))
    if head.get("killed") == "wall":
        return RunOutcome(Status.TIMEOUT, None, error=f"killed at the wall-time limit of {limits.wall_s:g} s",
                          **common)
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_s >= cpu_hard - 0.05) or cpu_s > cpu_limit + 0.5:
        return RunOutcome(Status.TIMEOUT, None,
                          error=f"killed at the CPU-time limit of {cpu_limit:g} s (used {cpu_s:.2f} s)", **common)
    if head.get("too_large"):
        return RunOutcome(Status.CRASH, None, error=f"result larger than {limits.result_bytes} bytes (refused)",
                          **common)
    kind, value, err = _child_result(head, blobs)
    if kind == "oom":
        return RunOutcome(Status.OOM, None, error=err, **common)
    if kind == "ok" and (exit_code == 0 or (head.get("early") and exit_code is None and sig is None)):
        return RunOutcome(Status.OK, value, **common)
    if kind in ("error", "garbage"):
        return RunOutcome(Status.CRASH, None, error=err, **common)
    if sig == signal.SIGKILL:  # nobody on our side sent it: the kernel's OOM killer
        return RunOutcome(Status.OOM, None, error="killed by SIGKILL (out of memory)", **common)
    if sig is not None:
        return RunOutcome(Status.CRASH, None, error=f"killed by signal {sig} ({signal.Signals(sig).name})"
                          if sig in signal.Signals._value2member_map_ else f"killed by signal {sig}", **common)
    if kind == "ok":
        return RunOutcome(Status.CRASH, None, error=f"exited with code {exit_code} after sending its result",
                          **common)
    return RunOutcome(Status.CRASH, None, error=f"exited with code {exit_code} without a result", **common)


class PoolSession:
    """A candidate kept alive in one worker for many timed calls (see ``SandboxSession``).

    The worker is reserved for the session's lifetime; :meth:`close` releases it. Each
    :meth:`call`'s ``wall_s`` is measured by the engine around request and response.
    """

    def __init__(self, pool: SandboxPool, worker: _Worker, request: RunRequest) -> None:
        self._pool = pool
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
        self._pool._release(self._worker)
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
        return self._end(_classify(head, blobs, lim, time.monotonic() - self._t0, self._pool.mode))

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
                kind, value, err = _child_result(head, blobs)
                if kind == "ok":
                    return CallOutcome(Status.OK, value, wall)
                return CallOutcome(Status.OOM if kind == "oom" else Status.CRASH, None, wall, error=err)
            final = _classify(head, blobs, self._request.limits, time.monotonic() - self._t0, self._pool.mode)
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
            out = _classify(head, blobs, self._request.limits, time.monotonic() - self._t0, self._pool.mode)
            if out.status is Status.CRASH and out.exit_code == 0 and out.signal is None:
                out = RunOutcome(Status.OK, None, out.wall_s, out.cpu_s, out.stdout, out.stderr, "", 0, None,
                                 out.sandbox_mode)
            elif out.signal == signal.SIGKILL and out.status is Status.OOM:
                out = RunOutcome(Status.OK, None, out.wall_s, out.cpu_s, out.stdout, out.stderr, "", None,
                                 out.signal, out.sandbox_mode)  # the close itself killed it
            return self._end(out)

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


class _Failed(Exception):
    """A request ended without a normal reply (worker stuck or died); carries the outcome to return."""

    def __init__(self, outcome: RunOutcome) -> None:
        super().__init__(outcome.error)
        self.outcome = outcome


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
        from reasearch.engine.isolation import make_launcher

        self.config = config or SandboxConfig()
        if not isinstance(self.config, SandboxConfig):
            raise ConfigError(f"config must be a SandboxConfig, not {type(self.config).__name__}")
        set_child_subreaper()
        self._tmp = Path(tempfile.mkdtemp(prefix="reasearch-pool-"))
        os.chmod(self._tmp, 0o711)
        try:
            self._launcher = make_launcher(self.config, self._tmp)
        except BaseException:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise
        self._closed = False
        self._restarts = 0
        self._lock = threading.Lock()
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._workers = [_Worker(self, i) for i in range(self.config.n_workers)]
        try:
            for w in self._workers:
                w.start()
            for w in self._workers:
                w.wait_ready(self.config.start_timeout_s)
        except BaseException:
            self.close()
            raise
        for w in self._workers:
            self._idle.put(w)

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
    def separate_child_uid(self) -> bool:
        """True when each child runs as a uid other than its worker's (it cannot signal the worker)."""
        return self._launcher.separate_child_uid

    def ping(self) -> list[dict[str, Any]]:
        """Asks every worker for its state (waits for busy ones): the pid of its pre-forked child, as
        seen inside the worker's PID namespace. Used by tests that look for stray processes."""
        states = []
        taken = [self._acquire() for _ in self._workers]
        try:
            for w in taken:
                w.send({"op": "ping"})
                try:
                    head, _, _ = w.reply(time.monotonic() + self.config.grace_s)
                except _WorkerRetired:
                    w.restart()
                    w.send({"op": "ping"})
                    head, _, _ = w.reply(time.monotonic() + self.config.grace_s)
                states.append({"worker": w.index, "pid": w.proc.pid if w.proc else None,
                               "idle_child": head.get("idle_child")})
        finally:
            for w in taken:
                self._release(w)
        return sorted(states, key=lambda d: d["worker"])

    def worker_info(self) -> list[dict[str, Any]]:
        """What each worker reported at start (pid, uid, interpreter, preload seconds)."""
        return [dict(w.info) for w in self._workers]

    # -- scheduling
    def _acquire(self) -> _Worker:
        if self._closed:
            raise SandboxError("this SandboxPool is closed; create a new one (or use default_pool())")
        while True:
            try:
                w = self._idle.get(timeout=0.5)
            except queue.Empty:
                if self._closed:
                    raise SandboxError("this SandboxPool was closed while waiting for a worker") from None
                continue
            if self._closed:
                self._idle.put(w)
                raise SandboxError("this SandboxPool is closed; create a new one (or use default_pool())")
            if not w.alive():
                w.restart()
            self._launcher.keepalive()
            return w

    def _release(self, w: _Worker) -> None:
        self._idle.put(w)

    def _exchange(self, w: _Worker, op: str, obj: Any,
                  wall_s: float) -> tuple[dict[str, Any], list[memoryview], float]:
        """One request/reply with worker ``w`` -> (reply header, blobs, start of the candidate's clock).

        Worker death or silence becomes a :class:`_Failed` (after the worker was respawned)."""
        if self._closed:
            raise SandboxError("this SandboxPool is closed; create a new one (or use default_pool())")
        t0 = time.monotonic()
        try:
            for attempt in range(2):
                if op in ("run", "session"):
                    req: RunRequest = obj
                    header = {"op": op, "source": req.source,
                              "entry": [req.entry] if isinstance(req.entry, str) else list(req.entry),
                              "harness": req.harness, "limits": _limits_dict(req.limits)}
                    w.send(header, {"payload": dict(req.payload), "files": dict(req.files)})
                elif op == "call":
                    w.send({"op": "call", "timeout_s": wall_s}, dict(obj))
                else:
                    w.send({"op": op})
                try:
                    return w.reply(t0 + wall_s + self.config.grace_s, wall_s, t0)
                except _WorkerRetired as exc:
                    # Only an idle worker retires (never one holding a session): the request never
                    # started, so it goes once to the fresh worker (its clock restarts there).
                    if attempt or op not in ("run", "session", "ping"):
                        raise SandboxError(f"sandbox worker {w.index} retired twice in a row: {exc}") from None
                    w.restart()
                    t0 = time.monotonic()
            raise AssertionError("unreachable")
        except _wire.NotPlainDataError as exc:
            raise ConfigError(f"request payload is not plain data (JSON types and NumPy arrays): {exc}") from None
        except _WorkerStuck:
            waited = time.monotonic() - t0
            tail = w.log_tail(1000)
            w.kill()
            w.restart()
            raise _Failed(RunOutcome(Status.TIMEOUT, None, waited, 0.0,
                                     error=f"the sandbox worker did not answer within {wall_s:g} s + "
                                     f"{self.config.grace_s:g} s grace; its jail was killed and respawned. "
                                     f"Worker log tail:\n{tail}", sandbox_mode=self.mode)) from None
        except _WorkerDied:
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
            # the wrong request, so it is killed; the next _acquire() starts a fresh one.
            w.kill()
            raise

    # -- the SandboxRunner API
    def run(self, request: RunRequest) -> RunOutcome:
        """Runs one request in a free worker (blocks; thread-safe).

        Returns:
            A :class:`RunOutcome` whose status the engine decided from what it observed.

        Raises:
            ConfigError: the request is malformed (bad entry, harness or limits, non-plain payload).
            SandboxError: the engine failed (a harness that cannot be imported, a worker that cannot
                be started); candidate failures never raise.
        """
        _check_request(request)
        w = self._acquire()
        try:
            try:
                head, blobs, t0 = self._exchange(w, "run", request, request.limits.wall_s)
            except _Failed as exc:
                return exc.outcome
            return _classify(head, blobs, request.limits, time.monotonic() - t0, self.mode)
        finally:
            self._release(w)

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
        w = self._acquire()
        sess = PoolSession(self, w, request)
        sess._open()
        return sess

    def close(self) -> None:
        """Stops every worker (killing their jails) and removes the pool's temporary files."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            ex, self._executor = self._executor, None
        if ex is not None:
            ex.shutdown(wait=True, cancel_futures=True)
        for w in self._workers:
            w.kill()
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
            _default = SandboxPool()
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

