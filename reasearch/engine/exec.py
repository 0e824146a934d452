"""One command in a fresh sandbox: ``exec_in_sandbox`` (the agent's ``bash``/``python_exec`` tools).

In nsjail mode each call gets a fresh jail: ``workdir`` bound read-write at its own path (the only
writable place besides the jail's tmpfs ``/tmp``), the Python runtime and system folders read-only,
no network, seccomp, and rlimits from :class:`~reasearch.engine.protocol.Limits`. ``python3``
on the jail's ``PATH`` is the sandbox runtime's interpreter (with NumPy, SciPy, numba, highspy and
``reasearch``). The engine measures wall time with its own clock and CPU time from ``wait4``.

Because the jail runs as an unprivileged uid, a root-owned ``workdir`` is handed to that uid
(``chown -R``) before the first run, so the command can write there. When a parent of ``workdir`` is
not searchable by that uid (a private 0700 temp dir), the jail reaches it through a bind mount on an
empty folder of the engine's 0711 staging area, made in a private mount namespace: the user's folders
stay closed, and the command still sees ``workdir`` at its own path.
"""

from __future__ import annotations

import errno
import json
import math
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasearch.engine import _procs
from reasearch.engine._jail import nsjail_argv
from reasearch.engine._oom import KILLED_UNASKED, OOM_KILLED, oom_kills, rose
from reasearch.engine._policy import JAIL_UID, THREAD_ENV
from reasearch.engine.isolation import make_launcher
from reasearch.engine.protocol import Limits, Status
from reasearch.errors import ConfigError, SandboxError

__all__ = ["ExecOutcome", "exec_in_sandbox"]


@dataclass(frozen=True, slots=True)
class ExecOutcome:
    """What one sandboxed command did.

    Attributes:
        status: ``OK`` (exit code 0), ``CRASH`` (non-zero exit or a signal), ``TIMEOUT`` (wall or CPU
            limit), ``OOM`` (the command died of ``MemoryError``, or of a SIGKILL we did not send while the host's
            ``oom_kill`` count rose; another SIGKILL is ``CRASH``, its stderr saying so).
        exit_code: the exit code, or None when killed by a signal.
        stdout: captured standard output (truncated to ``limits.output_bytes``).
        stderr: captured standard error (truncated likewise).
        wall_s: wall seconds, measured by the engine.
        cpu_s: CPU seconds of the whole jail (``wait4`` rusage), measured by the engine.
        sandbox_mode: ``"nsjail"`` or ``"process"`` (no filesystem or network isolation).
    """

    status: Status
    exit_code: int | None
    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float
    sandbox_mode: str
    signal: int | None = None

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


class _Config:
    """The slice of ``SandboxConfig`` the launcher factory reads."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.preload: tuple[str, ...] = ()
        self.numba_cache_dir = None


def _prepare_workdir(workdir: Path) -> bool:
    """Hands ``workdir`` to the jail uid (as root); True when a parent is not searchable by that uid,
    so the jail must reach it through a staged bind mount (:func:`_staged`)."""
    if not workdir.is_dir():
        raise ConfigError(f"workdir {workdir} is not a directory; create it first")
    if os.geteuid() != 0:
        return False  # the jail maps this user's own uid: it reaches what the user reaches
    blocked = [str(p) for p in reversed(workdir.parents) if not p.stat().st_mode & 0o001]
    try:  # iterative (a deep tree the previous command left cannot exhaust the stack); no symlink followed
        stack = [str(workdir)]
        while stack:
            d = stack.pop()
            if len(d) > 3000:
                raise OSError(errno.ENAMETOOLONG, "a path near PATH_MAX", d)
            if os.lstat(d).st_uid != JAIL_UID:
                os.lchown(d, JAIL_UID, JAIL_UID)
            with os.scandir(d) as entries:
                for e in entries:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    elif e.stat(follow_symlinks=False).st_uid != JAIL_UID:
                        os.lchown(e.path, JAIL_UID, JAIL_UID)
        return bool(blocked)
    except OSError:
        pass
    # Deeper than paths reach: coreutils' chown walks with descriptors (fts); -P -h: symlinks are
    # changed themselves, never followed.
    done = subprocess.run(["chown", "-R", "-P", "-h", f"{JAIL_UID}:{JAIL_UID}", "--", str(workdir)],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
    if done.returncode != 0:
        raise SandboxError(f"could not hand workdir {workdir} to the sandbox uid: {done.stderr.strip()[-500:]}")
    return bool(blocked)


_STAGE_ROOT = Path("/var/tmp/reasearch-stage")  # engine-owned, 0711: the jail uid may pass, not list


def _stage_dir() -> Path:
    """A fresh, empty mount point under the engine's staging area (created 0711, owned by root)."""
    try:
        _STAGE_ROOT.mkdir(mode=0o711, exist_ok=True)
    except OSError as exc:
        raise SandboxError(f"cannot create the sandbox staging area {_STAGE_ROOT}: {exc}") from exc
    st = os.lstat(_STAGE_ROOT)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise SandboxError(f"{_STAGE_ROOT} is not a root-owned directory writable only by root; remove it")
    os.chmod(_STAGE_ROOT, 0o711)
    return Path(tempfile.mkdtemp(dir=_STAGE_ROOT, prefix="ws-"))


def _staged(cmd: list[str], workdir: Path, stage: Path) -> list[str]:
    """``cmd`` run in a private mount namespace where ``workdir`` is bind-mounted on ``stage``.

    A workdir under a folder the jail uid cannot search (a 0700 temp dir) is reachable that way
    without opening the user's folders: nsjail mounts the staged path, whose parents are searchable,
    at the workdir's own path inside the jail. The mount lives and dies with the namespace.
    """
    unshare = shutil.which("unshare", path="/usr/bin:/bin")
    if unshare is None:
        raise SandboxError(f"the sandbox uid cannot reach workdir {workdir} (a parent is not searchable by other "
                           "users) and util-linux `unshare` is missing to stage it; put the workdir under /var/tmp")
    script = 'mount --bind -- "$1" "$2" && shift 2 && exec "$@"'
    return [unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh",
            str(workdir), str(stage), *cmd]


def _resolve(argv: list[str], python: str, path: str) -> list[str]:
    """nsjail does not search PATH: resolve ``python``/``python3`` and bare names ourselves."""
    if argv[0] in ("python", "python3", Path(python).name):
        return [python, *argv[1:]]
    if "/" not in argv[0]:
        found = shutil.which(argv[0], path=path)
        if found:
            return [found, *argv[1:]]
    return argv


# Applies rlimits and execs the command. Run as ``python -S -c _TRAMPOLINE LIMITS_JSON ARGV...`` in a
# new session: a ``preexec_fn`` could deadlock in a threaded engine, and Popen has no rlimit option.
_TRAMPOLINE = (
    "import json, os, resource, sys\n"
    "lim = json.loads(sys.argv[1])\n"
    "for name, value in lim.items():\n"
    "    resource.setrlimit(getattr(resource, name), tuple(value))\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def _rlimits(limits: Limits) -> dict[str, list[int]]:
    """The per-command rlimits of process mode."""
    cpu = max(1, math.ceil(limits.effective_cpu_s()))
    return {
        "RLIMIT_AS": [limits.memory_mb << 20] * 2,
        "RLIMIT_CPU": [cpu, cpu + 1],
        "RLIMIT_NPROC": [limits.nproc] * 2,
        "RLIMIT_FSIZE": [limits.fsize_mb << 20] * 2,
        "RLIMIT_NOFILE": [limits.nofile] * 2,
        "RLIMIT_CORE": [0, 0],
    }


def exec_in_sandbox(
    argv: Sequence[str],
    *,
    workdir: Path,
    limits: Limits,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    mode: str = "auto",
) -> ExecOutcome:
    """Runs ``argv`` once in a fresh sandbox with ``workdir`` as its only writable folder.

    Args:
        argv: the command; ``python3`` resolves to the sandbox runtime's interpreter.
        workdir: a host folder, bound read-write at the same path and used as the working directory.
        limits: wall/CPU seconds, address space (MB), processes, file size, open files, output caps.
        env: extra environment variables (the rest is a minimal, fixed environment).
        stdin: bytes fed to the command's standard input (default: empty).
        mode: ``"auto"``, ``"nsjail"`` or ``"process"`` (no filesystem or network isolation).

    Returns:
        An :class:`ExecOutcome` (command failures are statuses, never exceptions).

    Raises:
        SandboxUnavailableError: ``mode="nsjail"`` cannot run here.
        SandboxError: the jail cannot reach ``workdir``.
    """
    if not argv or not all(isinstance(a, str) for a in argv):
        raise ConfigError("argv must be a non-empty sequence of str")
    workdir = Path(workdir).resolve()
    launcher = make_launcher(_Config(mode), Path("/nonexistent"))  # type: ignore[arg-type]
    extra = {str(k): str(v) for k, v in (env or {}).items()}
    cpu = max(1, math.ceil(limits.effective_cpu_s()))
    if launcher.mode == "nsjail":
        stage = _stage_dir() if _prepare_workdir(workdir) else None
        runtime = launcher.runtime
        path = f"{Path(runtime.python).parent}:/usr/local/bin:/usr/bin:/bin"
        argv = _resolve(list(argv), runtime.python, path)
        cmd = nsjail_argv(
            list(argv),
            runtime=runtime,
            binds_rw=[(str(stage or workdir), str(workdir))],
            cwd=str(workdir),
            env={"PATH": path, "HOME": str(workdir), **extra},
            time_limit_s=math.ceil(limits.wall_s) + 2,
            rlimit_as_mb=limits.memory_mb,
            rlimit_cpu_s=cpu,
            rlimit_nproc=limits.nproc,
            rlimit_fsize_mb=limits.fsize_mb,
            rlimit_nofile=limits.nofile,
            two_uids=False,
        )
        popen_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        if stage is not None:
            try:
                return _run(_staged(cmd, workdir, stage), cwd=None, env=popen_env, stdin=stdin, limits=limits,
                            mode=launcher.mode)
            finally:
                stage.rmdir()  # the bind mount died with its namespace: an empty folder is left
    else:
        if not workdir.is_dir():
            raise ConfigError(f"workdir {workdir} is not a directory; create it first")
        cmd = list(argv)
        if cmd[0] in ("python", "python3"):
            cmd[0] = sys.executable
        cmd = [sys.executable, "-S", "-c", _TRAMPOLINE, json.dumps(_rlimits(limits)), *cmd]
        popen_env = {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir),
                     "LANG": "C.UTF-8", **THREAD_ENV, **extra}
    return _run(cmd, cwd=str(workdir) if launcher.mode == "process" else None, env=popen_env, stdin=stdin,
                limits=limits, mode=launcher.mode)


def _run(cmd: list[str], *, cwd: str | None, env: dict[str, str], stdin: bytes | None, limits: Limits,
         mode: str) -> ExecOutcome:
    """Starts ``cmd``, feeds stdin, caps output, enforces the wall limit, kills the tree, classifies."""
    _procs.set_child_subreaper()
    oom_before = oom_kills()  # a SIGKILL we did not send is OOM only if the kernel's OOM killer acted meanwhile
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
    except FileNotFoundError:
        return ExecOutcome(Status.CRASH, 127, "", f"command not found: {cmd[0]}", time.monotonic() - t0, 0.0, mode)
    assert proc.stdin and proc.stdout and proc.stderr
    caps = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    files = {proc.stdout.fileno(): proc.stdout, proc.stderr.fileno(): proc.stderr}
    truncated = {fd: False for fd in caps}
    sel = selectors.DefaultSelector()
    pending = memoryview(stdin or b"")
    in_fd = proc.stdin.fileno()
    if pending:
        os.set_blocking(in_fd, False)
        sel.register(in_fd, selectors.EVENT_WRITE, "in")
    else:
        proc.stdin.close()
    for fd in caps:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ, "out")
    pidfd = os.pidfd_open(proc.pid)
    sel.register(pidfd, selectors.EVENT_READ, "exit")
    deadline = t0 + limits.wall_s
    killed = False
    exited = False
    while not exited:
        left = deadline - time.monotonic()
        if left <= 0:
            killed = True
            break
        for key, _ in sel.select(left):
            if key.data == "exit":
                exited = True
            elif key.data == "in":
                try:
                    n = os.write(in_fd, pending[:1 << 16])
                    pending = pending[n:]
                except BlockingIOError:
                    pass
                except BrokenPipeError:  # the command stopped reading: the rest of stdin is dropped
                    pending = pending[:0]
                if not pending:
                    sel.unregister(in_fd)
                    proc.stdin.close()
            else:
                _pump(key.fd, caps, truncated, limits.output_bytes, sel, files)
    _kill_group(proc.pid)
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = status  # reaped here; keep Popen from waiting again
    wall = time.monotonic() - t0
    for fd in list(caps):
        if fd in sel.get_map():
            while _pump(fd, caps, truncated, limits.output_bytes, sel, files):
                pass
    sel.close()
    os.close(pidfd)
    for f in (proc.stdin, proc.stdout, proc.stderr):
        try:
            f.close()
        except OSError:
            pass
    cpu = ru.ru_utime + ru.ru_stime
    out_fd, err_fd = caps  # insertion order: stdout, then stderr
    out = _text(caps[out_fd], truncated[out_fd], limits.output_bytes)
    err = _text(caps[err_fd], truncated[err_fd], limits.output_bytes)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    if mode == "nsjail" and code is not None and code > 128 and not killed:
        sig, code = code - 128, None  # nsjail reports the jailed process's signal as 128 + N
    cpu_hard = max(1, math.ceil(limits.effective_cpu_s()))
    if killed or sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= cpu_hard - 0.05):
        st = Status.TIMEOUT
    elif "MemoryError" in err[-400:]:
        st = Status.OOM
    elif sig == signal.SIGKILL:  # nobody on our side sent it: the OOM killer only if it is known to have acted
        oomed = rose(oom_before, oom_kills())
        st = Status.OOM if oomed else Status.CRASH
        err += f"\n[reasearch: {OOM_KILLED if oomed else KILLED_UNASKED}]\n"
    elif code == 0:
        st = Status.OK
    else:
        st = Status.CRASH
    return ExecOutcome(st, code, out, err, wall, cpu, mode, sig)


def _pump(fd: int, caps: dict[int, bytearray], truncated: dict[int, bool], cap: int,
          sel: selectors.BaseSelector, files: dict[int, Any]) -> bool:
    """Reads a chunk into the capped buffer; closes the stream at EOF or at the cap (the writer then
    gets EPIPE instead of blocking on a full pipe). False when done or when nothing is there now."""
    try:
        data = os.read(fd, 1 << 16)
    except BlockingIOError:
        return False
    buf = caps[fd]
    room = cap - len(buf)
    if data:
        buf += data[:max(room, 0)]
    if not data or len(data) > room:
        truncated[fd] = truncated[fd] or bool(data)
        sel.unregister(fd)
        files[fd].close()
        return False
    return True


def _text(data: bytes | bytearray, truncated: bool, cap: int) -> str:
    s = bytes(data).decode("utf-8", errors="replace")
    return s + (f"\n[... output truncated at {cap} bytes]" if truncated else "")


def _kill_group(pid: int) -> None:
    """Kills the command's whole tree: its descendants, its process group and session, and jailed
    processes reparented to us when an nsjail died; then reaps what came back to us."""
    table = _procs.process_table()
    tree = _procs.descendants_of(pid, table)
    for p in tree:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    sid = table.get(pid, (0, pid, 0, ""))[1]
    _procs.kill_orphans(child_pgid=sid, uid=None, keep_unreaped=pid)
    _procs.reap_jail_orphans()
