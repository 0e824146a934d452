"""The forked child: the only process that runs candidate code.

It is forked ahead of its request, by the worker's zygote (which sets up the child's session,
descriptors and, where that is plain, its uid in C: ``_zygote.c``) or by the worker itself (see
:mod:`reasearch.engine._supervisor`; then it sets those up here). ``HOME``/``TMPDIR`` point at the
scratch folder the worker will most likely hand over (the worker built that folder's empty
candidate module before the fork). It walks the request path once on a dummy candidate while it
waits (so copy-on-write faults happen before the clock starts; back to back it skips that), and
blocks until the request arrives; then it applies the per-evaluation rlimits, imports the candidate
and calls it, and writes one result frame (or, in a session, one per call) to fd 3. Once a one-shot
result is out it drops to ``SCHED_IDLE`` (its exit, the teardown of a forked warm runtime, yields
to the next evaluation). It never returns into the worker's code: it always ``os._exit``s.
"""

from __future__ import annotations

import importlib
import marshal
import math
import os
import resource
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable
from importlib.machinery import ModuleSpec, SourceFileLoader
from types import ModuleType

from reasearch.engine import _wire
from reasearch.engine._privilege import PDEATH_KILL_ARGS as _PDEATH_ARGS
from reasearch.engine._privilege import PR_SET_PDEATHSIG, drop_to_uid, prctl
from reasearch.engine._privilege import libc_prctl as _libc_prctl

TYPE_CHECKING = False  # as typing's, without importing typing into the worker's image (see _pump.Child)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["PREWARM_SOURCE", "QUICKEN_ROUNDS", "REQUEST_CAP", "address_space", "child_main", "fresh_module",
           "quicken_request_path", "rehearse_harness", "set_scratch_env"]

_TRACEBACK_CHARS = 16_000
REQUEST_CAP = 1 << 34  # requests come from the trusted engine; this only guards against corruption
_OOM_FRAME = _wire.encode_frame({"kind": "oom"})  # built up front: there is no memory to build it later


def address_space() -> int:
    """Bytes of address space this process maps now (``/proc/self/statm``, two syscalls)."""
    fd = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return int(os.read(fd, 256).split()[0]) * os.sysconf("SC_PAGE_SIZE")
    finally:
        os.close(fd)


def _limit_values(limits: dict[str, Any], base: int) -> list[tuple[int, int, int]]:
    """Per-evaluation rlimits as ``(resource, soft, hard)``; the address-space limit is
    ``limits["memory_mb"]`` on top of ``base`` (the preloaded runtime, measured while the child
    waited for its request)."""
    as_bytes = base + int(limits["memory_mb"]) * (1 << 20)
    cpu = max(1, math.ceil(float(limits["cpu_s"])))
    fsize = int(limits["fsize_mb"]) * (1 << 20)
    return [
        (resource.RLIMIT_AS, as_bytes, as_bytes),
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_NPROC, int(limits["nproc"]), int(limits["nproc"])),
        (resource.RLIMIT_FSIZE, fsize, fsize),
        (resource.RLIMIT_NOFILE, int(limits["nofile"]), int(limits["nofile"])),
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_MSGQUEUE, 0, 0),  # no POSIX message queue can be created
    ]


def _set_limits(values: list[tuple[int, int, int]]) -> None:
    for res, soft, hard in values:
        resource.setrlimit(res, (soft, hard))


def _apply_limits(limits: dict[str, Any], base: int) -> None:
    """Per-evaluation rlimits (see :func:`_limit_values`)."""
    _set_limits(_limit_values(limits, base))


_ENV_DATA = getattr(os.environ, "_data", None)  # what ``os.environ`` keeps: encoded name -> encoded value
_FS_ENCODING = sys.getfilesystemencoding()


def set_scratch_env(scratch: str) -> None:
    """``HOME`` and ``TMPDIR`` of the candidate: its scratch folder.

    What ``os.environ[name] = scratch`` does (``putenv``, then the mapping's own record), without its
    Python layers: each is pages a freshly forked child writes."""
    if not isinstance(_ENV_DATA, dict):
        os.environ["HOME"] = os.environ["TMPDIR"] = scratch
        return
    value = scratch.encode(_FS_ENCODING, "surrogateescape")
    for name in (b"HOME", b"TMPDIR"):
        os.putenv(name, value)
        _ENV_DATA[name] = value


def fresh_module(path: str) -> Any:
    """A new, empty ``candidate`` module for the file at ``path``: what ``importlib.util``'s
    ``spec_from_file_location`` + ``module_from_spec`` make (name, spec, loader, ``__file__``,
    ``__cached__``), built directly (their generic path touches far more of the interpreter: each
    page it writes is a copy-on-write fault in a freshly forked child)."""
    loader = SourceFileLoader("candidate", path)
    spec = ModuleSpec("candidate", loader, origin=path)
    spec.has_location = True
    module = ModuleType("candidate")
    module.__spec__, module.__loader__, module.__file__, module.__package__ = spec, loader, path, ""
    module.__cached__ = spec.cached  # type: ignore[attr-defined]  # set by the import system; typeshed omits it
    return module


def _load_candidate(scratch: str, entry: list[str], source: str | None = None, module: Any = None,
                    code: bytes | None = None) -> Any:
    """Imports ``candidate.py`` from the scratch dir and returns the first entry point it defines.

    With ``source`` (the text the worker wrote to that file, sent along with the request) the module
    is compiled from it directly: the same module (name, ``__file__``, spec, tracebacks that show
    its lines) without the loader's stat, bytecode-cache and read calls. ``module``: an unused
    :func:`fresh_module` of that same file, made before the request came. ``code``: that source
    already compiled by the worker (marshalled; see ``ChildForks.compiled``), loaded instead.
    """
    path = f"{scratch}/candidate.py"  # scratch: an absolute path without a trailing slash
    sys.path.insert(0, scratch)
    if module is None or module.__file__ != path:
        module = fresh_module(path)
    sys.modules["candidate"] = module
    if code is not None:
        exec(marshal.loads(code), module.__dict__)
    elif source is None:
        module.__spec__.loader.exec_module(module)
    else:
        exec(compile(source, path, "exec", dont_inherit=True), module.__dict__)
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


def _result_frame(value: Any, stamps: dict[str, int] | None = None) -> bytes:
    """Encodes a value; anything that is not plain data becomes an error frame."""
    try:
        if stamps is not None:
            stamps["c_called"] = time.monotonic_ns()
            return _wire.encode_frame({"kind": "ok", "t": stamps}, value)
        return _wire.encode_frame({"kind": "ok"}, value)
    except _wire.NotPlainDataError as exc:
        return _error_frame("error", f"result is not plain data: {exc}")


def _guarded(thunk: Any, stamps: dict[str, int] | None = None) -> bytes:
    """Runs candidate code; returns the frame to send (value, OOM, or traceback).

    ``stamps`` (bench only): monotonic ns stamps of the child's steps, carried in the ``ok`` frame's
    header for the cost breakdown; the engine reads them only when it asked for stamps."""
    try:
        return _result_frame(thunk(), stamps)
    except MemoryError:
        return _OOM_FRAME
    except SystemExit as exc:  # sys.exit() without a result: leave with its code, the parent says CRASH
        sys.stdout.flush()
        sys.stderr.flush()
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        os._exit(code & 0xFF)
    except BaseException as exc:  # any exception of the candidate or harness: its traceback goes back
        return _error_frame("error", _format_exc(exc))


def _yield_cpu() -> None:
    """Puts this process last in line for the CPU (``SCHED_IDLE``) once its result is out: what is
    left (flushing, exit, the teardown of a forked copy of the warm runtime) yields to the next
    evaluation's critical path. Lowering one's own priority needs no privilege."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, _IDLE_PARAM)
    except OSError:
        pass


_IDLE_PARAM = os.sched_param(0)


def _flush_stdio() -> None:
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # a closed or broken pipe must not turn a result into a crash
        pass


PREWARM_SOURCE = "def run(x):\n    return {'x': x, 't': (1.5, None)}\n"
_PREWARM_LIMITS = {"memory_mb": 1, "cpu_s": 1.0, "fsize_mb": 1, "nproc": 1, "nofile": 8}
_PREWARM_FRAME = _wire.encode_frame(
    {"scratch": "", "entry": ["run"], "harness": None, "limits": {}}, {"payload": {"x": 1}}
)


def _request_waiting(timeout_s: float = 0.0) -> bool:
    """True once the worker has written the request (fd 4 is readable; EOF counts too), waiting up
    to ``timeout_s`` for it."""
    return bool(select.select([4], [], [], timeout_s)[0])


def _warm_up(prewarm_dir: str | None, rehearse: str | None, wait_s: float) -> bool:
    """The child's warm-up (:func:`_prewarm`, then :func:`_rehearse`) unless its request comes
    within ``wait_s`` (0: warm up at once, unless it is already there). True when it warmed up.

    The worker asks for a wait when its requests come back to back (``_supervisor.warm_delay``): the
    next request is then due within a few milliseconds, and a warm-up would only compete for the
    CPUs with the evaluation in flight, to take faults off a path that is CPU-bound anyway (A/B on
    2 vCPUs: 5-6% less CPU per trivial evaluation, p95 4-13% lower). After a pause the wait ends
    first and the child is warm when its request comes.
    """
    if _request_waiting(wait_s):
        return False
    _prewarm(prewarm_dir)
    _rehearse(rehearse)
    return True


def _prewarm(prewarm_dir: str | None) -> None:
    """Walks the request path once on a dummy candidate while the child waits for its request.

    Right after the fork every page is shared with the worker; the first write to one (Python
    touches reference counts everywhere) copies it. Doing that here, before the request arrives,
    takes ~300 page copies (over a millisecond) off each evaluation's critical path. It stops
    between its steps once the request is there: the request does not wait for the rest.
    """
    if prewarm_dir is None:
        return
    try:
        _walk_request_path(prewarm_dir, _request_waiting)
    except Exception:  # only a speed-up: never let it affect the evaluation
        pass


def _walk_request_path(prewarm_dir: str, stop: Callable[[], bool]) -> None:
    """One walk of the request path on the dummy candidate (decode, load, call, frame, limits),
    ending early between its steps once ``stop()`` is true. The limits set are the process's own,
    unchanged. Leaves ``sys.path`` and ``sys.modules`` as they were; raises what a step raises."""
    try:
        _, value = _wire.decode_frame(_PREWARM_FRAME[_wire.FRAME_LEN.size:])
        if stop():
            return
        fn = _load_candidate(prewarm_dir, ["run"], PREWARM_SOURCE)
        if stop():
            return
        _guarded(lambda: _call(fn, None, value["payload"]))
        if stop():
            return
        _set_limits([(res, *resource.getrlimit(res)) for res, _, _ in _limit_values(_PREWARM_LIMITS, 0)])
    finally:
        sys.modules.pop("candidate", None)
        if sys.path and sys.path[0] == prewarm_dir:
            sys.path.pop(0)


def _never() -> bool:
    return False


def _rehearse(harness: str | None) -> None:
    """Walks the harness's own path once (its ``rehearse()``: a built-in dummy candidate through the
    harness, the result framed and dropped) while the child waits for its request.

    ``harness`` is the one the worker's last request used, most likely the next one's too; the
    worker imported it before forking. Like :func:`_prewarm` it takes the copy-on-write faults of
    that path (NumPy's included) off the request's. A harness's ``rehearse()`` is trusted code on
    data of its own; whatever it seeds, every evaluation seeds again.
    """
    if not harness or _request_waiting():
        return
    rehearse_harness(sys.modules.get(harness.partition(":")[0]), 1)


QUICKEN_ROUNDS = 16
"""How many times the worker runs the child's request path, and a harness's rehearsal, before it forks:
past the 8 calls after which CPython 3.11 quickens a function. Measured against 100 rounds (circle
packing, stamped): the same child faults (684-690 against 696-698, from 771-778 without), and the
worker's own stayed at 292-302 per cycle where 100 rounds raised them to 312-319."""


def quicken_request_path(prewarm_dir: str | None, rounds: int = QUICKEN_ROUNDS) -> None:
    """Runs, in the worker, the path :func:`_prewarm` walks in each child, ``rounds`` times, once
    (before the first fork).

    CPython 3.11 rewrites a function's bytecode as it runs: its first calls count up to quickening,
    then each instruction specialises to the types it meets. Code first run in a freshly forked
    child does that there, in every child, and writes to its code objects (copy-on-write faults).
    Run here, every child inherits it done. This worker's own limits are set to what they are.
    """
    if prewarm_dir is None:
        return
    for _ in range(rounds):
        try:
            _walk_request_path(prewarm_dir, _never)
            address_space()
        except Exception:  # only a speed-up: never let it stop the worker
            return


def rehearse_harness(module: Any, rounds: int) -> None:
    """Runs a harness module's ``rehearse()`` ``rounds`` times, each result framed and dropped; stops
    at the first failure (it is only a speed-up). Once in each child (:func:`_rehearse`), and
    :data:`QUICKEN_ROUNDS` times in the worker right after importing the harness, so that its code is
    quickened before any child runs it (see :func:`quicken_request_path`). Whatever it seeds, every
    evaluation seeds again."""
    fn = getattr(module, "rehearse", None)
    if not callable(fn):
        return
    for _ in range(rounds):
        try:
            _result_frame(fn())
        except Exception:  # never let it affect the evaluation or stop the worker
            return


def child_main(child_uid: int | None, keep_read_search: bool, fds: dict[str, int] | None, prewarm_dir: str | None,
               bounding_dropped: bool = False, next_scratch: str | None = None, rehearse: str | None = None,
               ready_module: Any = None, warm_after_s: float = 0.0, *, env_scratch: str | None = None,
               base: int | None = None) -> None:
    """Runs in the forked child; never returns.

    ``ready_module``: an empty :func:`fresh_module` of ``next_scratch``'s ``candidate.py``, built by
    the worker before the fork (this child's copy is its own); used when the request names that folder.

    Forked by the zygote (``fds`` None), the child comes here with its session, death signal and
    descriptors set up already (``_zygote.c``), ``HOME``/``TMPDIR`` at ``env_scratch`` (set once in
    the zygote), and ``base``, the zygote's address space, as the runtime its memory limit is on top of.

    The child is forked ahead of its request (so a request does not wait for the fork): it sets up
    its session, descriptors and uid, then blocks on fd 4 until the worker sends the request. Only
    then does it apply the request's limits and run candidate code. In a session, later frames on
    fd 4 are call payloads; EOF ends the session.
    """
    code = 70
    started = time.monotonic_ns()
    try:
        if fds is not None:  # forked by the worker itself (no zygote): wire up here
            os.setsid()
            if _libc_prctl(*_PDEATH_ARGS) != 0:  # prebuilt arguments: no ctypes object made in the child
                prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # raises with the reason
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.dup2(fds["out"], 1)
            os.dup2(fds["err"], 2)
            os.dup2(fds["result"], 3)
            os.dup2(fds["req"], 4)
            os.closerange(5, 1 << 16)
        # SIGINT and SIGTERM are at their defaults already: the worker resets them before any fork
        # (Supervisor.reset_signals), and a fork keeps them.
        if child_uid is not None:
            drop_to_uid(child_uid, keep_read_search, bounding_dropped)
        if next_scratch is not None and next_scratch != env_scratch:  # the folder the worker will most
            set_scratch_env(next_scratch)  # likely hand over: set up ahead
            env_scratch = next_scratch
        set_up = time.monotonic_ns()
        warmed = _warm_up(prewarm_dir, rehearse, warm_after_s)
        if base is None:
            base = address_space()
        ready = time.monotonic_ns() if warmed else set_up  # a wait for the request is not set-up
        try:
            req, value = _wire.decode_frame(_wire.read_frame(4, REQUEST_CAP))
        except _wire.WireError:
            os._exit(0)  # discarded before use (the worker is closing or needs a fresh fork)
        stamps = ({"c_start": started, "c_ready": ready, "c_req": time.monotonic_ns(), "c_warmed": int(warmed)}
                  if req.get("stamps") else None)
        scratch = req["scratch"]
        os.chdir(scratch)
        if scratch != env_scratch:
            set_scratch_env(scratch)
        _apply_limits(req["limits"], base)
        entry_fn: Any = None

        def load() -> None:
            nonlocal entry_fn
            if stamps is not None:
                stamps["c_limits"] = time.monotonic_ns()
            source = req.get("source")
            code = value.get("code") if isinstance(value, dict) else None
            entry_fn = _load_candidate(scratch, list(req["entry"]), source if isinstance(source, str) else None,
                                       ready_module, code if isinstance(code, bytes) else None)
            if stamps is not None:
                stamps["c_loaded"] = time.monotonic_ns()

        harness = _resolve_harness(req.get("harness"))
        payload = value.get("payload") if isinstance(value, dict) else None
        if not req.get("session"):
            def load_and_call() -> object:
                load()
                return _call(entry_fn, harness, payload)

            frame = _guarded(load_and_call, stamps)
            _flush_stdio()  # output first: once the result is in, the worker stops reading
            _wire.write_all(3, frame)
            _yield_cpu()
        else:
            frame = _guarded(load)
            _wire.write_all(3, frame)
            head, _ = _wire.split_body(frame[_wire.FRAME_LEN.size:])
            if head.get("kind") == "ok":
                while True:
                    try:
                        body = _wire.read_frame(4, REQUEST_CAP)
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
