"""The candidate's process tree: killed whole, reaped, and its CPU time read by the worker.

An object the :class:`~reasearch.engine._supervisor.Supervisor` holds (``supervisor.tree``). The worker is a
child subreaper, so whatever a candidate forks comes back to it: the tree is frozen and killed until
none is left, every exit is reaped with ``wait4`` and its CPU time booked to the child, and a live
tree's CPU time is read from the kernel's accounting (:func:`reasearch.engine._procs.cpu_s`).

Trust: runs in the worker, inside the jail, as engine code; the candidate cannot write the figures it
reads (``wait4`` rusage, /proc), nor set the PID namespace's counter that the shortcuts rely on. The
jailed worker imports this module: it imports neither ``typing`` nor ``dataclasses`` (see
``tests/engine/test_images.py``).
"""

from __future__ import annotations

import os
import select
import signal
import time

from reasearch.engine import _procs
from reasearch.engine._forking import ChildForks
from reasearch.engine._pump import Child, collect_exit

TYPE_CHECKING = False  # as typing's, without importing typing into the worker's image (see _pump.Child)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["ProcessTree"]


class ProcessTree:
    """The worker's hold on its candidates' trees; the child forked ahead and the zygote (``forks``)
    are left out of every tree, and their deaths are booked by ``forks``.

    Args:
        in_jail: whether the worker is pid 1 of its own PID namespace (the shortcuts of :meth:`alone`).
        forks: the worker's :class:`ChildForks`.
    """

    __slots__ = ("in_jail", "forks")

    def __init__(self, in_jail: bool, forks: ChildForks) -> None:
        self.in_jail = in_jail
        self.forks = forks

    def kill_tree(self, ch: Child | None) -> None:
        """Kills the child's process group, then every remaining descendant, until none is left.

        No walk for a child that was :attr:`~Child.alone` at its result when, since then, the only
        pid handed out in the jail is the next child's, right after it: then nothing else was ever
        created, and reaping the child itself is the whole clean-up."""
        if ch is not None:
            try:
                os.killpg(ch.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        idle = self.forks.idle.pid if self.forks.idle else None  # the next request's child is not part of this tree
        if ch is not None and ch.alone and idle == ch.pid + 1 and _procs.last_pid() == idle:
            collect_exit(ch)
            return
        for _ in range(500):
            pids = self.candidate_tree()
            if not pids:
                break
            for sig in (signal.SIGSTOP, signal.SIGKILL):  # freeze first, so a fork bomb cannot outrun us
                for pid in pids:
                    try:
                        os.kill(pid, sig)
                    except (ProcessLookupError, PermissionError):
                        pass
            self.wait_one(ch)  # everything below us is dying: block for the next exit, don't poll
            self.reap(ch)
        self.reap(ch)

    def candidate_tree(self) -> list[int]:
        """Every process below the worker but the engine's own: the child forked ahead of the next
        request and the zygote (each left out with all below it)."""
        forks = self.forks
        return _procs.children_walk(os.getpid(), skip=(forks.idle.pid if forks.idle else None, forks.zpid))

    def wait_one(self, ch: Child | None) -> None:
        """Blocks until one child of the worker exits (and reaps it, accounting its CPU time)."""
        try:
            pid, status, ru = os.wait4(-1, 0)
        except ChildProcessError:  # only grandchildren left: their parents are dying, they come to us
            time.sleep(0.0005)
            return
        self.account(ch, pid, status, ru)

    def account(self, ch: Child | None, pid: int, status: int, ru: Any) -> None:
        """Books a reaped process: the child's status and CPU time, or a pre-forked child (or the
        zygote) that died."""
        if self.forks.lost(pid):
            return
        if ch is not None:
            ch.rusage_cpu += ru.ru_utime + ru.ru_stime
            if pid == ch.pid:
                ch.status = status

    def reap(self, ch: Child | None) -> None:
        """Reaps every exited descendant, adding its CPU time to the child's account."""
        while True:
            try:
                pid, status, ru = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.account(ch, pid, status, ru)


    def alone(self, pid: int) -> bool:
        """In a jail: no process or thread was created since ``pid`` (the namespace's last pid is its own)."""
        return self.in_jail and _procs.last_pid() == pid

    def others_cpu(self, ch: Child) -> float:
        """CPU seconds the child's tree spent outside its main thread since the child was forked: its
        other threads (exited ones included), the children it waited for, every other live process
        below the worker but the engine's own, and what the worker reaped so far. What its main
        thread waited for a CPU while these ran, the candidate made itself (see
        ``Supervisor.pump_limited``). No walk in a jail while nothing was created since the child
        (:meth:`alone`): then it is 0.0."""
        if self.alone(ch.pid):
            return 0.0
        own_ns, main = _procs.process_cpu_ns(ch.pid), _procs.main_thread_cpu_s(ch.pid)
        threads = (own_ns / 1e9 - main) if own_ns is not None and main is not None else 0.0
        below = sum(_procs.cpu_s(p) for p in self.candidate_tree() if p != ch.pid)
        return max(0.0, threads) + _procs.waited_children_cpu_s(ch.pid) + below + ch.rusage_cpu

    def live_cpu(self, pid: int, alone: bool, pidfd: int | None = None) -> float:
        """CPU seconds of a live process (all threads, exited ones included, and the children it
        waited for) and of every other live descendant of the worker, from /proc (the candidate
        cannot write these).

        A process that exits while the tree is walked hands its children to the worker (a
        subreaper) meanwhile, and the walk can find them under neither (a child that exits right
        after its result, leaving a CPU burner behind, did that in about one run in three of the
        hostile suite). So when ``pid`` (its ``pidfd``) has exited by the end of the walk, the
        tree is walked again until two walks agree.

        In a jail (its own PID namespace) the walk is skipped when the namespace's last pid is still
        ``pid``'s own (``alone``, from :meth:`alone`): no process or thread was
        created since it, so it has no descendant and never waited for a child, and its process CPU
        clock (one syscall, every thread) is the whole account. Pids are handed out in increasing
        order and wrap only past every pid in use; the candidate, without capabilities, cannot set
        the counter."""
        if alone:
            ns = _procs.process_cpu_ns(pid)
            return ns / 1e9 if ns is not None else _procs.cpu_s(pid)
        tree = self.candidate_tree()
        if pidfd is not None and select.select([pidfd], [], [], 0)[0]:  # it exited: see above
            for _ in range(8):
                again = self.candidate_tree()
                if sorted(again) == sorted(tree):
                    break
                tree = again
        return sum(_procs.cpu_s(p) for p in (pid, *(d for d in tree if d != pid)))
