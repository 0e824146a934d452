"""The warm worker: runs inside its jail (or as a plain process in process mode), forks one child per
evaluation and supervises it.

Trust boundary: the worker is engine code (it is not candidate code, even though it runs inside the
jail). It preloads NumPy/SciPy/numba and task harness modules (a harness's ``warmup()`` runs here,
once, so numba kernels compile before any fork). It keeps one child forked ahead of the next request;
that child drops to a second uid where it can (so it cannot signal or trace the worker), walks the
request path once on a dummy candidate (so copy-on-write faults happen before the clock starts), and
blocks until the request arrives; then it applies the per-evaluation rlimits, imports the candidate
and calls it. The worker enforces the wall limit, kills the child's whole tree (process group, then
every descendant: the worker is a child subreaper, so orphans come back to it), caps stdout/stderr
and the result size while reading, and reports plain data to the engine.

CPU time is measured by the worker, never reported by the child: ``wait4`` rusage of the child and
of every descendant it reaps; when a complete ``ok`` result arrives, the worker answers at once
with the kernel's per-task accounting (``/proc/<pid>/task/*/schedstat`` plus waited-for children)
of the child and its live descendants, and kills and reaps them after the reply, off the caller's
critical path (tearing down a forked copy of the warm runtime costs milliseconds).

Protocol with the engine: frames from :mod:`reasearch.engine._wire` on fds 0 (requests) and 1
(replies); the worker moves them to private fds at start and points 0/1 elsewhere so that stray
prints from preloaded libraries can never corrupt the channel.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import math
import os
import resource
import select
import selectors
import signal
import sys
import time
import traceback
from typing import Any

from reasearch.engine import _wire
from reasearch.engine._cleanup import free_bytes, remove_tree

_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_DUMPABLE = 4
_PR_SET_PDEATHSIG = 1
_PR_SET_SECUREBITS = 28
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_SECBIT_KEEP_CAPS = 1 << 4
_SECBIT_NOROOT = 1 << 0
_CAP_DAC_READ_SEARCH = 2
_CAP_VERSION_3 = 0x20080522
_TRACEBACK_CHARS = 16_000
_REQUEST_CAP = 1 << 34  # requests come from the trusted engine; this only guards against corruption
_OOM_FRAME = _wire.encode_frame({"kind": "oom"})  # built up front: there is no memory to build it later

_libc = ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, arg: int) -> None:
    if _libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}) failed: {os.strerror(err)}")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _set_caps(mask: int) -> None:
    """Sets effective = permitted = ``mask`` (capabilities 0..31), inheritable empty."""
    head = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    data[0].effective = data[0].permitted = mask
    if _libc.capset(ctypes.byref(head), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset failed: {os.strerror(err)}")


def _drop_to_uid(uid: int, keep_read_search: bool) -> None:
    """Switches the child to ``uid`` so it can neither signal nor trace the worker.

    In process mode as root the child keeps only CAP_DAC_READ_SEARCH (it may read the interpreter
    under a 0700 home, as before, but not write outside its scratch dir, kill the worker or exceed
    RLIMIT_NPROC, which root would ignore).
    """
    keep = 1 << _CAP_DAC_READ_SEARCH if keep_read_search else 0
    for cap in range(64):  # the bounding set too, so no exec can ever regain a capability
        if not keep >> cap & 1 and _libc.prctl(_PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0) != 0:
            break  # EINVAL: past the last capability this kernel knows
    if keep_read_search:
        _prctl(_PR_SET_SECUREBITS, _SECBIT_KEEP_CAPS | _SECBIT_NOROOT)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    _set_caps(keep)  # effective = permitted = keep; inheritable emptied
    _libc.prctl(_PR_CAP_AMBIENT, ctypes.c_ulong(_PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0)


# ----------------------------------------------------------------------------------------------- child


def _apply_limits(limits: dict[str, Any]) -> None:
    """Per-evaluation rlimits; the address-space limit is on top of the preloaded runtime."""
    page = os.sysconf("SC_PAGE_SIZE")
    with open("/proc/self/statm") as fh:
        base = int(fh.read().split()[0]) * page
    as_bytes = base + int(limits["memory_mb"]) * (1 << 20)
    cpu = max(1, math.ceil(float(limits["cpu_s"])))
    fsize = int(limits["fsize_mb"]) * (1 << 20)
    for res, soft, hard in (
        (resource.RLIMIT_AS, as_bytes, as_bytes),
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_NPROC, int(limits["nproc"]), int(limits["nproc"])),
        (resource.RLIMIT_FSIZE, fsize, fsize),
        (resource.RLIMIT_NOFILE, int(limits["nofile"]), int(limits["nofile"])),
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_MSGQUEUE, 0, 0),  # no POSIX message queue can be created
    ):
        resource.setrlimit(res, (soft, hard))


def _load_candidate(scratch: str, entry: list[str]) -> Any:
    """Imports ``candidate.py`` from the scratch dir and returns the first entry point it defines."""
    import importlib.util

    path = os.path.join(scratch, "candidate.py")
    sys.path.insert(0, scratch)
    spec = importlib.util.spec_from_file_location("candidate", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["candidate"] = module
    spec.loader.exec_module(module)
    for name in entry:
        fn = getattr(module, name, None)
        if callable(fn):
            return fn
    first, rest = entry[0], entry[1:]
    also = f" (also tried: {', '.join(repr(r) for r in rest)})" if rest else ""
    raise _NoEntryPoint(f"no function named {first!r}{also}")


class _NoEntryPoint(LookupError):
    """The candidate defines none of the requested entry points."""


def _format_exc(exc: BaseException) -> str:
    """The traceback without the worker's own frames (the candidate's lines are what matter)."""
    if isinstance(exc, _NoEntryPoint):
        return str(exc)
    te = traceback.TracebackException.from_exception(exc)
    te.stack = traceback.StackSummary.from_list([f for f in te.stack if f.filename != __file__])
    return "".join(te.format())


def _resolve_harness(harness: str | None) -> Any:
    if harness is None:
        return None
    mod, _, fn = harness.partition(":")
    return getattr(importlib.import_module(mod), fn)


def _call(fn: Any, harness: Any, payload: Any) -> Any:
    if harness is None:
        return fn(**payload)
    return harness(fn, payload)


def _error_frame(kind: str, text: str) -> bytes:
    return _wire.encode_frame({"kind": kind, "error": text[-_TRACEBACK_CHARS:]})


def _result_frame(value: Any) -> bytes:
    """Encodes a value; anything that is not plain data becomes an error frame."""
    try:
        return _wire.encode_frame({"kind": "ok"}, value)
    except _wire.NotPlainDataError as exc:
        return _error_frame("error", f"result is not plain data: {exc}")


def _guarded(thunk: Any) -> bytes:
    """Runs candidate code; returns the frame to send (value, OOM, or traceback)."""
    try:
        return _result_frame(thunk())
    except MemoryError:
        return _OOM_FRAME
    except SystemExit as exc:  # sys.exit() without a result: leave with its code, the parent says CRASH
        sys.stdout.flush()
        sys.stderr.flush()
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        os._exit(code & 0xFF)
    except BaseException as exc:  # any exception of the candidate or harness: its traceback goes back
        return _error_frame("error", _format_exc(exc))


def _flush_stdio() -> None:
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # a closed or broken pipe must not turn a result into a crash
        pass


_PREWARM_AFTER_S = 0.002
_PREWARM_SOURCE = "def run(x):\n    return {'x': x, 't': (1.5, None)}\n"
_PREWARM_FRAME = _wire.encode_frame({"scratch": "", "entry": ["run"], "harness": None, "limits": {}}, {"payload": {"x": 1}})


def _prewarm(prewarm_dir: str | None) -> None:
    """Walks the request path once on a dummy candidate while the child waits for its request.

    Right after the fork every page is shared with the worker; the first write to one (Python
    touches reference counts everywhere) copies it. Doing that here, before the request arrives,
    takes ~300 page copies (over a millisecond) off each evaluation's critical path.
    """
    if prewarm_dir is None:
        return
    try:
        _, value = _wire.decode_frame(_PREWARM_FRAME[_wire.FRAME_LEN.size:])
        fn = _load_candidate(prewarm_dir, ["run"])
        _result_frame(_call(fn, None, value["payload"]))
        with open("/proc/self/statm") as fh:
            fh.read()
    except Exception:  # only a speed-up: never let it affect the evaluation
        pass
    finally:
        sys.modules.pop("candidate", None)
        if sys.path and sys.path[0] == prewarm_dir:
            sys.path.pop(0)


def _child_main(child_uid: int | None, keep_read_search: bool, fds: dict[str, int], prewarm_dir: str | None) -> None:
    """Runs in the forked child; never returns.

    The child is forked ahead of its request (so a request does not wait for the fork): it sets up
    its session, descriptors and uid, then blocks on fd 4 until the worker sends the request. Only
    then does it apply the request's limits and run candidate code. In a session, later frames on
    fd 4 are call payloads; EOF ends the session.
    """
    code = 70
    try:
        os.setsid()
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(fds["out"], 1)
        os.dup2(fds["err"], 2)
        os.dup2(fds["result"], 3)
        os.dup2(fds["req"], 4)
        os.closerange(5, 1 << 16)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if child_uid is not None:
            _drop_to_uid(child_uid, keep_read_search)
        # Warm up only when the request is not already on its way: under a saturating load the
        # warm-up would be extra work; when requests are spaced out it is free.
        if not select.select([4], [], [], _PREWARM_AFTER_S)[0]:
            _prewarm(prewarm_dir)
        try:
            req, value = _wire.decode_frame(_wire.read_frame(4, _REQUEST_CAP))
        except _wire.WireError:
            os._exit(0)  # discarded before use (the worker is closing or needs a fresh fork)
        scratch = req["scratch"]
        os.chdir(scratch)
        os.environ["HOME"] = scratch
        os.environ["TMPDIR"] = scratch
        _apply_limits(req["limits"])
        entry_fn: Any = None

        def load() -> None:
            nonlocal entry_fn
            entry_fn = _load_candidate(scratch, list(req["entry"]))

        harness = _resolve_harness(req.get("harness"))
        payload = value.get("payload") if isinstance(value, dict) else None
        if not req.get("session"):
            frame = _guarded(lambda: (load(), _call(entry_fn, harness, payload))[1])
            _flush_stdio()  # output first: once the result is in, the worker stops reading
            _wire.write_all(3, frame)
        else:
            frame = _guarded(lambda: (load(), None)[1])
            _wire.write_all(3, frame)
            head, _ = _wire.split_body(frame[_wire.FRAME_LEN.size:])
            if head.get("kind") == "ok":
                while True:
                    try:
                        body = _wire.read_frame(4, _REQUEST_CAP)
                    except _wire.WireError:
                        break  # the worker closed the session
                    _, call_payload = _wire.decode_frame(body)
                    _wire.write_all(3, _guarded(lambda p=call_payload: _call(entry_fn, harness, p)))
        code = 0
    except BaseException:  # the child's own set-up failed: report, never fall back to the worker loop
        try:
            _wire.write_all(3, _error_frame("error", traceback.format_exc()))
        except BaseException:
            pass
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        os._exit(code)


# ---------------------------------------------------------------------------------------------- worker


_HAVE_CHILDREN_FILE = os.path.exists(f"/proc/self/task/{os.getpid()}/children")  # CONFIG_PROC_CHILDREN


def _read_proc(path: str) -> bytes:
    """One small /proc file with two syscalls (``open()`` adds fstat, ioctl and lseek calls)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 65536)
    finally:
        os.close(fd)


def _frame_kind(body: bytes) -> Any:
    """The ``kind`` of a child's frame, or None for garbage (the engine reports it as such)."""
    try:
        kind = _wire.split_body(body)[0].get("kind")
    except _wire.WireError:
        return None
    return kind if isinstance(kind, str) else None


_NOTICES = frozenset({"started", "warming", "warmed"})
_CHILD_KINDS = frozenset({"ok", "error", "oom"})  # the frames a child sends; anything else is garbage  # frames that precede a request's one reply


class _Capped:
    """Collects up to ``cap`` bytes of a stream; past that, the stream is closed (the writer gets EPIPE)."""

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


class _Worker:
    """The worker's request loop."""

    def __init__(self, rfd: int, wfd: int, scratch_root: str, child_uid: int | None, keep_read_search: bool,
                 report_child: bool, min_free_bytes: int = 0) -> None:
        self.rfd, self.wfd = rfd, wfd
        self.min_free_bytes = min_free_bytes
        self.retire_reason: str | None = None  # set when this worker must be replaced before the next request
        self.report_child = report_child
        self.replied = False
        self.in_jail = os.getpid() == 1  # pid 1 of its own PID namespace: a jail
        self.scratch_root = scratch_root
        self.child_uid = child_uid
        self.keep_read_search = keep_read_search
        self.harnesses: set[str] = set()
        self.counter = 0
        self.session: dict[str, Any] | None = None
        self.idle: dict[str, Any] | None = None
        self.prewarm_dir: str | None = self.make_prewarm()

    # -- plumbing
    def send(self, header: dict[str, Any], value: Any = None) -> None:
        _wire.write_all(self.wfd, _wire.encode_frame(header, value))
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
        self.harnesses.add(mod_name)
        self.send({"kind": "warmed", "warm_s": time.monotonic() - t0})

    def make_prewarm(self) -> str | None:
        """A world-readable dummy candidate the children warm up on (see ``_prewarm``)."""
        path = os.path.join(self.scratch_root, "prewarm")
        try:
            os.makedirs(path, mode=0o755, exist_ok=True)
            os.chmod(path, 0o755)
            with open(os.path.join(path, "candidate.py"), "w") as fh:
                fh.write(_PREWARM_SOURCE)
            os.chmod(os.path.join(path, "candidate.py"), 0o644)
        except OSError:
            return None
        return path

    def make_scratch(self, files: dict[str, bytes], source: str) -> str:
        self.counter += 1
        path = os.path.join(self.scratch_root, f"eval-{self.counter}")
        if not remove_tree(path):
            raise OSError(f"cannot clear the scratch dir {path}")
        os.mkdir(path, 0o700)
        with open(os.path.join(path, "candidate.py"), "w", encoding="utf-8", errors="surrogatepass") as fh:
            fh.write(source)
        for name, data in files.items():
            if name in ("", ".", "..") or "/" in name or "\0" in name:
                raise ValueError(f"bad scratch file name {name!r}: plain names only")
            with open(os.path.join(path, name), "wb") as fh:
                fh.write(data)
        if self.child_uid is not None:
            for entry in [path, *(os.path.join(path, n) for n in os.listdir(path))]:
                os.chown(entry, self.child_uid, self.child_uid)
        return path

    def remove_scratch(self, path: str) -> None:
        """Removes a folder a dead candidate wrote; a failure retires this worker (see ``loop``)."""
        if not remove_tree(path) and self.retire_reason is None:
            self.retire_reason = f"could not remove {path} after a candidate"

    def check_space(self) -> None:
        """Retires this worker when its scratch filesystem is short of space after clean-up."""
        free = free_bytes(self.scratch_root)
        if free is not None and free < self.min_free_bytes and self.retire_reason is None:
            self.retire_reason = (f"only {free >> 20} MiB free on the scratch filesystem after clean-up "
                                  f"(at least {self.min_free_bytes >> 20} MiB wanted)")

    # -- process tree
    def descendants(self) -> list[int]:
        """Every live process below the worker.

        Orphans are reparented to the worker (a subreaper), so every live descendant hangs below a
        direct child of the worker: walking ``/proc/<pid>/task/<tid>/children`` from the worker down
        finds them all without scanning the whole process table. Falls back to a /proc scan on kernels
        without that file.
        """
        if not _HAVE_CHILDREN_FILE:
            return self._descendants_by_scan()
        out: list[int] = []
        frontier = [os.getpid()]
        while frontier:
            nxt: list[int] = []
            for pid in frontier:
                try:
                    tids = os.listdir(f"/proc/{pid}/task")
                except OSError:
                    continue  # gone meanwhile
                for tid in tids:
                    try:
                        nxt.extend(int(x) for x in _read_proc(f"/proc/{pid}/task/{tid}/children").split())
                    except OSError:
                        continue  # the thread or process is gone meanwhile
            out.extend(nxt)
            frontier = nxt
        return out

    def _descendants_by_scan(self) -> list[int]:
        """Descendants from a full /proc scan (kernels without the ``children`` file)."""
        parent: dict[int, int] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    stat = fh.read()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2:].split()
            parent[int(name)] = int(fields[1])
        out, frontier = [], {os.getpid()}
        while frontier:
            nxt = {pid for pid, pp in parent.items() if pp in frontier}
            out.extend(nxt)
            frontier = nxt
        return out

    def kill_tree(self, ch: dict[str, Any] | None) -> None:
        """Kills the child's process group, then every remaining descendant, until none is left."""
        if ch is not None:
            try:
                os.killpg(ch["pid"], signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        idle = self.idle["pid"] if self.idle else None  # the next request's child is not part of this tree
        for _ in range(500):
            pids = [p for p in self.descendants() if p != idle]
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

    def wait_one(self, ch: dict[str, Any] | None) -> None:
        """Blocks until one child of the worker exits (and reaps it, accounting its CPU time)."""
        try:
            pid, status, ru = os.wait4(-1, 0)
        except ChildProcessError:  # only grandchildren left: their parents are dying, they come to us
            time.sleep(0.0005)
            return
        self.account(ch, pid, status, ru)

    def account(self, ch: dict[str, Any] | None, pid: int, status: int, ru: Any) -> None:
        """Books a reaped process: the child's status and CPU time, or a pre-forked child that died."""
        if self.idle is not None and pid == self.idle["pid"]:
            dead, self.idle = self.idle, None  # refill() forks another
            for fd in (dead["calls_w"], dead["result_r"], dead["out_r"], dead["err_r"], dead["pidfd"]):
                os.close(fd)
            return
        if ch is not None:
            ch["rusage_cpu"] += ru.ru_utime + ru.ru_stime
            if pid == ch["pid"]:
                ch["status"] = status

    def reap(self, ch: dict[str, Any] | None) -> None:
        """Reaps every exited descendant, adding its CPU time to the child's account."""
        while True:
            try:
                pid, status, ru = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.account(ch, pid, status, ru)

    # -- one child
    def spawn(self) -> dict[str, Any]:
        """Forks a child that waits for its request; returns the worker-side ends of its pipes."""
        result_r, result_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        req_r, req_w = os.pipe()
        fds = {"result": result_w, "out": out_w, "err": err_w, "req": req_r}
        sys.stdout.flush()
        sys.stderr.flush()
        # Move every object the worker holds out of the collector's reach: a collection in the child
        # would otherwise write to (and so copy) nearly every page of the warm runtime.
        gc.freeze()
        pid = os.fork()
        if pid == 0:
            _child_main(self.child_uid, self.keep_read_search, fds, self.prewarm_dir)
        for fd in fds.values():
            os.close(fd)
        for fd in (result_r, out_r, err_r):
            os.set_blocking(fd, False)
        return {"pid": pid, "pidfd": os.pidfd_open(pid), "t0": 0.0, "result_r": result_r, "calls_w": req_w,
                "out_r": out_r, "err_r": err_r, "rbuf": bytearray(), "status": None, "rusage_cpu": 0.0}

    def start(self, head: dict[str, Any], value: dict[str, Any], scratch: str, session: bool) -> dict[str, Any]:
        """Hands the request to the pre-forked child (forking one now if there is none)."""
        ch, self.idle = self.idle, None
        if ch is None:
            ch = self.spawn()
        limits = head["limits"]
        ch.update(out=_Capped(ch["out_r"], int(limits["output_bytes"])),
                  err=_Capped(ch["err_r"], int(limits["output_bytes"])),
                  result_cap=int(limits["result_bytes"]), scratch=scratch, limits=limits)
        if self.report_child:  # one uid, no jail: the engine kills this session if the worker dies
            self.send({"kind": "started", "pid": ch["pid"]})
        req = {"scratch": scratch, "entry": head["entry"], "harness": head.get("harness"), "limits": limits,
               "session": session}
        # CPU the child spent before its request (set-up, warm-up) is not the candidate's.
        ch["cpu_base"] = self.task_cpu(ch["pid"])
        ch["t0"] = time.monotonic()
        try:
            _wire.write_all(ch["calls_w"], _wire.encode_frame(req, {"payload": value.get("payload")}))
        except OSError:
            pass  # the child died before its request: pump() sees it exit, the report says how
        return ch

    def discard_idle(self) -> None:
        """Drops the pre-forked child (it lacks a module the worker just imported, or we are exiting)."""
        ch, self.idle = self.idle, None
        if ch is None:
            return
        for fd in (ch["calls_w"], ch["result_r"], ch["out_r"], ch["err_r"]):
            os.close(fd)
        self.kill_tree(None)
        os.close(ch["pidfd"])

    def refill(self) -> None:
        """Forks the next child ahead of the next request (after the reply went out)."""
        if self.idle is None and self.session is None:
            self.idle = self.spawn()

    def pump(self, ch: dict[str, Any], deadline: float, want_frame: bool) -> str:
        """Moves child output until a result frame is complete, the child exits, or the deadline.

        Returns ``"frame"``, ``"exited"``, ``"deadline"`` or ``"too_large"``.
        """
        sel = selectors.DefaultSelector()
        try:
            for cap in (ch["out"], ch["err"]):
                if cap.open:
                    sel.register(cap.fd, selectors.EVENT_READ, cap)
            if ch["result_r"] is not None:
                sel.register(ch["result_r"], selectors.EVENT_READ, "result")
            if ch["status"] is None:
                sel.register(ch["pidfd"], selectors.EVENT_READ, "exit")
            while True:
                if want_frame:
                    got = self.frame_state(ch)
                    if got != "partial":
                        return got
                if ch["status"] is not None and not want_frame:
                    return "exited"
                left = deadline - time.monotonic()
                if left <= 0:
                    return "deadline"
                events = sel.select(left)
                for key, _ in events:
                    what = key.data
                    if what == "exit":
                        sel.unregister(ch["pidfd"])
                        self.collect_exit(ch)
                    elif what == "result":
                        if self.read_result(ch) == "eof":
                            sel.unregister(ch["result_r"])
                            os.close(ch["result_r"])
                            ch["result_r"] = None
                    elif self.read_capped(what) == "eof":
                        sel.unregister(what.fd)
                if ch["status"] is not None:
                    # The child is gone: take what is already in the pipes (a grandchild may hold
                    # them open, so stop at "no data now", not at EOF), then stop.
                    while ch["result_r"] is not None and self.read_result(ch) == "data":
                        pass
                    for cap in (ch["out"], ch["err"]):
                        while cap.open and self.read_capped(cap) == "data":
                            pass
                    if want_frame:
                        got = self.frame_state(ch)
                        return got if got != "partial" else "exited"
                    return "exited"
        finally:
            sel.close()

    def frame_state(self, ch: dict[str, Any]) -> str:
        buf = ch["rbuf"]
        if len(buf) < _wire.FRAME_LEN.size:
            return "partial"
        (n,) = _wire.FRAME_LEN.unpack_from(buf)
        if n > ch["result_cap"]:
            return "too_large"
        return "frame" if len(buf) >= _wire.FRAME_LEN.size + n else "partial"

    def read_result(self, ch: dict[str, Any]) -> str:
        """Reads what is available of the result pipe, never past the cap: "data", "again" or "eof"."""
        room = ch["result_cap"] + _wire.FRAME_LEN.size + 1 - len(ch["rbuf"])
        if room <= 0:
            return "eof"
        try:
            data = os.read(ch["result_r"], min(room, 1 << 20))
        except BlockingIOError:
            return "again"
        if not data:
            return "eof"
        ch["rbuf"] += data
        return "data"

    def read_capped(self, cap: _Capped) -> str:
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

    def collect_exit(self, ch: dict[str, Any]) -> None:
        if ch["status"] is not None:
            return
        try:
            _, status, ru = os.wait4(ch["pid"], 0)
        except ChildProcessError:  # already reaped by reap()
            return
        ch["status"] = status
        ch["rusage_cpu"] += ru.ru_utime + ru.ru_stime

    def take_frame(self, ch: dict[str, Any]) -> bytes:
        buf = ch["rbuf"]
        (n,) = _wire.FRAME_LEN.unpack_from(buf)
        end = _wire.FRAME_LEN.size + n
        body = bytes(buf[_wire.FRAME_LEN.size:end])
        del buf[:end]
        return body

    def finish(self, ch: dict[str, Any], killed: str | None, frame: bytes | None, too_large: bool) -> None:
        """Kills and reaps the child's tree and sends the final report of this child."""
        self.cleanup(ch)
        status = ch["status"]
        if status is None:  # cannot happen: every reap books the child's status; never guess one
            raise RuntimeError(f"child {ch['pid']} was reaped without its exit status being recorded")
        self.report(ch, frame, killed=killed, too_large=too_large, cpu=ch["rusage_cpu"],
                    exit_code=os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                    sig=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None)

    def finish_early(self, ch: dict[str, Any], frame: bytes) -> None:
        """Replies as soon as a complete ``ok`` result is in, then kills and reaps off the critical path.

        The child has nothing left to do but exit, and tearing down a forked copy of the warm runtime
        costs milliseconds; the caller need not wait for it. CPU time is then read from the kernel's
        per-task accounting (/proc) of the child and its live descendants, plus what was reaped.
        """
        for cap in (ch["out"], ch["err"]):  # the child flushed its output before writing the result
            while cap.open and self.read_capped(cap) == "data":
                pass
        cpu = ch["rusage_cpu"] + self.live_cpu(ch["pid"])
        self.report(ch, frame, killed=None, too_large=False, cpu=cpu, exit_code=None, sig=None, early=True)
        try:  # start the old tree's teardown now, so that it overlaps the next fork
            os.killpg(ch["pid"], signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.refill()
        self.cleanup(ch)

    def live_cpu(self, pid: int) -> float:
        """CPU seconds of a live process (all threads, and the children it waited for) and of every
        other live descendant of the worker, from /proc (the candidate cannot write these)."""
        total = 0.0
        tick = os.sysconf("SC_CLK_TCK")
        for p in [pid, *(d for d in self.descendants() if d != pid)]:
            try:
                live = self.task_cpu(p)  # exact, but of the threads still alive only
                stat = _read_proc(f"/proc/{p}/stat")
                fields = stat[stat.rfind(b")") + 2:].split()
                # utime + stime: every thread of the process, exited ones included (in clock ticks)
                total += max(live, (int(fields[11]) + int(fields[12])) / tick)
                total += (int(fields[13]) + int(fields[14])) / tick  # cutime + cstime: waited-for children
            except (OSError, ValueError, IndexError):
                continue
        return total

    @staticmethod
    def task_cpu(pid: int) -> float:
        """CPU seconds of every thread of a live process (the kernel's run-time accounting)."""
        total = 0.0
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                total += int(_read_proc(f"/proc/{pid}/task/{tid}/schedstat").split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            pass
        return total

    def cleanup(self, ch: dict[str, Any]) -> None:
        """Kills and reaps the child's whole tree, closes its pipes, removes its scratch dir."""
        self.kill_tree(ch)
        self.collect_exit(ch)
        for fd in (ch["result_r"], ch["calls_w"], ch["out"].fd if ch["out"].open else None,
                   ch["err"].fd if ch["err"].open else None):
            if fd is not None:
                os.close(fd)
        ch["result_r"] = ch["calls_w"] = None
        ch["out"].open = ch["err"].open = False
        os.close(ch["pidfd"])
        self.remove_scratch(ch["scratch"])
        if self.in_jail and os.path.isdir("/dev/shm"):  # the jail's own: emptied for the next candidate
            try:
                names = os.listdir("/dev/shm")
            except OSError:
                names = []
            for name in names:
                self.remove_scratch(os.path.join("/dev/shm", name))
        self.check_space()

    def report(self, ch: dict[str, Any], frame: bytes | None, *, killed: str | None, too_large: bool, cpu: float,
               exit_code: int | None, sig: int | None, early: bool = False) -> None:
        header = {
            "kind": "done",
            "exit_code": exit_code,
            "signal": sig,
            "cpu_s": max(0.0, cpu - ch.get("cpu_base", 0.0)),
            "wall_s": time.monotonic() - ch["t0"],
            "killed": killed,
            "too_large": too_large,
            "early": early,
            "stdout": ch["out"].text(),
            "stderr": ch["err"].text(),
        }
        self.send(header, frame)

    # -- requests
    def handle_run(self, head: dict[str, Any], value: dict[str, Any], session: bool) -> None:
        try:
            self.warm_harness(head.get("harness"))
        except BaseException:
            self.send({"kind": "engine_error", "error": f"harness {head.get('harness')!r} failed in the worker:\n"
                       + traceback.format_exc()})
            return
        scratch = self.make_scratch(value.get("files") or {}, head["source"])
        ch = self.start(head, value, scratch, session)
        limits = head["limits"]
        deadline = ch["t0"] + float(limits["wall_s"])
        state = self.pump(ch, deadline, want_frame=True)
        if state == "frame":
            frame = self.take_frame(ch)
            kind = _frame_kind(frame)
            if kind not in _CHILD_KINDS:  # garbage: the child is out of step; stop it now
                self.finish(ch, None, frame, False)
                return
            if not session:
                if ch["status"] is None and kind == "ok":
                    self.finish_early(ch, frame)
                    return
                state = self.pump(ch, deadline, want_frame=False)
                self.finish(ch, "wall" if state == "deadline" else None, frame, False)
                return
            if _frame_kind(frame) == "ok":
                self.session = ch
                self.send({"kind": "session_ready", "wall_s": time.monotonic() - ch["t0"]})
                return
            self.finish(ch, None, frame, False)
            return
        self.finish(ch, "wall" if state == "deadline" else None, None, state == "too_large")

    def handle_call(self, head: dict[str, Any], value: Any) -> None:
        ch = self.session
        if ch is None:
            self.send({"kind": "engine_error", "error": "call without an open session"})
            return
        timeout = float(head["timeout_s"])
        t0 = time.monotonic()
        try:
            os.set_blocking(ch["calls_w"], True)
            _wire.write_all(ch["calls_w"], _wire.encode_frame({}, value))
        except OSError:
            pass  # the child is gone; pump() sees it exit
        state = self.pump(ch, t0 + timeout, want_frame=True)
        if state == "frame":
            frame = self.take_frame(ch)
            if _frame_kind(frame) in _CHILD_KINDS:
                self.send({"kind": "call_done", "wall_s": time.monotonic() - t0}, frame)
                return
            self.session = None  # garbage: the child is out of step; the session ends with it
            self.finish(ch, None, frame, False)
            return
        self.session = None
        self.finish(ch, "wall" if state == "deadline" else None, None, state == "too_large")

    def handle_close(self) -> None:
        ch, self.session = self.session, None
        if ch is None:
            self.send({"kind": "engine_error", "error": "close without an open session"})
            return
        os.close(ch["calls_w"])
        ch["calls_w"] = None
        deadline = time.monotonic() + 1.0  # a child told to stop gets a moment to flush and exit
        self.pump(ch, deadline, want_frame=False)
        self.finish(ch, None, None, False)

    def loop(self) -> None:
        while True:
            try:
                body = _wire.read_frame(self.rfd, _REQUEST_CAP)
            except _wire.WireError:
                return  # the engine closed the pipe: exit
            head, value = _wire.decode_frame(body)
            if self.retire_reason is not None:  # the engine starts a fresh worker and sends this request again
                self.discard_idle()
                self.send({"kind": "retired", "reason": self.retire_reason})
                return
            self.replied = False
            try:
                self.dispatch(head, value)
            except Exception:  # an engine bug: report it with its traceback, clean up, keep serving
                error = traceback.format_exc()
                ch, self.session = self.session, None
                self.discard_idle()
                self.kill_tree(ch)
                if self.replied:  # the engine has its answer already: an extra frame would desync it
                    print(f"sandbox worker: error after the reply:\n{error}", file=sys.stderr, flush=True)
                else:
                    self.send({"kind": "engine_error", "error": error})
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
            self.send({"kind": "pong", "idle_child": self.idle["pid"] if self.idle else None})
        else:
            self.send({"kind": "engine_error", "error": f"unknown op {op!r}"})


_CLONE_NEWIPC = 0x08000000
# Per-IPC-namespace limits that leave no room for any SysV object or POSIX message queue.
_IPC_ZERO = {"/proc/sys/kernel/shmmni": "0", "/proc/sys/kernel/msgmni": "0",
             "/proc/sys/kernel/sem": "0 0 0 0", "/proc/sys/fs/mqueue/queues_max": "0"}


def _private_ipc() -> None:
    """Process mode as root: moves the worker (and so its children) into an IPC namespace of its own
    in which no SysV segment, queue or semaphore set, and no POSIX message queue, can be created
    (inside a jail seccomp denies those calls). Raises if it cannot: a worker must not run without it."""
    if _libc.unshare(_CLONE_NEWIPC) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWIPC) failed: {os.strerror(err)}")
    for path, value in _IPC_ZERO.items():
        if os.path.exists(path):
            with open(path, "w") as fh:
                fh.write(value)


def main() -> None:
    """Entry point: ``python -m reasearch.engine._worker CONFIG_JSON``."""
    cfg = json.loads(sys.argv[1])
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)  # stray prints go to the worker's log, never into the protocol
    os.close(null)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_DUMPABLE, 0)  # no /proc/<worker>/mem access for same-uid children
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # the engine died: so does the worker
    os.makedirs(cfg["scratch_root"], mode=0o711, exist_ok=True)
    errors = {}
    t0 = time.monotonic()
    for name in cfg["preload"]:
        try:
            importlib.import_module(name)
        except BaseException:
            errors[name] = traceback.format_exc()
    if cfg.get("private_ipc"):
        _private_ipc()
    worker = _Worker(rfd, wfd, cfg["scratch_root"], cfg.get("child_uid"), bool(cfg.get("keep_read_search")),
                     bool(cfg.get("report_child")), int(cfg.get("min_free_bytes") or 0))
    worker.refill()
    worker.send({"kind": "ready", "pid": os.getpid(), "uid": os.getuid(), "preload_s": time.monotonic() - t0,
                 "errors": errors, "python": sys.version.split()[0], "executable": sys.executable})
    worker.loop()


if __name__ == "__main__":
    main()
