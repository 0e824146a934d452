"""Training runners: one fresh jailed process per experiment, on a leased slot, under a time budget.

:func:`run_job` runs a command (the candidate's ``python3 train.py``, or a trusted evaluation) in a
new nsjail (no network, read-only runtime with torch, folders bound read-only or read-write at their
own paths, the leased GPU's device nodes and nothing else of ``/dev/nvidia*``), or as a plain process
in ``process`` mode (no filesystem or network isolation). The budget reaches the script as
``REASEARCH_TIME_BUDGET_S`` (and ``REASEARCH_DEADLINE``, a Unix time).

The budget is enforced, not advisory. At the budget every process of the job gets ``SIGTERM`` (the
documented budget signal); the job has ``grace_s`` seconds to save and exit, and its tree is killed
with ``SIGKILL`` at ``budget + grace``. A job killed there, or one that died of the budget's SIGTERM
(it was still working at its budget and did not handle the signal), is ``TIMEOUT``: no score. The
outcome records the decision: ``term_s`` (when the signal went out), ``wall_s`` (when the job ended),
``time_budget_s`` and ``hard_limit_s``.

Standard output and error stream to a log file on the host as the job runs (capped; opened without
following a symlink); the tail in the outcome is the driver's own copy of what it wrote, never a
re-read of a file the job could replace. JSON-object lines (``{"step": 10, "loss": 2.1}``) are kept as
metrics, stamped with the host's clock. Nothing the script prints is trusted: the metric comes from a
separate evaluation.

Whose processes. In nsjail mode the job is the init of its own PID namespace: every process it made,
double-forked ``setsid`` daemons included, dies with it. In process mode (no filesystem isolation) a
job would run as the driver's user, root included, and read what it reads (the held-out split, the
evaluator secret): so process mode runs each job under a dedicated uid of its own (root required; it
is refused otherwise), from the world-readable runtime (:func:`reasearch.engine._runtime.build_runtime`)
since the driver's interpreter may sit in a private home; its writable folders are handed to that
uid, and after the job every process of that uid is killed, reparented daemons included.

Disk. ``disk_quota_mb`` bounds what the job may write: each file by ``RLIMIT_FSIZE`` (never more than
the quota), and the bytes and entries below its writable folders are checked every few seconds; a job
over the quota, or one that leaves less than ``min_free_mb`` free on their filesystem, is killed
(``CRASH``, with the reason in its log). A hard cap is the caller's: experiment folders are size-capped
tmpfs mounts where the driver is root (:func:`reasearch.engine.files.mount_bounded`).

The job cannot outlive its driver: the launcher asks the kernel to SIGKILL it when the driver's thread
dies (``PR_SET_PDEATHSIG``), nsjail does the same for the jailed tree, and the slot's lock descriptor
is inherited by the launcher, so the lease lasts exactly as long as the job.
"""

from __future__ import annotations

import json
import math
import os
import re
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reasearch.engine import _procs, _wire
from reasearch.engine._job_launch import (
    _QUOTA_CHECK_S,
    PROCESS_SCORING_GAPS,
    end_orphaned_job,
    gpu_jail_args,
    make_reachable,
)
from reasearch.engine._job_launch import command as _command
from reasearch.engine._job_launch import end_job as _end_job
from reasearch.engine._job_launch import open_log as _open_log
from reasearch.engine._job_launch import over_quota as _over_quota
from reasearch.engine._job_launch import signal_job as _signal_job
from reasearch.engine._oom import KILLED_UNASKED, OOM_KILLED, oom_kills, rose
from reasearch.engine.gpu import SlotLease
from reasearch.engine.protocol import Status
from reasearch.errors import ConfigError, SandboxError

__all__ = ["KILLED_UNASKED", "OOM_KILLED", "PROCESS_SCORING_GAPS", "JobOutcome",
           "JobSession", "SessionError", "end_orphaned_job", "gpu_jail_args",
           "make_reachable", "run_job", "start_session"]

_MAX_METRIC_LINES = 5000
_LINE_END = re.compile(rb"\r\n|\r|\n")
_TAIL = 4000
@dataclass(frozen=True, slots=True)
class JobOutcome:
    """What one jailed job did.

    Attributes:
        status: ``OK`` (exit 0 by budget + grace), ``TIMEOUT`` (killed at budget + grace, or died of the
            budget's SIGTERM), ``OOM`` (its last output says ``MemoryError``/out of memory, or a SIGKILL we did
            not send while the host's ``oom_kill`` count rose), ``CRASH`` (also: over its disk quota, see
            ``over_quota``; a SIGKILL we did not send with no sign of the OOM killer: killed from outside).
        exit_code: exit code, or None when killed by a signal.
        signal: the killing signal, if any.
        wall_s: wall seconds from launch to exit, on the engine's clock.
        cpu_s: CPU seconds of the whole tree (``wait4``).
        gpu_s: GPU-seconds charged (wall time while holding a GPU slot; 0 on a CPU slot).
        slot: the slot it ran on, in words.
        sandbox_mode: ``nsjail`` or ``process``.
        log_path: the host log file (stdout and stderr interleaved).
        log_tail: the last few thousand characters of the log.
        metrics: JSON-object lines the job printed, each with ``_t`` (seconds since launch).
        first_metric_s: seconds from launch to the first metrics line (None: it printed none).
        hard_limit_s: when it would have been killed.
        stopped: killed early on request (its ``stop_file`` appeared): status ``CRASH``, never a score.
        time_budget_s: the budget; ``SIGTERM`` went out then.
        term_s: seconds from launch to the budget's ``SIGTERM`` (None: the job ended before its budget).
        over_quota: why the job was killed for its disk use (None: it was not).
        job_uid: the dedicated uid a process-mode job ran as (None: nsjail, whose namespaces hold it).
    """

    status: Status
    exit_code: int | None
    signal: int | None
    wall_s: float
    cpu_s: float
    gpu_s: float
    slot: str
    sandbox_mode: str
    log_path: str
    log_tail: str
    metrics: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)
    first_metric_s: float | None = None
    hard_limit_s: float = 0.0
    stopped: bool = False
    time_budget_s: float = 0.0
    term_s: float | None = None
    over_quota: str | None = None
    job_uid: int | None = None

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status.value, "exit_code": self.exit_code, "signal": self.signal,
                "wall_s": self.wall_s, "cpu_s": self.cpu_s, "gpu_s": self.gpu_s, "slot": self.slot,
                "sandbox_mode": self.sandbox_mode, "log_path": self.log_path, "first_metric_s": self.first_metric_s,
                "hard_limit_s": self.hard_limit_s, "metrics": len(self.metrics), "stopped": self.stopped,
                "time_budget_s": self.time_budget_s, "term_s": self.term_s, "over_quota": self.over_quota,
                "job_uid": self.job_uid}


def run_job(
    argv: Sequence[str],
    *,
    cwd: Path,
    lease: SlotLease,
    time_budget_s: float,
    grace_s: float = 10.0,
    log_path: Path,
    binds_ro: Sequence[Path] = (),
    binds_rw: Sequence[Path] = (),
    env: Mapping[str, str] | None = None,
    memory_mb: int | None = 8192,
    fsize_mb: int = 4096,
    log_cap_bytes: int = 16 << 20,
    mode: str = "auto",
    stop_file: Path | None = None,
    disk_quota_mb: int | None = None,
    min_free_mb: int = 0,
    packages: Sequence[str] | None = None,
    noexec: bool = False,
) -> JobOutcome:
    """Runs ``argv`` once on ``lease``'s slot, in a fresh jail, under a time budget.

    Args:
        argv: the command; ``python3`` is the sandbox runtime's interpreter (torch importable).
        cwd: working directory (must be one of the bound folders).
        lease: the slot (GPU or CPU cores) it runs on; it stays leased until the job is gone.
        time_budget_s: handed to the job as ``REASEARCH_TIME_BUDGET_S``; at this point it gets ``SIGTERM``.
        grace_s: seconds after the budget's ``SIGTERM`` to save and exit; killed at ``time_budget_s + grace_s``.
        log_path: the host file that receives stdout and stderr as they come.
        binds_ro: host folders visible read-only at their own paths.
        binds_rw: host folders visible read-write at their own paths (checkpoints).
        env: extra environment variables.
        memory_mb: address-space limit (None: none; a CUDA process maps far more than it uses).
        fsize_mb: largest file the job may write.
        log_cap_bytes: the log keeps this much; the rest is dropped (the job never blocks on output).
        mode: ``auto``, ``nsjail`` or ``process`` (as root only: the job runs under a dedicated uid).
        stop_file: when this path appears (checked about once a second), the job is killed and reported
            ``stopped`` (how a driver stops an experiment that runs in another thread or process).
        disk_quota_mb: the most the job may hold below ``binds_rw`` (checked; also caps ``fsize_mb``).
        min_free_mb: the job is killed when their filesystem has less free than this.
        packages: a scoring jail's package list: the job's runtime holds these and nothing else (None: the
            training runtime, :data:`reasearch.engine._runtime.RUNTIME_PACKAGES`).
        noexec: a scoring jail: ``binds_ro``, ``binds_rw``, ``/tmp`` and ``/dev/shm`` are mounted noexec and
            ``memfd_create`` is denied, so no native code of the candidate's loads. Process mode cannot
            (:data:`reasearch.engine._job_launch.PROCESS_SCORING_GAPS`; the outcome's ``sandbox_mode`` says which).

    Returns:
        A :class:`JobOutcome` (failures of the job are statuses, never exceptions).

    Raises:
        SandboxUnavailableError: process mode without root (a job would run as this user).
    """
    if not argv or not all(isinstance(a, str) for a in argv):
        raise ConfigError("argv must be a non-empty sequence of str")
    if not (time_budget_s > 0 and math.isfinite(time_budget_s)) or grace_s < 0:
        raise ConfigError(f"time_budget_s must be > 0 and grace_s >= 0, not {time_budget_s!r}/{grace_s!r}")
    if disk_quota_mb is not None:
        fsize_mb = min(fsize_mb, int(disk_quota_mb))
    hard = float(time_budget_s) + float(grace_s)
    full, popen_cwd, popen_env, jail_mode, uid, config = _command(
        argv, cwd=cwd, lease=lease, time_budget_s=time_budget_s, hard_s=hard, binds_ro=binds_ro, binds_rw=binds_rw,
        env=env, memory_mb=memory_mb, fsize_mb=fsize_mb, mode=mode, packages=packages, noexec=noexec)
    cap = None if disk_quota_mb is None else int(disk_quota_mb) << 20
    quota = None if cap is None and not min_free_mb else ([Path(p) for p in binds_rw], cap, int(min_free_mb) << 20)
    try:
        return _supervise(full, cwd=popen_cwd, env=popen_env, lease=lease, budget_s=float(time_budget_s),
                          hard_s=hard, log_path=Path(log_path), log_cap=log_cap_bytes, mode=jail_mode,
                          stop_file=stop_file, uid=uid, quota=quota)
    finally:
        if config is not None:
            config.unlink(missing_ok=True)


def _supervise(cmd: list[str], *, cwd: str | None, env: dict[str, str], lease: SlotLease, budget_s: float,
               hard_s: float, log_path: Path, log_cap: int, mode: str, stop_file: Path | None = None,
               uid: int | None = None, quota: tuple[list[Path], int | None, int] | None = None) -> JobOutcome:

    _procs.set_child_subreaper()
    log = _open_log(log_path)
    oom_before = oom_kills()  # a SIGKILL we did not send is OOM only if the kernel's OOM killer acted meanwhile
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                                pass_fds=(lease.fd,))
    except OSError as exc:
        log.close()
        raise SandboxError(f"could not start the job: {exc}") from exc
    assert proc.stdout is not None
    out_fd = proc.stdout.fileno()
    os.set_blocking(out_fd, False)
    sel = selectors.DefaultSelector()
    sel.register(out_fd, selectors.EVENT_READ, "out")
    pidfd = os.pidfd_open(proc.pid)
    sel.register(pidfd, selectors.EVENT_READ, "exit")
    written = 0
    dropped = 0
    partial = b""
    tail = bytearray()  # the last _TAIL bytes written to the log: the outcome's tail, never re-read from disk
    metrics: list[dict[str, Any]] = []
    first_metric: float | None = None
    killed = exited = eof = stopped = False
    term_s: float | None = None
    over: str | None = None
    deadline = t0 + hard_s
    term_at = t0 + budget_s
    next_quota = t0 + _QUOTA_CHECK_S

    def note(text: str) -> None:
        data = text.encode()
        log.write(data)
        tail.extend(data)
        del tail[:-_TAIL]

    def take(data: bytes) -> None:
        nonlocal written, dropped, partial, first_metric
        room = log_cap - written
        if room > 0:
            log.write(data[:room])
            log.flush()
            written += min(room, len(data))
            tail.extend(data[:room])
            del tail[:-_TAIL]
        dropped += max(0, len(data) - max(room, 0))
        partial += data
        *lines, partial = _LINE_END.split(partial)  # \r too: a progress bar's \r line must not hide what follows
        if len(partial) > 65536:
            partial = b""
        now = time.monotonic() - t0
        for line in lines:
            line = line.strip()
            if not line.startswith(b"{") or len(metrics) >= _MAX_METRIC_LINES:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                rec = {str(k): v for k, v in rec.items() if isinstance(v, (int, float, str, bool)) or v is None}
                rec["_t"] = round(now, 4)
                metrics.append(rec)
                if first_metric is None:
                    first_metric = now

    while not (exited and eof):
        now = time.monotonic()
        left = deadline - now
        if left <= 0:
            killed = True
            break
        if term_s is None and now >= term_at and not exited:
            _signal_job(proc.pid, mode, signal.SIGTERM)  # the budget: save and exit within the grace
            term_s = now - t0
        if stop_file is not None and os.path.lexists(stop_file):
            stopped = True
            break
        if quota is not None and now >= next_quota:
            over = _over_quota(quota)
            next_quota = time.monotonic() + _QUOTA_CHECK_S
            if over is not None:
                break
        wait = min(left, 1.0, max(0.0, term_at - now) if term_s is None else 1.0)
        for key, _ in sel.select(wait):
            if key.data == "exit":
                exited = True
                sel.unregister(pidfd)
            else:
                try:
                    data = os.read(out_fd, 1 << 16)
                except BlockingIOError:
                    continue
                if data:
                    take(data)
                else:
                    eof = True
                    sel.unregister(out_fd)
        if exited and not eof:  # the job is gone; what is left in the pipe comes now (or never: a stray holder)
            end = time.monotonic() + 0.5
            while time.monotonic() < end:
                try:
                    data = os.read(out_fd, 1 << 16)
                except BlockingIOError:
                    time.sleep(0.01)
                    continue
                if not data:
                    break
                take(data)
            eof = True
    _end_job(proc.pid, uid)
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = status
    wall = time.monotonic() - t0
    sel.close()
    os.close(pidfd)
    proc.stdout.close()
    if killed:
        note(f"\n[reasearch: killed at the hard limit, {hard_s:g} s = time budget + grace (SIGTERM went out at "
             f"the budget, {budget_s:g} s)]\n")
    elif stopped:
        note(f"\n[reasearch: stopped on request after {wall:.1f} s]\n")
    elif over is not None:
        note(f"\n[reasearch: killed after {wall:.1f} s: {over}]\n")
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    if mode == "nsjail" and code is not None and code > 128 and not killed:
        sig, code = code - 128, None
    said = tail.decode("utf-8", errors="replace")[-600:]  # the job's own last words, before any note of ours
    if stopped or over is not None:
        st = Status.CRASH
    elif killed or sig == signal.SIGXCPU or (term_s is not None and sig == signal.SIGTERM):
        st = Status.TIMEOUT  # still running at the hard limit, or killed by the budget's own signal
    elif "MemoryError" in said or "out of memory" in said.lower():
        st = Status.OOM
    elif sig == signal.SIGKILL:  # nobody on our side sent it: the OOM killer only if it is known to have acted
        oomed = rose(oom_before, oom_kills())
        st = Status.OOM if oomed else Status.CRASH
        note(f"\n[reasearch: {OOM_KILLED if oomed else KILLED_UNASKED}]\n")
    elif code == 0:
        st = Status.OK
    else:
        st = Status.CRASH
    if dropped:
        note(f"\n[reasearch: {dropped} bytes of output dropped past the {log_cap} byte log cap]\n")
    log.close()
    text = tail.decode("utf-8", errors="replace")
    return JobOutcome(st, code, sig, wall, ru.ru_utime + ru.ru_stime, wall if lease.gpu else 0.0, lease.describe(),
                      mode, str(log_path), text, tuple(metrics), first_metric, hard_s, stopped,
                      float(budget_s), None if term_s is None else round(term_s, 4), over, uid)


class JobSession:
    """A jailed process that answers framed requests on its stdin/stdout (a policy server, say).

    Frames are an 8-byte big-endian length and that many bytes, both ways; the process's stderr goes to
    ``log_path``. :meth:`call` sends one request and waits (with a timeout) for one reply; a process that
    dies, stalls or sends a malformed frame raises :class:`SessionError` and is killed. Build it with
    :func:`start_session`; :meth:`close` kills the tree (it also dies with its driver).
    """

    def __init__(self, proc: subprocess.Popen[bytes], log: Any, max_reply_bytes: int, mode: str, t0: float,
                 uid: int | None = None, config: Path | None = None) -> None:
        self.proc = proc
        self._config = config
        self.job_uid = uid
        self._log = log
        self.max_reply_bytes = max_reply_bytes
        self.sandbox_mode = mode
        self._t0 = t0
        self.closed = False

    def call(self, payload: bytes, *, timeout_s: float = 30.0) -> bytes:
        """Sends ``payload``, returns the reply frame's bytes."""
        if self.closed:
            raise SessionError("the session is closed")
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(len(payload).to_bytes(8, "big") + payload)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise SessionError(f"the session process is gone ({exc})") from None
        deadline = time.monotonic() + timeout_s
        head = self._read(8, deadline)
        n = int.from_bytes(head, "big")
        if n > self.max_reply_bytes:
            raise SessionError(f"a reply of {n} bytes is over the {self.max_reply_bytes} byte cap")
        return self._read(n, deadline)

    def _read(self, n: int, deadline: float) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        buf = bytearray()
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SessionError("the session process did not answer in time")
            if not _wire.wait_readable(fd, left):
                continue
            chunk = os.read(fd, min(n - len(buf), 1 << 20))
            if not chunk:
                raise SessionError(f"the session process exited (status {self.proc.poll()})")
            buf += chunk
        return bytes(buf)

    @property
    def wall_s(self) -> float:
        return time.monotonic() - self._t0

    def close(self) -> None:
        """Kills the process tree and reaps it (idempotent)."""
        if self.closed:
            return
        self.closed = True
        _end_job(self.proc.pid, self.job_uid)
        try:
            self.proc.wait(timeout=10)
        except (subprocess.TimeoutExpired, ChildProcessError):
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        self._log.close()
        if self._config is not None:
            self._config.unlink(missing_ok=True)

    def __enter__(self) -> JobSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SessionError(SandboxError):
    """A session process died, stalled or broke the framing (the candidate's fault: its status, not a crash)."""


def start_session(argv: Sequence[str], *, cwd: Path, lease: SlotLease, wall_s: float, log_path: Path,
                  binds_ro: Sequence[Path] = (), binds_rw: Sequence[Path] = (), env: Mapping[str, str] | None = None,
                  memory_mb: int | None = 8192, max_reply_bytes: int = 64 << 20, mode: str = "auto",
                  packages: Sequence[str] | None = None, noexec: bool = False) -> JobSession:
    """Starts ``argv`` in a fresh jail (as :func:`run_job` would) and returns a :class:`JobSession` on it.

    ``wall_s`` is the jail's own time limit (nsjail kills it then, whatever the driver does); ``packages``
    and ``noexec`` make it a scoring jail, as for :func:`run_job`.
    """
    full, popen_cwd, popen_env, jail_mode, uid, config = _command(
        argv, cwd=cwd, lease=lease, time_budget_s=wall_s, hard_s=wall_s, binds_ro=binds_ro, binds_rw=binds_rw,
        env=env, memory_mb=memory_mb, fsize_mb=64, mode=mode, packages=packages, noexec=noexec)

    _procs.set_child_subreaper()
    log = _open_log(Path(log_path))
    try:
        proc = subprocess.Popen(full, cwd=popen_cwd, env=popen_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=log, start_new_session=True, close_fds=True, pass_fds=(lease.fd,))
    except OSError as exc:
        log.close()
        if config is not None:
            config.unlink(missing_ok=True)
        raise SandboxError(f"could not start the session: {exc}") from exc
    return JobSession(proc, log, max_reply_bytes, jail_mode, time.monotonic(), uid, config)
