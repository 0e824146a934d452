"""The worker's supervisor loop: one request at a time, one forked child per evaluation.

It keeps one child forked ahead of the next request (see :mod:`reasearch.engine._child`; forked by
its zygote, a quiet copy of the worker, where ``_zygote`` is available: see ``_zygote.c``), hands it
the request, pumps its output (:mod:`reasearch.engine._pump`), enforces the wall limit, kills the
child's whole tree (process group, then every descendant: the worker is a child subreaper, so
orphans come back to it), removes what it left on disk (:mod:`reasearch.engine._cleanup`), and
reports plain data to the engine.

CPU time is measured here, never reported by the child: ``wait4`` rusage of the child and of every
descendant it reaps; when a complete ``ok`` result arrives, the supervisor answers at once with the
kernel's accounting of the child and its live descendants (:func:`reasearch.engine._procs.cpu_s`,
exited threads included), and kills and reaps them after the reply, off the caller's critical path.

A worker whose clean-up failed, or whose scratch filesystem is short of space afterwards, retires:
it answers its next request with a ``retired`` frame and exits, and the engine starts a fresh one.

The supervisor holds its parts, each an object of its own with its own state, in a module of its own:
``scratch`` (:class:`~reasearch.engine._scratch.ScratchFolders`: scratch folders), ``forks``
(:class:`~reasearch.engine._forking.ChildForks`: the child forked ahead, the zygote, compiled code) and
``tree`` (:class:`~reasearch.engine._proc_tree.ProcessTree`: the process tree and its CPU time); this
module holds the request loop and the handlers. The jailed worker imports all of them: none imports
``typing`` nor ``dataclasses``.
"""

from __future__ import annotations

import gc
import importlib
import os
import resource
import select
import signal
import sys
import time
import traceback

from reasearch.engine import _procs, _spin, _wire
from reasearch.engine._child import QUICKEN_ROUNDS, REQUEST_CAP, quicken_request_path, rehearse_harness
from reasearch.engine._forking import SESSION_PIPE_BYTES, ZYGOTE_TIMEOUT_S, ChildForks, zygote_available
from reasearch.engine._privilege import drop_bounding_set
from reasearch.engine._proc_tree import ProcessTree
from reasearch.engine._pump import CHILD_KINDS, Capped, Child, collect_exit, drain, frame_kind, pump, take_frame
from reasearch.engine._scratch import ScratchFolders

TYPE_CHECKING = False  # as typing's, without importing typing into the worker's image (see _pump.Child)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["BUSY_WARM_DELAY_S", "SESSION_PIPE_BYTES", "ZYGOTE_TIMEOUT_S", "Supervisor", "warm_delay",
           "zygote_available"]

_NOTICES = frozenset({"started", "warming", "warmed", "waited"})  # frames that precede a request's one reply
# Back to back, the next child waits this long for its request before it warms up: longer than
# the gaps between one worker's requests then (a few ms on 2 workers), far shorter than a pause.
BUSY_WARM_DELAY_S = 2 * _spin.IDLE_S


def warm_delay(now: float, last_frame: float) -> float:
    """How long the child forked after this request waits for its own before warming up
    (``_child._warm_up``): :data:`BUSY_WARM_DELAY_S` when this request came back to back (within
    ``_spin.IDLE_S`` of the worker's previous frame to the engine), else 0 (warm up at once)."""
    return BUSY_WARM_DELAY_S if now - last_frame <= _spin.IDLE_S else 0.0
_ns = time.monotonic_ns




class _Retire(Exception):
    """This worker must be replaced before it serves the request at hand (see ``retire_reason``)."""


class Supervisor:
    """The worker's request loop.

    Args:
        rfd: the engine's request pipe.
        wfd: the reply pipe to the engine.
        scratch_root: folder under which each evaluation gets its own scratch folder.
        child_uid: uid each child drops to (None: the worker's own).
        keep_read_search: whether that child keeps CAP_DAC_READ_SEARCH (process mode as root).
        report_child: send a ``started`` notice with each child's pid (one uid, no jail).
        min_free_bytes: retire when the scratch filesystem has less free space after clean-up.
    """

    def __init__(self, rfd: int, wfd: int, scratch_root: str, child_uid: int | None, keep_read_search: bool,
                 report_child: bool, min_free_bytes: int = 0, zygote: bool = True) -> None:
        self.rfd, self.wfd = rfd, wfd
        self.retire_reason: str | None = None  # set when this worker must be replaced before the next request
        self.report_child = report_child
        self.replied = False
        self.in_jail = os.getpid() == 1  # pid 1 of its own PID namespace: a jail
        self.scratch = ScratchFolders(scratch_root, child_uid, min_free_bytes)
        self.shm = self.in_jail and os.path.isdir("/dev/shm")  # the jail's own: emptied after each candidate
        self.harnesses: set[str] = set()
        self.session: Child | None = None
        # Monotonic ns stamps of the request at hand (always taken: a dict store each) and of the
        # work done after the previous reply (teardown, next fork, clean-up). Sent only to a request
        # that asks for them ("stamps": bench only), so that the benchmark can break the cost down.
        self.stamps: dict[str, int] = {}
        self.post: dict[str, int] = {}
        self.post_prev: dict[str, int] = {}
        self.stamping = False
        self.last_frame = 0.0  # when this worker last wrote a frame to the engine (see _spin)
        self.last_wait_s = 0.0  # how long the previous one-shot child took to its result (see _spin.until)
        prewarm_dir = self.scratch.make_prewarm()
        # Once here rather than in every child (both are inherited at fork): the capability
        # bounding set a child needs, and default SIGINT/SIGTERM dispositions.
        bounding_dropped = False
        if child_uid is not None:
            drop_bounding_set(keep_read_search)
            bounding_dropped = True
        self.reset_signals()
        quicken_request_path(prewarm_dir)  # before the first fork: every child inherits it
        self.forks = ChildForks(self.scratch, child_uid, keep_read_search, bounding_dropped, prewarm_dir,
                                zygote and zygote_available())
        self.tree = ProcessTree(self.in_jail, self.forks)
        self.forks.start_zygote(held=False)

    # -- plumbing
    @staticmethod
    def reset_signals() -> None:
        """SIGINT and SIGTERM back to their defaults (Python and preloaded libraries install
        handlers): every child forked from here inherits them and never pays for setting them."""
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def send(self, header: dict[str, Any], value: Any = None) -> None:
        _wire.write_all(self.wfd, _wire.encode_frame(header, value))
        self.last_frame = time.monotonic()
        if header.get("kind") not in _NOTICES:
            self.replied = True

    def warm_harness(self, harness: str | None) -> None:
        """Imports a harness module in the worker once (and calls its ``warmup()``), before forking."""
        if not harness:
            return
        mod_name = harness.partition(":")[0]
        if mod_name in self.harnesses:
            return
        self.discard_idle()  # forked before this import: it would import the harness on every request
        self.send({"kind": "warming"})  # the engine suspends the request's clock (evaluator time)
        t0 = time.monotonic()
        mod = importlib.import_module(mod_name)
        warm = getattr(mod, "warmup", None)
        if callable(warm):
            warm()
        rehearse_harness(mod, QUICKEN_ROUNDS)  # quickened before any child runs it
        self.reset_signals()  # in case the harness or what it imported installed handlers
        self.harnesses.add(mod_name)
        self.forks.start_zygote(self.session is not None)  # a copy of the worker with the harness in it
        self.send({"kind": "warmed", "warm_s": time.monotonic() - t0})

    def start(self, head: dict[str, Any], value: dict[str, Any], scratch: str, session: bool) -> Child:
        """Hands the request to the pre-forked child (forking one now if there is none)."""
        ch = self.forks.take_idle(self.session is not None)
        limits = head["limits"]
        ch.out = Capped(ch.out_r, int(limits["output_bytes"]))
        ch.err = Capped(ch.err_r, int(limits["output_bytes"]))
        ch.result_cap = int(limits["result_bytes"])
        ch.scratch = scratch
        if self.report_child:  # one uid, no jail: the engine kills this session if the worker dies
            self.send({"kind": "started", "pid": ch.pid})
        code = self.forks.compiled(head["source"], scratch)
        req = {"scratch": scratch, "entry": head["entry"], "harness": head.get("harness"), "limits": limits,
               "session": session, "stamps": bool(head.get("stamps")), "source": None if code else head["source"]}
        # CPU the child spent before its request (set-up, warm-up) is not the candidate's. Until it
        # reads its request the child runs engine code only, in its one thread (a fork copies
        # only the calling thread): that thread's accounting is the whole process's.
        ch.cpu_base = _procs.thread_cpu_s(ch.pid)
        if session:
            self.forks.widen_pipes(ch)
            ch.cpu_mark_ns = _procs.process_cpu_ns(ch.pid)  # the start of its CPU account per call (handle_call)
        ch.t0 = time.monotonic()
        assert ch.calls_w is not None
        frame = _wire.encode_frame(req, {"payload": value.get("payload"), "code": code})
        self.stamps["w_handed"] = _ns()  # before the write: the child may read it at once
        try:
            _wire.write_all(ch.calls_w, frame)
        except OSError:
            pass  # the child died before its request: pump() sees it exit, the report says how
        self.stamps["w_forked"] = ch.forked_ns
        self.stamps["w_fork_ret"] = ch.fork_ret_ns
        return ch

    def discard_idle(self) -> None:
        """Drops the pre-forked child (it lacks a module the worker just imported, or we are exiting)."""
        ch, self.forks.idle = self.forks.idle, None
        if ch is None:
            return
        for fd in (ch.calls_w, ch.result_r, ch.out_r, ch.err_r):
            if fd is not None:
                os.close(fd)
        self.tree.kill_tree(None)
        os.close(ch.pidfd)

    def refill(self) -> None:
        """Forks the next child ahead of the next request (after the reply went out)."""
        self.forks.refill(self.session is not None)

    def finish(self, ch: Child, killed: str | None, frame: bytes | None, too_large: bool) -> None:
        """Kills and reaps the child's tree and sends the final report of this child."""
        self.cleanup(ch)
        # The CPU figure is the reaped tree's (wait4): the bench's "drain + CPU read" step holds the
        # teardown on this path (a child that exited before its result was read), not the early one.
        self.stamps["w_cpu_read"] = _ns()
        status = ch.status
        if status is None:  # cannot happen: every reap books the child's status; never guess one
            raise RuntimeError(f"child {ch.pid} was reaped without its exit status being recorded")
        self.report(ch, frame, killed=killed, too_large=too_large, cpu=ch.rusage_cpu,
                    exit_code=os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                    sig=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None)

    def finish_early(self, ch: Child, frame: bytes) -> None:
        """Replies as soon as a complete ``ok`` result is in, then kills and reaps off the critical path.

        The child has nothing left to do but exit, and tearing down a forked copy of the warm runtime
        costs milliseconds; the caller need not wait for it. CPU time is then read from the kernel's
        accounting (/proc) of the child and its live descendants, plus what was reaped.
        """
        drain(ch)  # the child flushed its output before writing the result
        ch.alone = self.tree.alone(ch.pid)
        cpu = ch.rusage_cpu + self.tree.live_cpu(ch.pid, ch.alone, ch.pidfd)
        self.stamps["w_cpu_read"] = _ns()
        self.stamps["child_cpu_base_ns"] = int(ch.cpu_base * 1e9)
        self.stamps["child_cpu_reply_ns"] = int(cpu * 1e9)
        self.report(ch, frame, killed=None, too_large=False, cpu=cpu, exit_code=None, sig=None, early=True)
        post = self.post
        post["p_replied"] = _ns()
        # The engine's thread wakes on this reply and is often queued on this core: let it read
        # the reply before the fork below (measured: its wake-up went from ~1.0-1.4 ms to
        # ~0.3-1.0 ms behind a NumPy image's fork).
        os.sched_yield()
        try:  # start the old tree's teardown now, so that it overlaps the next fork
            os.killpg(ch.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        post["p_killed"] = _ns()
        self.refill()
        post["p_refilled"] = _ns()
        self.cleanup(ch)

    def cleanup(self, ch: Child) -> None:
        """Kills and reaps the child's whole tree, closes its pipes, removes its scratch dir."""
        post = self.post
        post["p_cleanup"] = _ns()
        self.tree.kill_tree(ch)
        collect_exit(ch)
        post["p_reaped"] = _ns()
        post["p_child_cpu_ns"] = int(ch.rusage_cpu * 1e9)  # its whole life, exit included (wait4)
        out, err = ch.capped()
        for fd in (ch.result_r, ch.calls_w, out.fd if out.open else None, err.fd if err.open else None):
            if fd is not None:
                os.close(fd)
        ch.result_r = ch.calls_w = None
        out.open = err.open = False
        os.close(ch.pidfd)
        post["p_closed"] = _ns()
        self.retire(self.scratch.remove(ch.scratch))
        post["p_scratch"] = _ns()
        if self.shm:
            try:
                names = os.listdir("/dev/shm")
            except OSError:
                names = []
            for name in names:
                self.retire(self.scratch.remove(f"/dev/shm/{name}"))
        post["p_shm"] = _ns()
        self.retire(self.scratch.short_of_space())
        if self.retire_reason is None and not select.select([self.rfd], [], [], 0)[0]:
            self.scratch.prepare(self.session is not None)  # only while no request waits: else make() does it
        post["p_done"] = _ns()

    def retire(self, reason: str | None) -> None:
        """Marks this worker for replacement before its next request (the first reason given stands)."""
        if reason is not None and self.retire_reason is None:
            self.retire_reason = reason

    def report(self, ch: Child, frame: bytes | None, *, killed: str | None, too_large: bool, cpu: float,
               exit_code: int | None, sig: int | None, early: bool = False) -> None:
        out, err = ch.capped()
        header: dict[str, object] = {
            "kind": "done",
            "exit_code": exit_code,
            "signal": sig,
            "cpu_s": max(0.0, cpu - ch.cpu_base),
            "wall_s": time.monotonic() - ch.t0,
            "run_delay_s": ch.waited,
            "killed": killed,
            "too_large": too_large,
            "early": early,
            "stdout": out.text(),
            "stderr": err.text(),
        }
        if ch.own_cpu_ns is not None:  # what its processes other than the child used (read by a session's close)
            header["descendants_cpu_ns"] = max(0, round(cpu * 1e9) - ch.own_cpu_ns)
        if self.stamping:
            self.stamps["w_sent"] = _ns()  # the moment just before the reply is written
            header["stamps"] = {"req": self.stamps, "prev": self.post_prev}
        self.send(header, frame)

    def fork_floor(self, n: int) -> list[int]:
        """The bare floor of this image (bench only): ns per fork, ``_exit(0)`` and reap of a child
        that does nothing else, ``n`` times (capped at 1000), the pre-forked child left alone."""
        out = []
        gc.freeze()
        for _ in range(max(1, min(n, 1000))):
            t0 = _ns()
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            out.append(_ns() - t0)
        return out

    # -- requests
    def handle_run(self, head: dict[str, Any], value: dict[str, Any], session: bool) -> None:
        # A one-shot run after a pause polls for its child's result before sleeping (see _spin).
        now = time.monotonic()
        spin_until = 0.0 if session else _spin.until(now, self.last_frame, _spin.WORKER_S, self.last_wait_s)
        self.stamps["w_polls"], self.stamps["w_last_wait_ns"] = int(spin_until > 0.0), int(self.last_wait_s * 1e9)
        self.forks.warm_after_s = warm_delay(now, self.last_frame)
        try:
            self.warm_harness(head.get("harness"))
        except BaseException:
            self.send({"kind": "engine_error", "error": f"harness {head.get('harness')!r} failed in the worker:\n"
                       + traceback.format_exc()})
            return
        self.stamps["w_warm"] = _ns()
        self.forks.last_harness = head.get("harness") or None
        try:
            scratch = self.scratch.make(value.get("files") or {}, head["source"], self.session is not None)
            self.stamps["w_scratch"] = _ns()
        except OSError as exc:  # a full or broken scratch filesystem: this worker is of no more use
            self.retire_reason = f"cannot make a scratch folder: {exc}"
            raise _Retire() from None
        ch = self.start(head, value, scratch, session)
        limits = head["limits"]
        others, notify = (lambda: self.tree.others_cpu(ch)), (lambda w: self.send({"kind": "waited", "waited_s": w}))
        state = self.pump_limited(ch, limits, want_frame=True, spin_until=spin_until, others_cpu=others, notify=notify)
        self.stamps["w_frame"] = _ns()
        if not session:
            self.last_wait_s = time.monotonic() - ch.t0
        if state == "frame":
            frame = take_frame(ch)
            kind = frame_kind(frame)
            if kind not in CHILD_KINDS:  # garbage: the child is out of step; stop it now
                self.finish(ch, None, frame, False)
                return
            if not session:
                if ch.status is None and kind == "ok":
                    self.finish_early(ch, frame)
                    return
                state = self.pump_limited(ch, limits, want_frame=False, others_cpu=others, notify=notify)
                self.finish(ch, "wall" if state == "deadline" else None, frame, False)
                return
            if kind == "ok":
                self.session = ch
                self.send({"kind": "session_ready", "wall_s": time.monotonic() - ch.t0})
                return
            self.finish(ch, None, frame, False)
            return
        self.finish(ch, "wall" if state == "deadline" else None, None, state == "too_large")

    @staticmethod
    def pump_limited(ch: Child, limits: dict[str, Any], want_frame: bool, spin_until: float = 0.0,
                     others_cpu: Callable[[], float] | None = None,
                     notify: Callable[[float], None] | None = None) -> str:
        """:func:`pump` against the request's wall limit, not counting the time the child's main thread
        waited in a run queue for a CPU (``Limits``: a busy machine must not turn into TIMEOUTs), and
        never past the outer bound ``outer_wall_s``. The wait is read only when the plain deadline
        passes: nothing is added to an evaluation that ends within it.

        A wait counts only as far as the candidate's own other threads and processes did not run
        meanwhile (``others_cpu``: their CPU seconds since the fork, see ``ProcessTree.others_cpu``):
        a main thread starved by its own children or threads (a fork bomb, busy threads) waited
        because of the candidate, and that buys it no time. ``notify`` gets the wait counted so far
        each time it grows (the engine moves its own deadline for the worker's reply by as much)."""
        wall = float(limits["wall_s"])
        outer = ch.t0 + max(wall, float(limits.get("outer_wall_s") or wall))
        # The main thread's CPU, its wait in a run queue (booked or estimated) and the CPU of the rest
        # of its tree, at the last look. Waits before the request are engine code, never the candidate's.
        looked_at, cpu_then, claimed, others_then = ch.t0, ch.cpu_base, 0.0, 0.0
        while True:
            deadline = min(outer, ch.t0 + wall + ch.waited)
            state = pump(ch, deadline, want_frame=want_frame, spin_until=spin_until)
            if state != "deadline" or deadline >= outer:
                return state
            now = time.monotonic()
            booked = _procs.run_delay_s(ch.pid)
            cpu = _procs.main_thread_cpu_s(ch.pid)
            if booked > claimed + 1e-3:
                wait_s = booked - claimed
            else:
                # The kernel books a wait in a run queue when it ends: a child queued right now shows
                # none. Runnable and hardly ran since the last look: the time it did not run was waiting.
                if cpu is None or not _procs.runnable(ch.pid):
                    return state
                ran_s, span_s = cpu - cpu_then, now - looked_at
                if ran_s >= span_s / 2:
                    return state  # it ran: its wall limit is reached
                wait_s = span_s - ran_s
            others = others_cpu() if others_cpu is not None else 0.0
            counted = wait_s - (others - others_then)  # what its own threads and processes ran meanwhile
            if counted <= 1e-3:
                return state  # it waited for itself: its wall limit is reached
            ch.waited += counted
            if notify is not None:
                notify(ch.waited)
            claimed += wait_s
            looked_at, cpu_then, others_then = now, cpu if cpu is not None else cpu_then, others

    def handle_call(self, head: dict[str, Any], value: Any) -> None:
        ch = self.session
        if ch is None or ch.calls_w is None:
            self.send({"kind": "engine_error", "error": "call without an open session"})
            return
        timeout = float(head["timeout_s"])
        frame_out = _wire.encode_frame({}, value)
        t0 = time.monotonic()
        cpu0 = _procs.process_cpu_ns(ch.pid)  # before the write: the child may start at once
        try:
            os.set_blocking(ch.calls_w, True)
            _wire.write_all(ch.calls_w, frame_out)
        except OSError:
            pass  # the child is gone; pump() sees it exit
        state = pump(ch, t0 + timeout, want_frame=True)
        if state == "frame":
            cpu1 = _procs.process_cpu_ns(ch.pid)
            frame = take_frame(ch)
            if frame_kind(frame) in CHILD_KINDS:
                self.send({"kind": "call_done", "wall_s": time.monotonic() - t0, **self.call_cpu(ch, cpu0, cpu1)},
                          frame)
                return
            self.session = None  # garbage: the child is out of step; the session ends with it
            self.finish(ch, None, frame, False)
            return
        self.session = None
        self.finish(ch, "wall" if state == "deadline" else None, None, state == "too_large")

    @staticmethod
    def call_cpu(ch: Child, cpu0: int | None, cpu1: int | None) -> dict[str, int]:
        """The child's CPU ns during a call (``cpu_ns``: from the payload's hand-over to the answer's
        arrival) and before it (``cpu_before_ns``: since the previous answer, or the session's request),
        read from the kernel's clock of the whole process; a figure that cannot be read is left out."""
        out: dict[str, int] = {}
        if cpu0 is not None and cpu1 is not None and cpu1 >= cpu0:
            out["cpu_ns"] = cpu1 - cpu0
        if cpu0 is not None and ch.cpu_mark_ns is not None and cpu0 >= ch.cpu_mark_ns:
            out["cpu_before_ns"] = cpu0 - ch.cpu_mark_ns
        ch.cpu_mark_ns = cpu1
        return out

    def handle_close(self) -> None:
        ch, self.session = self.session, None
        if ch is None:
            self.send({"kind": "engine_error", "error": "close without an open session"})
            return
        if ch.calls_w is not None:
            os.close(ch.calls_w)
            ch.calls_w = None
        deadline = time.monotonic() + 1.0  # a child told to stop gets a moment to flush and exit
        pump(ch, deadline, want_frame=False)
        if ch.status is None:  # still running (the pump reads the clock of a child that exits): read it now
            ch.own_cpu_ns = _procs.process_cpu_ns(ch.pid)
        self.finish(ch, None, None, False)

    def loop(self) -> None:
        """Serves requests until the engine closes the pipe (or this worker retires)."""
        while True:
            try:
                body = _wire.read_frame(self.rfd, REQUEST_CAP)
            except _wire.WireError:
                return  # the engine closed the pipe: exit
            received = _ns()
            head, value = _wire.decode_frame(body)
            self.stamps = {"w_recv": received, "w_decoded": _ns(), "w_cpu_ns": time.process_time_ns()}
            self.post_prev, self.post = self.post, {}
            self.stamping = head.get("stamps") is True
            if self.stamping:  # minor page faults so far: this worker's own, and its reaped children's
                self.stamps["w_minflt"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                self.stamps["w_cminflt"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
                if self.forks.zpid is not None:  # and the zygote's (CPU and faults), which forks the children
                    for key, count in (("z_cpu_ns", _procs.process_cpu_ns(self.forks.zpid)),
                                       ("z_minflt", _procs.minor_faults(self.forks.zpid))):
                        if count is not None:
                            self.stamps[key] = count
            self.replied = False
            try:
                if self.retire_reason is not None:
                    raise _Retire()
                self.dispatch(head, value)
            except _Retire:  # the engine starts a fresh worker and sends this request to it
                self.discard_idle()
                self.send({"kind": "retired", "reason": self.retire_reason})
                return
            except Exception:  # an engine bug: report it with its traceback, clean up, keep serving
                error = traceback.format_exc()
                ch, self.session = self.session, None
                self.discard_idle()
                self.tree.kill_tree(ch)
                if self.replied:  # the engine has its answer already: an extra frame would desync it
                    print(f"sandbox worker: error after the reply:\n{error}", file=sys.stderr, flush=True)
                else:
                    self.send({"kind": "engine_error", "error": error})
            # No rehearsal of the request path here (walking it on canned data to take the
            # copy-on-write faults early): measured on 2 cores it cost ~0.4-0.5 ms of CPU per
            # evaluation to take ~0.1 ms off the next request's path, and back-to-back requests
            # on 2 workers are CPU-bound (see ``reasearch bench --section sandbox``).
            self.refill()

    def dispatch(self, head: dict[str, Any], value: Any) -> None:
        """Runs one request."""
        op = head.get("op")
        if op == "run":
            self.handle_run(head, value, session=False)
        elif op == "session":
            self.handle_run(head, value, session=True)
        elif op == "call":
            self.handle_call(head, value)
        elif op == "close":
            self.handle_close()
        elif op == "ping":
            idle = self.forks.idle
            self.send({"kind": "pong", "idle_child": idle.pid if idle else None, "zygote": self.forks.zpid})
        elif op == "floor":
            self.send({"kind": "floor", "fork_exit_ns": self.fork_floor(int(head.get("n") or 1))})
        else:
            self.send({"kind": "engine_error", "error": f"unknown op {op!r}"})
