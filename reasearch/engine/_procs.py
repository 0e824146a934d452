"""The one place that reads /proc: process tables and trees, per-process CPU time, and process-tree
hygiene (subreaper status, orphan kills, zombie reaping) for the engine and the in-jail worker."""

from __future__ import annotations

import ctypes
import os
import signal
import time

__all__ = [
    "children_walk", "cpu_s", "descendants_of", "kill_orphans", "main_thread_cpu_s", "process_cpu_ns", "process_table",
    "read_proc", "reap_jail_orphans", "reap_pids", "set_child_subreaper", "stop_and_wait", "task_cpu_s",
    "thread_cpu_s", "waited_children_cpu_s",
]

_PR_SET_CHILD_SUBREAPER = 36
_HAVE_CHILDREN_FILE = os.path.exists(f"/proc/self/task/{os.getpid()}/children")  # CONFIG_PROC_CHILDREN
_TICK = os.sysconf("SC_CLK_TCK")


def read_proc(path: str) -> bytes:
    """One small /proc file with two syscalls (``open()`` adds fstat, ioctl and lseek calls)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 65536)
    finally:
        os.close(fd)


def _stat_fields(pid: int) -> list[bytes]:
    """``/proc/<pid>/stat`` after the command name: index 0 is the state, 1 the ppid, 11/12 utime/stime."""
    stat = read_proc(f"/proc/{pid}/stat")
    return stat[stat.rfind(b")") + 2:].split()


def minor_faults(pid: int) -> int | None:
    """Minor page faults of ``pid`` so far (``/proc/<pid>/stat``), or None where it cannot be read."""
    try:
        return int(_stat_fields(pid)[7])
    except (OSError, IndexError, ValueError):
        return None


def set_child_subreaper() -> bool:
    """Makes this process a child subreaper, so orphans of a dead worker come back here to be killed
    and reaped instead of piling up as zombies under a slow PID 1. Returns False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def process_table() -> dict[int, tuple[int, int, int, str]]:
    """``pid -> (ppid, sid, uid, state)`` for every process visible in /proc."""
    table: dict[int, tuple[int, int, int, str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
            uid = os.stat(f"/proc/{name}").st_uid
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        table[int(name)] = (int(fields[1]), int(fields[3]), uid, fields[0].decode())
    return table


def descendants_of(pid: int, table: dict[int, tuple[int, int, int, str]] | None = None) -> list[int]:
    """Every process below ``pid`` (zombies included), from a scan of the process table."""
    table = process_table() if table is None else table
    out: list[int] = []
    frontier = {pid}
    while frontier:
        nxt = {p for p, row in table.items() if row[0] in frontier}
        out.extend(nxt)
        frontier = nxt
    return out


def children_walk(pid: int, skip: int | tuple[int | None, ...] | None = None) -> list[int]:
    """Every process below ``pid`` from ``/proc/<pid>/task/<tid>/children`` (no scan of the whole
    process table: the in-jail worker, a subreaper, calls this after every evaluation); falls back to
    :func:`descendants_of` on kernels without that file.

    ``skip``: a process (or a tuple of them; None entries are ignored) left out together with
    everything below it: the worker's pre-forked child, which runs no candidate code (walking it
    would cost two /proc reads per walk, for nothing), and its zygote, which is engine code.
    """
    skipped = frozenset(s for s in (skip if isinstance(skip, tuple) else (skip,)) if s is not None)
    if not _HAVE_CHILDREN_FILE:
        if not skipped:
            return descendants_of(pid)
        table = process_table()
        below_skip = set(skipped).union(*(descendants_of(s, table) for s in skipped))
        return [p for p in descendants_of(pid, table) if p not in below_skip]
    found: list[int] = []
    frontier = [pid]
    while frontier:
        nxt: list[int] = []
        for p in frontier:
            if p in skipped:
                continue
            try:
                tids = os.listdir(f"/proc/{p}/task")
            except OSError:
                continue  # gone meanwhile
            for tid in tids:
                try:
                    nxt.extend(int(x) for x in read_proc(f"/proc/{p}/task/{tid}/children").split())
                except OSError:
                    continue  # the thread or process is gone meanwhile
        found.extend(p for p in nxt if p not in skipped)
        frontier = nxt
    return found


def task_cpu_s(pid: int) -> float:
    """CPU seconds of every live thread of ``pid`` (the kernel's nanosecond run-time accounting)."""
    total = 0.0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            total += int(read_proc(f"/proc/{pid}/task/{tid}/schedstat").split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        pass
    return total


def thread_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid``: its process CPU clock (all threads; what the main thread used when it
    has one), else ``/proc/<pid>/schedstat`` (nanoseconds). 0.0 if it is gone."""
    ns = process_cpu_ns(pid)
    if ns is not None:
        return ns / 1e9
    try:
        return int(read_proc(f"/proc/{pid}/schedstat").split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def main_thread_cpu_s(pid: int) -> float | None:
    """CPU seconds of the main thread of ``pid`` alone (``/proc/<pid>/schedstat``, first field,
    nanoseconds); None if it is gone or cannot be read."""
    try:
        return int(read_proc(f"/proc/{pid}/schedstat").split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def waited_children_cpu_s(pid: int) -> float:
    """CPU seconds of the children ``pid`` waited for (``cutime + cstime``, clock ticks); 0.0 if it is
    gone or cannot be read."""
    try:
        fields = _stat_fields(pid)
        return (int(fields[13]) + int(fields[14])) / _TICK
    except (OSError, ValueError, IndexError):
        return 0.0


def run_delay_s(pid: int) -> float:
    """Seconds the main thread of ``pid`` has waited in a run queue, runnable but not running
    (``/proc/<pid>/schedstat``, second field). 0.0 if it is gone or cannot be read."""
    try:
        return int(read_proc(f"/proc/{pid}/schedstat").split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def runnable(pid: int) -> bool:
    """Whether the main thread of ``pid`` is running or waiting in a run queue (state ``R``)."""
    try:
        return _stat_fields(pid)[0] == b"R"
    except (OSError, IndexError):
        return False


def cpu_s(pid: int) -> float:
    """CPU seconds of a live process: all its threads, exited ones included, plus the children it
    waited for. 0.0 if it is gone.

    Its threads, live and exited, are counted to the nanosecond by the process CPU clock (where it
    cannot be read: live threads from schedstat, and ``utime + stime`` of ``/proc/<pid>/stat``, clock
    ticks, which also hold exited threads; the larger of the two is taken).
    """
    try:
        ns = process_cpu_ns(pid)
        live = task_cpu_s(pid) if ns is None else ns / 1e9
        fields = _stat_fields(pid)
        own = max(live, (int(fields[11]) + int(fields[12])) / _TICK)
        return own + (int(fields[13]) + int(fields[14])) / _TICK  # cutime + cstime: waited-for children
    except (OSError, ValueError, IndexError):
        return 0.0


def last_pid() -> int | None:
    """The last pid handed out in the caller's PID namespace (``/proc/sys/kernel/ns_last_pid``; threads
    count, and so do processes that already exited); None where it cannot be read. Only a process
    holding ``CAP_SYS_ADMIN`` or ``CAP_CHECKPOINT_RESTORE`` over the namespace can set it."""
    try:
        return int(read_proc("/proc/sys/kernel/ns_last_pid"))
    except (OSError, ValueError):
        return None


def process_cpu_ns(pid: int) -> int | None:
    """The kernel's CPU clock of a whole process, in nanoseconds: every thread, exited ones included,
    not its children (``clock_getcpuclockid(pid)``: ``CPUCLOCK_SCHED`` of the thread group). One
    syscall, no /proc read, no tick rounding. ``pid`` as seen in the caller's PID namespace.

    Returns None where the clock cannot be read (the process is gone or already reaped).
    """
    try:
        return time.clock_gettime_ns(((~pid) << 3) | 2)
    except (OSError, OverflowError, ValueError):
        return None


def kill_orphans(*, child_pgid: int | None, uid: int | None, keep_unreaped: int | None = None) -> None:
    """After a worker died: kills what its candidate child left (its session/process group, and any
    process running as the child's dedicated uid), then reaps those that were reparented to us
    (except ``keep_unreaped``, a direct child whose status its owner still wants)."""
    if child_pgid is None and uid is None:
        return
    me = os.getpid()
    seen: set[int] = set()
    for _ in range(100):
        table = process_table()
        matching = [p for p, (pp, sid, u, st) in table.items()
                    if p != me and ((child_pgid is not None and sid == child_pgid) or (uid is not None and u == uid))]
        seen.update(matching)
        victims = [p for p in matching if table[p][3] != "Z"]
        if not victims:
            break
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for p in victims:
                try:
                    os.kill(p, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        time.sleep(0.002)
    seen.discard(keep_unreaped)
    reap_pids(seen)  # those reparented to us (we are a subreaper) are reaped here, others by their parent


def stop_and_wait(pid: int, wait_s: float = 0.2) -> None:
    """Sends SIGSTOP and waits (briefly) until ``pid`` is stopped or gone, so it forks no more."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            return
        if stat[stat.rfind(b")") + 2:].split()[0] in (b"T", b"t", b"Z", b"X"):
            return
        time.sleep(0.0005)


def reap_pids(pids: set[int] | list[int], wait_s: float = 0.5) -> None:
    """Reaps each of ``pids`` that is (or becomes, within ``wait_s``) an exited child of ours."""
    pending = set(pids)
    deadline = time.monotonic() + wait_s
    while pending:
        for pid in list(pending):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not our child (yet: reparenting may be under way) or gone
                if not os.path.exists(f"/proc/{pid}"):
                    pending.discard(pid)
                continue
            if done:
                pending.discard(pid)
        if not pending or time.monotonic() > deadline:
            return
        time.sleep(0.002)


def _nested_pidns(pid: int) -> bool:
    """True if ``pid`` lives in a PID namespace below ours (a jailed process; zombies included)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("NSpid:"):
                    return len(line.split()) > 2
    except OSError:
        pass
    return False


def reap_jail_orphans(wait_s: float = 0.5) -> None:
    """Reaps jailed processes reparented to this subreaper when their nsjail died.

    Only children in a nested PID namespace are touched, so no ``subprocess.Popen`` of other code
    in this process ever loses its exit status. Waits up to ``wait_s`` for live ones to die (the
    kernel kills a PID namespace whose init is gone).
    """
    me = os.getpid()
    deadline = time.monotonic() + wait_s
    while True:
        pending = False
        for pid, (pp, _sid, _uid, st) in process_table().items():
            if pp != me or not _nested_pidns(pid):
                continue
            if st == "Z":
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
            else:
                pending = True
        if not pending or time.monotonic() > deadline:
            return
        time.sleep(0.005)
