"""The worker's children: forked ahead of their request, by the zygote where it is available.

An object the :class:`~reasearch.engine._supervisor.Supervisor` holds (``supervisor.forks``), with its own
state (the child forked ahead, the zygote, the compiled code, what the next child rehearses): the pipes of a
child, the fork itself (from the zygote, a quiet copy of the worker built by ``_zygote.c``, or from the
worker when there is none), what the worker does once before each fork, the candidate's code compiled
once per worker, and a session's wider pipes. The child's own side is :mod:`reasearch.engine._child`.

Trust: runs in the worker, inside the jail, as engine code; the zygote holds nothing but its socket
and forks children that drop to the child uid. Marshalled code goes one way only, from the worker to
its children. The jailed worker imports this module: it imports neither ``typing`` nor
``dataclasses`` (see ``tests/engine/test_images.py``).
"""

from __future__ import annotations

import fcntl
import gc
import marshal
import os
import signal
import sys
import time
import warnings

from reasearch.engine._child import address_space, child_main, fresh_module, set_scratch_env
from reasearch.engine._privilege import PDEATH_KILL_ARGS, libc_prctl, plain_uid_drop
from reasearch.engine._pump import Child
from reasearch.engine._scratch import ScratchFolders

try:
    from reasearch.engine import _zygote  # C extension (setup.py; typed by _zygote.pyi)
except ImportError:  # a source tree without its extensions built: the worker forks its children itself
    _zygote = None  # type: ignore[assignment]  # an optional module: mypy cannot spell "module or None"

TYPE_CHECKING = False  # as typing's, without importing typing into the worker's image (see _pump.Child)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["SESSION_PIPE_BYTES", "ZYGOTE_TIMEOUT_S", "ChildForks", "zygote_available"]

SESSION_PIPE_BYTES = 1 << 19  # a session's request and result pipes (see ChildForks.widen_pipes)
# Candidates compiled once per worker (see ChildForks.compiled): at least this long (shorter ones
# compile in a few tens of us in the child), at most this long (the worker's compile is bounded only by
# the request's wall limit, not by the child's CPU limit: a longer text compiles in the child, under
# it), at most this many, newest kept.
_CODE_MIN_TEXT, _CODE_MAX_TEXT, _CODE_ENTRIES = 2 << 10, 256 << 10, 8
# The longest the worker waits for its zygote's answer (a fork takes well under a millisecond): past
# it the zygote is taken for stuck (stopped, in one-uid process mode, by a candidate of that uid),
# killed, and the worker forks its children itself.
ZYGOTE_TIMEOUT_S = 2.0
_ns = time.monotonic_ns


def zygote_available() -> bool:
    """Whether this build can fork the worker's children from a zygote (``_zygote.c`` built and usable here)."""
    return _zygote is not None and _zygote.available()


class ChildForks:
    """The worker's children, forked ahead of their request, and the zygote that forks them.

    Whether a session holds the worker's one scratch folder is the supervisor's to know: the methods
    that fork take it as ``held`` (the folder a child will most likely be handed, see
    :meth:`ScratchFolders.path`). The supervisor sets :attr:`last_harness` and :attr:`warm_after_s`
    before the fork they are for.

    Args:
        scratch: the worker's scratch folders.
        child_uid: the uid each child drops to (None: the worker's own).
        keep_read_search: whether that child keeps CAP_DAC_READ_SEARCH (process mode as root).
        bounding_dropped: whether the worker already dropped the capability bounding set.
        prewarm_dir: the dummy candidate's folder the children warm up on (None: none).
        zygote_wanted: fork from a zygote (where ``_zygote`` is available).
    """

    __slots__ = ("scratch", "child_uid", "keep_read_search", "bounding_dropped", "prewarm_dir", "zygote_wanted",
                 "idle", "zpid", "zsock", "ready_module", "code_cache", "last_harness", "warm_after_s")

    def __init__(self, scratch: ScratchFolders, child_uid: int | None, keep_read_search: bool, bounding_dropped: bool,
                 prewarm_dir: str | None, zygote_wanted: bool) -> None:
        self.scratch = scratch
        self.child_uid = child_uid
        self.keep_read_search = keep_read_search
        self.bounding_dropped = bounding_dropped
        self.prewarm_dir = prewarm_dir
        self.zygote_wanted = zygote_wanted
        self.idle: Child | None = None  # the child forked ahead of the next request
        # The zygote that forks the children (see _zygote.c): its pid and the worker's end of its socket.
        self.zpid: int | None = None
        self.zsock: int | None = None
        self.ready_module: Any = None  # an empty ``candidate`` module for the next folder (see spawn)
        self.code_cache: dict[tuple[str, str], bytes] = {}  # (file name, exact source) -> its marshalled code
        self.last_harness: str | None = None  # the next child rehearses it (``_child._rehearse``)
        self.warm_after_s = 0.0  # how long the next child waits for its request before warming up

    def take_idle(self, held: bool) -> Child:
        """The child forked ahead (it is no longer idle), or one forked now when there is none."""
        ch, self.idle = self.idle, None
        return ch if ch is not None else self.spawn(held)

    def refill(self, held: bool) -> None:
        """Forks the next child ahead of the next request, unless one is there or a session holds the worker."""
        if self.idle is None and not held:
            self.idle = self.spawn(held)

    def lost(self, pid: int) -> bool:
        """Books the death of a process of ours that is no candidate's: the zygote (killed from outside:
        in process mode a candidate of the same uid can) or the child forked ahead (a later request
        forks another). True when ``pid`` was one of them."""
        if pid == self.zpid:
            self.zpid = None
            self.close_zygote_socket()
            return True
        if self.idle is not None and pid == self.idle.pid:
            dead, self.idle = self.idle, None
            for fd in (dead.calls_w, dead.result_r, dead.out_r, dead.err_r, dead.pidfd):
                if fd is not None:
                    os.close(fd)
            return True
        return False

    def spawn(self, held: bool) -> Child:
        """Forks a child that waits for its request; returns the worker-side ends of its pipes."""
        nxt = self.scratch.next_path(held)  # the folder the child will most likely be handed
        ends = self.child_pipes()
        forked = _ns()
        try:
            had_zygote = self.zsock is not None
            pid = self.zygote_fork(nxt, ends[1])
            if pid is None and had_zygote:
                # The zygote failed this fork: fresh pipes, so that a child it may have forked all
                # the same holds none of the next child's (it reads EOF and exits; a walk reaps it).
                self.close_fds((*ends[0], *ends[1].values()))
                ends = self.child_pipes()
            if pid is None:  # no zygote: fork from the worker itself
                self.before_fork(nxt)
                forked = _ns()
                pid = os.fork()
                if pid == 0:
                    child_main(self.child_uid, self.keep_read_search, ends[1], self.prewarm_dir,
                               self.bounding_dropped, nxt, self.last_harness, self.ready_module, self.warm_after_s)
        except BaseException:
            self.close_fds((*ends[0], *ends[1].values()))
            raise
        self.close_fds(ends[1].values())
        result_r, out_r, err_r, req_w = ends[0]
        for fd in (result_r, out_r, err_r):
            os.set_blocking(fd, False)
        return Child(pid=pid, pidfd=os.pidfd_open(pid), result_r=result_r, calls_w=req_w, out_r=out_r, err_r=err_r,
                     forked_ns=forked, fork_ret_ns=_ns())

    def before_fork(self, nxt: str) -> None:
        """What the worker does before it forks a child or a zygote: builds the empty module of the
        folder ``nxt`` (the one the child will most likely be handed) unless it has it, once per
        folder name (see ScratchFolders.path) rather than in every child, where each page written is a
        copy-on-write fault (each child gets its own copy of it); flushes its
        stdio, and moves every object it holds out of the collector's reach (a collection in a
        child would otherwise write to, and so copy, nearly every page of the warm runtime)."""
        if self.ready_module is None or self.ready_module.__file__ != f"{nxt}/candidate.py":
            self.ready_module = fresh_module(f"{nxt}/candidate.py")
        sys.stdout.flush()
        sys.stderr.flush()
        gc.freeze()

    @staticmethod
    def child_pipes() -> tuple[tuple[int, int, int, int], dict[str, int]]:
        """A child's four pipes: the worker's ends (result, stdout, stderr to read; request to
        write) and the child's, by name."""
        result_r, result_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        req_r, req_w = os.pipe()
        return (result_r, out_r, err_r, req_w), {"result": result_w, "out": out_w, "err": err_w, "req": req_r}

    @staticmethod
    def close_fds(fds: Any) -> None:
        for fd in fds:
            os.close(fd)

    # -- the zygote (see _zygote.c)
    def start_zygote(self, held: bool) -> None:
        """Forks a fresh zygote from the worker as it is now (at start, and after each harness import)."""
        self.stop_zygote()
        if not self.zygote_wanted:
            return
        mine, its = _zygote.pair(ZYGOTE_TIMEOUT_S)
        self.before_fork(self.scratch.next_path(held))
        pid = os.fork()
        if pid == 0:
            self.zygote_main(its, held)
        os.close(its)
        self.zpid, self.zsock = pid, mine

    def zygote_main(self, sock: int, held: bool) -> None:
        """The zygote: holds nothing but its socket, stdio and /dev/null, and forks children in C
        until the worker closes the socket. Each child comes back here from ``serve``, wired up
        (see ``_zygote.c``), and becomes a :func:`child_main`; nobody returns into the worker's code.

        What is the same for every child is done here once: ``HOME``/``TMPDIR`` set to the
        worker's scratch folder (the one every request gets outside a session), the address space
        measured (the runtime each child's memory limit is on top of), and whether the switch to
        the child uid is plain enough to be made in C (:func:`~reasearch.engine._privilege.plain_uid_drop`)."""
        try:
            libc_prctl(*PDEATH_KILL_ARGS)  # the worker is gone: so is its zygote
            os.closerange(3, sock)  # the engine's pipes, the worker's ends of its children's pipes, pidfds
            os.closerange(sock + 1, 1 << 16)
            devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            scratch = self.scratch.next_path(held)
            set_scratch_env(scratch)
            base = address_space()
            uid = self.child_uid
            in_c = uid is not None and self.bounding_dropped and plain_uid_drop(uid, self.keep_read_search)
            # serve() returns in a new child only, wired up
            msg = _zygote.serve(sock, devnull, uid if in_c and uid is not None else -1)
            warm_after_s, nxt, harness = msg.decode().split("\0")
            child_main(None if in_c else uid, self.keep_read_search, None, self.prewarm_dir, self.bounding_dropped,
                       nxt, harness or None, self.ready_module, float(warm_after_s), env_scratch=scratch, base=base)
        finally:
            os._exit(70)

    def zygote_fork(self, nxt: str, fds: dict[str, int]) -> int | None:
        """The pid of a child the zygote forked with ``fds`` as its pipes, or None without a zygote
        (none here, or it died or did not answer within :data:`ZYGOTE_TIMEOUT_S`: then the worker
        forks its children itself from now on)."""
        if self.zsock is None:
            return None
        msg = f"{self.warm_after_s!r}\0{nxt}\0{self.last_harness or ''}".encode()
        try:
            _zygote.send(self.zsock, msg, (fds["result"], fds["out"], fds["err"], fds["req"]))
            answer = os.read(self.zsock, 8)
        except OSError:
            answer = b""
        if len(answer) != 8:
            self.stop_zygote()
            return None
        pid = int.from_bytes(answer, "little", signed=True)
        if pid < 0:
            raise OSError(-pid, f"the zygote could not fork: {os.strerror(-pid)}")
        return pid

    def close_zygote_socket(self) -> None:
        if self.zsock is not None:
            os.close(self.zsock)
            self.zsock = None

    def stop_zygote(self) -> None:
        """Ends the zygote (it has no children of its own: each one it forked is the worker's)."""
        self.close_zygote_socket()
        pid, self.zpid = self.zpid, None
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


    def compiled(self, source: Any, scratch: str) -> bytes | None:
        """The candidate's module code, compiled here once per distinct source and marshalled for each
        child to load (a 36 KB ARC solver with its DSL compiles in ~10-30 ms; loading takes ~1 ms), so
        that the tasks of a set evaluation do not each compile the same file again. None: the child
        compiles the source itself, as it always did (short or huge text, or one that does not compile
        cleanly: its error or warning is then the child's to report, on the candidate's clock).

        The key is the exact source text and the file name the code carries (the worker's one scratch
        path); the bytes go one way only, from this worker to its children, which never send code back.
        """
        if not isinstance(source, str) or not _CODE_MIN_TEXT <= len(source) <= _CODE_MAX_TEXT:
            return None
        key = (f"{scratch}/candidate.py", source)
        code = self.code_cache.pop(key, None)
        if code is None:
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    obj = compile(source, key[0], "exec", dont_inherit=True)
            except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
                return None
            if caught:
                return None
            code = marshal.dumps(obj)
            if len(self.code_cache) >= _CODE_ENTRIES:
                self.code_cache.pop(next(iter(self.code_cache)))  # the least recently used
        self.code_cache[key] = code  # (re)inserted last: most recently used
        return code

    @staticmethod
    def widen_pipes(ch: Child) -> None:
        """Gives a session's request and result pipes room for a whole payload or answer
        (:data:`SESSION_PIPE_BYTES`, 512 KiB, instead of 64 KiB): writing a few hundred KB then needs no
        hand-offs between writer and reader, whose cost and CPU time vary with how the two are scheduled
        (EPLB's 330 KB answers: about a third less harness CPU per call, and steadier). Sessions only, so
        that at most one child per worker holds the larger buffers (the kernel counts pipe pages per
        user); best effort: where the system's limits refuse, the default size still works."""
        for fd in (ch.result_r, ch.calls_w):
            if fd is None:
                continue
            try:
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, SESSION_PIPE_BYTES)
            except OSError:
                pass
