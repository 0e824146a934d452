"""Process-tree hygiene for the engine process: subreaper status, orphan kills, zombie reaping."""

from __future__ import annotations

import ctypes
import os
import signal
import time

__all__ = [
    "descendants_of", "kill_orphans", "process_table", "reap_jail_orphans", "reap_pids", "set_child_subreaper",
    "stop_and_wait",
]

_PR_SET_CHILD_SUBREAPER = 36


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
    """Every process below ``pid`` (zombies included)."""
    table = process_table() if table is None else table
    out, frontier = [], {pid}
    while frontier:
        nxt = {p for p, row in table.items() if row[0] in frontier}
        out.extend(nxt)
        frontier = nxt
    return out


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
    seen.discard(keep_unreaped)  # type: ignore[arg-type]
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
