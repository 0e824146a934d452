"""The engine-side handle of one warm worker: start, frames in and out, kill, restart.

Named apart from the in-jail worker (:mod:`reasearch.engine._worker`): this object lives in the
engine process and owns the worker's process (its nsjail in nsjail mode) and the two pipes to it.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reasearch.engine import _spin, _wire
from reasearch.engine._oom import oom_kills, rose
from reasearch.engine._procs import descendants_of, kill_orphans, reap_jail_orphans, reap_pids, stop_and_wait
from reasearch.engine.config import SandboxConfig
from reasearch.engine.waits import waiting
from reasearch.errors import SandboxError

__all__ = ["REPLY_CAP", "WorkerDied", "WorkerHandle", "WorkerRetired", "WorkerStuck"]

REPLY_CAP = 1 << 34


START_TRIES = 3  # starts of one worker slot before a death at start-up is an error (see wait_ready)


class WorkerDied(Exception):
    """The worker's pipe closed (it died) while a request was in flight."""


class WorkerStuck(Exception):
    """The worker did not answer in time."""


class WorkerRetired(Exception):
    """The worker refused a request because it must be replaced (its clean-up failed, or its scratch
    filesystem is short of space); the request did not start."""


class WorkerHandle:
    """Engine-side handle of one worker process (a jail in nsjail mode).

    Args:
        index: the worker's number (its slot) in its pool.
        launcher: builds the worker's command line (``NsjailLauncher`` or ``ProcessLauncher``).
        config: the pool's configuration (start timeout, grace period).
        log_dir: where the worker's stderr log goes.
        on_restart: called each time this worker is respawned (the pool counts restarts).
        profile: the modules its warm image preloads (default: ``config.preload``).
        spawn: runs the ``Popen`` of the worker (default: in the calling thread). The pool runs it
            in one long-lived thread of its own: a worker dies with the *thread* that started it
            (``PR_SET_PDEATHSIG``), and a request's thread may end long before the worker should.
    """

    def __init__(
        self,
        index: int,
        launcher: Any,
        config: SandboxConfig,
        log_dir: Path,
        on_restart: Callable[[], None] = lambda: None,
        profile: tuple[str, ...] | None = None,
        spawn: Callable[[Callable[[], subprocess.Popen[bytes]]], subprocess.Popen[bytes]] | None = None,
    ) -> None:
        self.index = index
        self.spawn = spawn or (lambda popen: popen())
        self.profile: tuple[str, ...] = tuple(sorted(set(config.preload))) if profile is None else tuple(profile)
        self.last_used = time.monotonic()  # when the pool last released it (or made it)
        self.launcher = launcher
        self.config = config
        self.on_restart = on_restart
        self.proc: subprocess.Popen[bytes] | None = None
        self.buf = bytearray()
        self.info: dict[str, Any] = {}
        self.child_pid: int | None = None
        self.waited_s = 0.0  # the wait for a CPU the worker last counted for the current request (its "waited")
        self.log_path = log_dir / f"worker-{index}.log"
        self.generation = 0
        self.cold = False  # a slot of a lazily started pool that has not started yet (see SandboxConfig.lazy_start)
        self.oom_seen = oom_kills()  # the host's oom_kill count at this worker's last look (see oom_rose)

    def oom_rose(self) -> bool:
        """Whether the host's ``oom_kill`` count rose since this worker's last look (when it was made, or its
        last child killed by a SIGKILL nobody on our side sent): read only then, never on an evaluation's path.
        Host-wide, so an OOM kill elsewhere in that time counts too: the best evidence at hand."""
        before, self.oom_seen = self.oom_seen, oom_kills()
        return rose(before, self.oom_seen)

    # -- life cycle
    def start(self) -> None:
        self.generation += 1
        self.buf.clear()
        argv, env = self.launcher.worker_command(self.index, self.profile)

        def popen() -> subprocess.Popen[bytes]:
            with open(self.log_path, "ab") as log_fh:  # the worker keeps its own copy of the descriptor
                return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_fh,
                                        env=env, close_fds=True, start_new_session=True)

        self.proc = self.spawn(popen)

    def wait_ready(self, timeout: float) -> None:
        """Waits for the started worker's 'ready'. A worker that dies while it starts (a kill -9 from
        outside, the OOM killer) is replaced and waited for again, :data:`START_TRIES` starts in all;
        a worker that is stuck, or says something else than 'ready', is not (that would not change)."""
        died: list[str] = []
        while True:
            try:
                with waiting(f"sandbox worker {self.index} to start"):
                    head, _ = self.recv(time.monotonic() + timeout)
                if self.proc is not None and self.proc.poll() is not None:
                    # Its launcher (nsjail) died after it had started the jail: the jail's first process
                    # lives on without the supervisor that holds its limits and clean-up. No worker.
                    raise WorkerDied()
                break
            except WorkerDied:
                died.append(self._exit_status())
                self.kill()
                if len(died) < START_TRIES:
                    self.on_restart()
                    self.start()
                    continue
                raise SandboxError(f"sandbox worker {self.index} died while starting, {len(died)} times in a row "
                                   f"({', '.join(died)}); gave up.\n"
                                   f"Worker log ({self.log_path}):\n{self.log_tail()}") from None
            except WorkerStuck:
                self.kill()
                raise SandboxError(f"sandbox worker {self.index} failed to start (no 'ready' within {timeout:g} s)."
                                   f"\nWorker log ({self.log_path}):\n{self.log_tail()}") from None
        if head.get("kind") != "ready":
            self.kill()
            raise SandboxError(f"sandbox worker {self.index} sent {head!r} instead of 'ready'")
        if head.get("errors"):
            self.kill()
            details = "\n".join(f"{k}:\n{v}" for k, v in head["errors"].items())
            raise SandboxError(f"sandbox worker could not preload modules (check SandboxConfig.preload):\n{details}")
        self.info = head

    def _exit_status(self) -> str:
        """How the dead worker ended, in words (its exit status, or the signal that killed it)."""
        try:
            code = self.proc.wait(timeout=1.0) if self.proc is not None else None
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            return "exit status unknown"
        return f"killed by signal {-code}" if code < 0 else f"exit status {code}"

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
        if self.launcher.mode == "process":
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
        if self.launcher.mode == "process":
            kill_orphans(child_pgid=self.child_pid, uid=self.launcher.child_uid(self.index))
            # The worker's own session (its zygote, which dies with it): when the worker was dead before
            # the snapshot above, they came back to us unseen.
            kill_orphans(child_pgid=proc.pid, uid=None)
        reap_pids(tree)
        reap_jail_orphans()  # a jail dies with its nsjail; its processes came back to us to be reaped
        self.child_pid = None
        self.proc = None

    def restart(self) -> None:
        self.on_restart()
        self.kill()
        self.start()
        self.wait_ready(self.config.start_timeout_s)

    def switch_profile(self, profile: tuple[str, ...]) -> None:
        """Replaces this worker by a fresh one (a new jail) whose warm image preloads ``profile``.

        The old worker is killed with its whole jail first: nothing of it (processes, scratch, its
        /tmp) survives into the new one."""
        self.kill()
        self.profile = tuple(profile)
        try:
            self.start()
            self.wait_ready(self.config.start_timeout_s)
            self.cold = False
        except BaseException:
            # An image that cannot start (a module that fails to import) must not stick to this
            # slot: its next restart brings back the pool's default image.
            self.kill()
            self.profile = tuple(sorted(set(self.config.preload)))
            raise

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- frames
    spin_until = 0.0  # the current wait polls until then (see _spin)
    last_frame = 0.0  # when the last frame from the worker arrived
    sent_at = 0.0  # when the current one-shot run was sent
    last_wait_s = 0.0  # how long the previous one-shot run took, send to reply (see _spin.until)

    def send(self, header: dict[str, Any], value: Any = None, stamps: dict[str, int] | None = None) -> None:
        """Writes one request frame; ``stamps`` (bench only) gets ``e_sent`` between encoding and writing."""
        if self.proc is None or self.proc.stdin is None:
            raise WorkerDied()
        data = _wire.encode_frame(header, value, path="payload")
        now = time.monotonic()  # a one-shot run after a pause polls for its reply first (see _spin)
        run = header.get("op") == "run"
        self.spin_until = _spin.until(now, self.last_frame, _spin.ENGINE_S, self.last_wait_s) if run else 0.0
        self.sent_at = now if run else 0.0
        if stamps is not None:
            stamps["e_polls"] = int(self.spin_until > 0.0)  # whether this wait polls first (see _spin.until)
            stamps["e_last_wait_ns"] = int(self.last_wait_s * 1e9)  # what that was decided on
            stamps["e_sent"] = time.monotonic_ns()  # before the write: the worker may read it at once
        try:
            _wire.write_all(self.proc.stdin.fileno(), data)
        except (BrokenPipeError, OSError):
            raise WorkerDied() from None

    def recv(self, deadline: float | None) -> tuple[dict[str, Any], list[memoryview]]:
        """Reads one reply frame before ``deadline`` (monotonic seconds; None: no deadline)."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while True:
            if len(self.buf) >= _wire.FRAME_LEN.size:
                (n,) = _wire.FRAME_LEN.unpack_from(self.buf)
                if n > REPLY_CAP:
                    self.kill()  # out of step: a fresh worker is started on next use
                    raise SandboxError(f"sandbox worker sent a {n}-byte frame: protocol corrupted")
                end = _wire.FRAME_LEN.size + n
                if len(self.buf) >= end:
                    body = bytes(self.buf[_wire.FRAME_LEN.size:end])
                    del self.buf[:end]
                    self.last_frame = time.monotonic()
                    try:
                        return _wire.split_body(body)
                    except _wire.WireError as exc:
                        self.kill()
                        raise SandboxError(f"sandbox worker sent a malformed frame: {exc}") from None
            now = time.monotonic()
            events = _spin.poll(poller, now, self.spin_until, None if deadline is None else deadline - now)
            if events is None:
                continue
            if not events:
                raise WorkerStuck()
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise WorkerDied()
            self.buf += chunk

    def reply(self, deadline: float, wall_s: float | None = None, t_start: float | None = None,
              outer_s: float | None = None) -> tuple[dict[str, Any], list[memoryview], float]:
        """Next reply that is not a notice; returns it with the time the candidate's clock started.

        Notices: ``started`` records the child's pid (for clean-up should the worker die);
        ``warming``/``warmed`` bracket the first import (and ``warmup()``) of a harness module in
        the worker, which may compile numba kernels: that time is the evaluator's, so the deadline
        is suspended meanwhile and the request's wall clock starts again at ``warmed``; ``waited``
        says how long the candidate has waited for a CPU so far (the worker moved its own deadline by
        that much): the deadline moves by as much, never past ``outer_s`` (plus the grace).
        """
        t_start = time.monotonic() if t_start is None else t_start  # the clock starts before the send
        self.waited_s = 0.0
        while True:
            head, blobs = self.recv(deadline)
            kind = head.get("kind")
            if kind == "started":
                self.child_pid = head.get("pid")
                continue
            if kind == "warming":
                deadline = time.monotonic() + self.config.start_timeout_s
                continue
            if kind == "warmed":  # the worker's own measure: our thread may read this notice late
                t_start += max(0.0, float(head.get("warm_s") or 0.0))
                if wall_s is not None:
                    deadline = time.monotonic() + wall_s + self.config.grace_s
                continue
            if kind == "waited":
                self.waited_s = max(0.0, float(head.get("waited_s") or 0.0))
                if wall_s is not None:
                    limit = wall_s + self.waited_s if outer_s is None else min(outer_s, wall_s + self.waited_s)
                    deadline = max(deadline, t_start + limit + self.config.grace_s)
                continue
            if kind == "retired":
                raise WorkerRetired(str(head.get("reason")))
            if head.get("kind") == "done":
                self.child_pid = None
                if self.sent_at:
                    self.last_wait_s, self.sent_at = time.monotonic() - self.sent_at, 0.0
            if head.get("kind") == "engine_error":
                raise SandboxError(f"sandbox worker {self.index} failed:\n{head.get('error')}")
            return head, blobs, t_start
