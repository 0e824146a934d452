"""The worker's record of one forked child, and the I/O pump that moves its output.

:class:`Child` is the typed record the supervisor keeps per child (pids, pipe ends, buffers, exit
status, CPU account). :func:`pump` moves the child's stdout/stderr (capped) and result frame (capped
at its declared length) until a frame is complete, the child exits, or a deadline passes.
"""

from __future__ import annotations

import os
import select
import time

from reasearch.engine import _spin, _wire
from reasearch.engine._procs import process_cpu_ns

__all__ = ["CHILD_KINDS", "Capped", "Child", "collect_exit", "drain", "frame_kind", "pump", "take_frame"]

CHILD_KINDS = frozenset({"ok", "error", "oom"})  # the frames a child sends; anything else is garbage


class Capped:
    """Collects up to ``cap`` bytes of a stream; past that, the stream is closed (the writer gets EPIPE)."""

    __slots__ = ("buf", "cap", "fd", "open", "truncated")

    def __init__(self, fd: int, cap: int) -> None:
        self.fd, self.cap = fd, cap
        self.buf = bytearray()
        self.truncated = False
        self.open = True

    def text(self) -> str:
        s = self.buf.decode("utf-8", errors="replace")
        if self.truncated:
            s += f"\n[... output truncated at {self.cap} bytes]"
        return s


class Child:
    """One forked child as the worker sees it (mutable: the pump and the reaper fill it in).

    Attributes:
        pid: its pid (in the worker's PID namespace).
        pidfd: a pidfd, readable once it exits.
        result_r: read end of its result pipe (fd 3 in the child); None once closed.
        calls_w: write end of its request pipe (fd 4 in the child); None once closed.
        out_r: read end of its stdout pipe.
        err_r: read end of its stderr pipe.
        out: stdout collector, set when a request is handed over.
        err: stderr collector, set when a request is handed over.
        rbuf: bytes of the result pipe not yet taken as frames.
        status: its wait status once reaped.
        rusage_cpu: CPU seconds of it and every descendant reaped so far (``wait4`` rusage).
        cpu_base: CPU seconds it spent before its request (set-up, warm-up: not the candidate's).
        t0: monotonic time its request was handed over.
        waited: seconds its wall deadline was moved by: what its main thread waited in a run queue,
            less what its own other threads and processes ran meanwhile (see
            ``Supervisor.pump_limited``; read only once its wall limit has passed, so it includes waits
            before its request: engine code, never the candidate's).
        cpu_mark_ns: its process CPU clock (:func:`reasearch.engine._procs.process_cpu_ns`) when a
            session's request was handed over, then at each call's answer (None: unreadable).
        own_cpu_ns: that clock when it exited, before it was reaped (its whole life, without its
            descendants); None when not read (it was killed).
        result_cap: the largest result frame body accepted.
        scratch: its scratch folder.
        forked_ns: monotonic ns just before its fork (bench breakdown).
        fork_ret_ns: monotonic ns when the fork returned in the worker (bench breakdown).
        alone: in a jail, no process or thread had been created since its fork when its result
            came (the PID namespace's last pid was still its own; see ``ProcessTree.live_cpu``).
    """

    # A plain class with slots rather than a dataclass: the worker imports no ``dataclasses`` (and so
    # no ``inspect``, ``ast``, ``dis``, ``tokenize``): ~1.4 MB less anonymous memory in the image that
    # every child's fork copies the page tables of, and every exit tears down.
    __slots__ = ("pid", "pidfd", "result_r", "calls_w", "out_r", "err_r", "out", "err", "rbuf", "status",
                 "rusage_cpu", "cpu_base", "t0", "waited", "cpu_mark_ns", "own_cpu_ns", "result_cap", "scratch",
                 "forked_ns", "fork_ret_ns", "alone")

    def __init__(self, *, pid: int, pidfd: int, result_r: int | None, calls_w: int | None, out_r: int,
                 err_r: int, forked_ns: int = 0, fork_ret_ns: int = 0) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.result_r = result_r
        self.calls_w = calls_w
        self.out_r = out_r
        self.err_r = err_r
        self.out: Capped | None = None
        self.err: Capped | None = None
        self.rbuf = bytearray()
        self.status: int | None = None
        self.rusage_cpu = 0.0
        self.cpu_base = 0.0
        self.t0 = 0.0
        self.waited = 0.0
        self.cpu_mark_ns: int | None = None
        self.own_cpu_ns: int | None = None
        self.result_cap = 0
        self.scratch = ""
        self.forked_ns = forked_ns
        self.fork_ret_ns = fork_ret_ns
        self.alone = False

    def capped(self) -> tuple[Capped, Capped]:
        """The stdout and stderr collectors (the request was handed over)."""
        assert self.out is not None and self.err is not None
        return self.out, self.err


def frame_kind(body: bytes) -> str | None:
    """The ``kind`` of a child's frame, or None for garbage (the engine reports it as such)."""
    try:
        kind = _wire.split_body(body)[0].get("kind")
    except _wire.WireError:
        return None
    return kind if isinstance(kind, str) else None


def pump(ch: Child, deadline: float, want_frame: bool, spin_until: float = 0.0) -> str:
    """Moves child output until a result frame is complete, the child exits, or the deadline.

    ``spin_until``: up to this monotonic time, poll without sleeping, yielding the CPU between polls
    (see :mod:`reasearch.engine._spin`).

    Returns ``"frame"``, ``"exited"``, ``"deadline"`` or ``"too_large"``.
    """
    # A poll object rather than a selector: registering is bookkeeping in this process (no epoll
    # descriptor to make, fill and close on every request), one ``poll`` call per wait.
    poller = select.poll()
    watched: dict[int, Capped | str] = {}

    def watch(fd: int, what: Capped | str) -> None:
        poller.register(fd, select.POLLIN)
        watched[fd] = what

    def unwatch(fd: int) -> None:
        if watched.pop(fd, None) is not None:
            poller.unregister(fd)

    for cap in ch.capped():
        if cap.open:
            watch(cap.fd, cap)
    if ch.result_r is not None:
        watch(ch.result_r, "result")
    if ch.status is None:
        watch(ch.pidfd, "exit")
    while True:
        if want_frame:
            got = _frame_state(ch)
            if got != "partial":
                return got
        if ch.status is not None and not want_frame:
            return "exited"
        now = time.monotonic()
        left = deadline - now
        if left <= 0:
            return "deadline"
        events = _spin.poll(poller, now, spin_until, left)
        if events is None:
            continue
        # Any event counts as readable (a hang-up or an error too: the read then says EOF).
        for fd, _ in events:
            what = watched.get(fd)
            if what is None:  # unwatched earlier in this batch
                continue
            if what == "exit":
                unwatch(fd)
                collect_exit(ch)
            elif what == "result":
                if _read_result(ch) == "eof":
                    unwatch(fd)
                    os.close(fd)
                    ch.result_r = None
            elif isinstance(what, Capped) and _read_capped(what) == "eof":
                unwatch(fd)
        if ch.status is not None:
            # The child is gone: take what is already in the pipes (a grandchild may hold
            # them open, so stop at "no data now", not at EOF), then stop.
            while ch.result_r is not None and _read_result(ch) == "data":
                pass
            drain(ch)
            if want_frame:
                got = _frame_state(ch)
                return got if got != "partial" else "exited"
            return "exited"


def drain(ch: Child) -> None:
    """Reads what stdout and stderr hold right now (stops at "no data now", not at EOF)."""
    for cap in ch.capped():
        while cap.open and _read_capped(cap) == "data":
            pass


def _frame_state(ch: Child) -> str:
    buf = ch.rbuf
    if len(buf) < _wire.FRAME_LEN.size:
        return "partial"
    (n,) = _wire.FRAME_LEN.unpack_from(buf)
    if n > ch.result_cap:
        return "too_large"
    return "frame" if len(buf) >= _wire.FRAME_LEN.size + n else "partial"


def _read_result(ch: Child) -> str:
    """Reads what is available of the result pipe, never past the cap: "data", "again" or "eof"."""
    room = ch.result_cap + _wire.FRAME_LEN.size + 1 - len(ch.rbuf)
    if room <= 0 or ch.result_r is None:
        return "eof"
    try:
        data = os.read(ch.result_r, min(room, 1 << 20))
    except BlockingIOError:
        return "again"
    if not data:
        return "eof"
    ch.rbuf += data
    return "data"


def _read_capped(cap: Capped) -> str:
    """Reads a stdout/stderr chunk: "data", "again", or "eof" (at EOF or cut at its cap: closed)."""
    try:
        data = os.read(cap.fd, 1 << 16)
    except BlockingIOError:
        return "again"
    if not data:
        os.close(cap.fd)
        cap.open = False
        return "eof"
    room = cap.cap - len(cap.buf)
    cap.buf += data[:room]
    if len(data) > room:
        cap.truncated = True
        os.close(cap.fd)  # the flood's writer now gets EPIPE instead of being read forever
        cap.open = False
        return "eof"
    return "data"


def collect_exit(ch: Child) -> None:
    """Reaps the child (blocking) and books its status and CPU time, unless that happened already."""
    if ch.status is not None:
        return
    ch.own_cpu_ns = process_cpu_ns(ch.pid)  # exited, not yet reaped: its own CPU over its whole life
    try:
        _, status, ru = os.wait4(ch.pid, 0)
    except ChildProcessError:  # already reaped by the supervisor's reap()
        return
    ch.status = status
    ch.rusage_cpu += ru.ru_utime + ru.ru_stime


def take_frame(ch: Child) -> bytes:
    """Removes the complete frame at the head of the result buffer and returns its body."""
    buf = ch.rbuf
    (n,) = _wire.FRAME_LEN.unpack_from(buf)
    end = _wire.FRAME_LEN.size + n
    body = bytes(buf[_wire.FRAME_LEN.size:end])
    del buf[:end]
    return body
