"""The warm sandbox pool: long-lived workers, one jail each, a forked child per evaluation.

The engine process (this module) is the trusted side. It talks to each worker through a
:class:`~reasearch.engine._handle.WorkerHandle` (a pair of pipes carrying the framed, pickle-free
protocol of :mod:`reasearch.engine._wire`), measures wall time itself around each request, and
decides every status from what was observed, with the pure functions of
:mod:`reasearch.engine._verdict` (see there for the rules). If a worker does not answer within a
request's wall limit plus a grace period, this side kills the worker's whole jail, respawns it, and
reports ``TIMEOUT``.

A worker that dies (for instance because a candidate killed it) is respawned; the request it was
serving ends as ``CRASH`` and the next request is served normally. A worker that retires (its
clean-up failed, or its scratch filesystem is short of space) is replaced before the request it
refused, which then runs on the fresh worker. Engine faults raise
:class:`~reasearch.errors.SandboxError` with their traceback; nothing is retried blindly.

Trust: the engine trusts the worker's report (the worker is engine code inside the jail, shielded
from its children by a second uid where one can be mapped), never the child's: the child only
produces the result frame, whose size the worker caps while reading and whose content the engine
decodes without pickle. Wall time is the engine's own clock around request and reply (a harness's
first import and ``warmup()`` in a worker is evaluator time and is not counted).
"""

from __future__ import annotations

import ast
import atexit
import concurrent.futures
import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reasearch.engine import _wire
from reasearch.engine._handle import WorkerDied, WorkerHandle, WorkerRetired, WorkerStuck
from reasearch.engine._procs import set_child_subreaper
from reasearch.engine._runtime import RUNTIME_PACKAGES
from reasearch.engine._verdict import child_result, classify, decode_value_frame
from reasearch.engine.config import DEFAULT_PRELOAD, SandboxConfig, SandboxMode
from reasearch.engine.isolation import make_launcher
from reasearch.engine.protocol import CallOutcome, Limits, RunOutcome, RunRequest, Status
from reasearch.errors import ConfigError, SandboxError

__all__ = ["DEFAULT_PRELOAD", "PoolSession", "SandboxConfig", "SandboxMode", "SandboxPool", "close_default_pool",
           "default_pool", "fit_profile"]


def _limits_dict(limits: Limits) -> dict[str, Any]:
    return {
        "wall_s": float(limits.wall_s),
        "cpu_s": float(limits.effective_cpu_s()),
        "memory_mb": int(limits.memory_mb),
        "nproc": int(limits.nproc),
        "fsize_mb": int(limits.fsize_mb),
        "nofile": int(limits.nofile),
        "output_bytes": int(limits.output_bytes),
        "result_bytes": int(limits.result_bytes),
    }


def _check_request(request: RunRequest) -> None:
    if not isinstance(request, RunRequest):
        raise TypeError(f"expected a RunRequest, got {type(request).__name__}")
    entry = [request.entry] if isinstance(request.entry, str) else list(request.entry)
    if not entry or not all(isinstance(e, str) and e.isidentifier() for e in entry):
        raise ConfigError(f"RunRequest.entry must name Python functions; got {request.entry!r}")
    if request.harness is not None and (":" not in request.harness):
        raise ConfigError(f"RunRequest.harness must look like 'package.module:function'; got {request.harness!r}")
    if request.preload is not None and (isinstance(request.preload, str) or not all(
            isinstance(m, str) and m and all(part.isidentifier() for part in m.split(".")) for m in request.preload)):
        raise ConfigError(f"RunRequest.preload must be a sequence of module names or None; got {request.preload!r}")
    lim = request.limits
    if not (lim.wall_s > 0 and lim.effective_cpu_s() > 0 and lim.memory_mb > 0 and lim.nproc > 0
            and lim.nofile >= 8 and lim.output_bytes >= 0 and lim.result_bytes > 0):
        raise ConfigError(f"RunRequest.limits out of range: {lim}")


def _ns_as_s(value: Any) -> float | None:
    """A worker's CPU figure (non-negative int ns) in seconds; None when absent or malformed."""
    return value / 1e9 if type(value) is int and value >= 0 else None


class PoolSession:
    """A candidate kept alive in one worker for many timed calls (see ``SandboxSession``).

    The worker is reserved for the session's lifetime; :meth:`close` releases it. Each
    :meth:`call`'s ``wall_s`` is measured by the engine around request and response.
    """

    def __init__(self, pool: SandboxPool, worker: WorkerHandle, request: RunRequest) -> None:
        self._pool = pool
        self._worker = worker
        self._request = request
        self._t0 = time.monotonic()
        self._final: RunOutcome | None = None
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self._final is not None

    def _end(self, outcome: RunOutcome) -> RunOutcome:
        self._final = outcome
        self._pool._release(self._worker)
        return outcome

    def _open(self) -> RunOutcome | None:
        """Starts the child; returns a final outcome if it failed to load (the session is then closed)."""
        lim = self._request.limits
        try:
            head, blobs, self._t0 = self._pool._exchange(self._worker, "session", self._request, lim.wall_s)
        except _Failed as exc:
            return self._end(exc.outcome)
        if head.get("kind") == "session_ready":
            return None
        return self._end(classify(head, blobs, lim, time.monotonic() - self._t0, self._pool.mode))

    def call(self, payload: Mapping[str, Any], *, timeout_s: float | None = None) -> CallOutcome:
        """Sends one payload; the child answers ``harness(entry_fn, payload)``.

        Args:
            payload: plain data (JSON types and NumPy arrays).
            timeout_s: wall limit of this call; default the request's ``limits.wall_s``. A call past
                it kills the child: the outcome is ``TIMEOUT`` and the session is over.

        Returns:
            A :class:`CallOutcome`; after the session ended every call answers ``CRASH``.
        """
        with self._lock:
            if self._final is not None:
                return CallOutcome(Status.CRASH, None, 0.0, error=f"session is over ({self._final.status}: "
                                   f"{self._final.error or 'closed'})")
            limit = float(timeout_s if timeout_s is not None else self._request.limits.wall_s)
            t0 = time.perf_counter()
            try:
                head, blobs, _ = self._pool._exchange(self._worker, "call", payload, limit)
            except _Failed as exc:
                self._end(exc.outcome)
                return CallOutcome(exc.outcome.status, None, time.perf_counter() - t0, error=exc.outcome.error)
            wall = time.perf_counter() - t0
            if head.get("kind") == "call_done":
                kind, value, err = child_result(head, blobs)
                cpu_s, cpu_before_s = _ns_as_s(head.get("cpu_ns")), _ns_as_s(head.get("cpu_before_ns"))
                if kind == "ok":
                    return CallOutcome(Status.OK, value, wall, cpu_s=cpu_s, cpu_before_s=cpu_before_s)
                return CallOutcome(Status.OOM if kind == "oom" else Status.CRASH, None, wall, error=err,
                                   cpu_s=cpu_s, cpu_before_s=cpu_before_s)
            final = classify(head, blobs, self._request.limits, time.monotonic() - self._t0, self._pool.mode)
            if head.get("killed") == "wall":
                final = RunOutcome(Status.TIMEOUT, None, final.wall_s, final.cpu_s, final.stdout, final.stderr,
                                   f"call killed at its wall-time limit of {limit:g} s", final.exit_code,
                                   final.signal, final.sandbox_mode)
            self._end(final)
            return CallOutcome(final.status, None, wall, error=final.error)

    def close(self) -> RunOutcome:
        """Stops the child and releases the worker; returns the session's outcome (``OK`` if it was healthy)."""
        with self._lock:
            if self._final is not None:
                return self._final
            if self._pool.closed:  # its worker was killed with the pool
                self._final = RunOutcome(Status.CRASH, None, time.monotonic() - self._t0, 0.0,
                                         error="the pool was closed while this session was open",
                                         sandbox_mode=self._pool.mode)
                return self._final
            try:
                head, blobs, _ = self._pool._exchange(self._worker, "close", None, 1.0)
            except _Failed as exc:
                return self._end(exc.outcome)
            out = classify(head, blobs, self._request.limits, time.monotonic() - self._t0, self._pool.mode)
            if out.status is Status.CRASH and out.exit_code == 0 and out.signal is None:
                out = RunOutcome(Status.OK, None, out.wall_s, out.cpu_s, out.stdout, out.stderr, "", 0, None,
                                 out.sandbox_mode)
            elif out.signal == signal.SIGKILL and out.status is Status.OOM:
                out = RunOutcome(Status.OK, None, out.wall_s, out.cpu_s, out.stdout, out.stderr, "", None,
                                 out.signal, out.sandbox_mode)  # the close itself killed it
            return self._end(dataclasses.replace(out, descendants_cpu_s=_ns_as_s(head.get("descendants_cpu_ns"))))

    def __enter__(self) -> PoolSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten session must not hold its worker forever
        if getattr(self, "_final", True) is None:
            try:
                self.close()
            except Exception:
                pass


_ARRAY_SCAN_NODES = 4096  # payload nodes looked at for NumPy arrays; a larger payload gets NumPy unscanned
_QUICK_SCAN_MIN = 4 << 10  # shorter texts are parsed whole (a few hundred us at most) and their answer kept
_FIT_SCAN_CAP = 4 << 20  # sources larger than this (bytes) get the whole preload, unscanned
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Names through which code imports what its import statements do not show.
_DYNAMIC = frozenset({"__import__", "import_module", "exec", "eval", "run_module", "run_path", "find_spec",
                      "spec_from_file_location", "module_from_spec", "load_module", "reload"})


_DYNAMIC_WORD = re.compile(r"\b(?:" + "|".join(sorted(_DYNAMIC)) + r")\b")
_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")  # where statements nest (never in expressions)
_TOPS_CACHE: dict[str, frozenset[str]] = {}
_TOPS_LOCK = threading.Lock()
_TOPS_CACHE_MAX, _TOPS_CACHE_TEXT = 256, 64 << 10  # entries; longest text kept (bytes): at most 16 MiB


def _imported_tops(text: str) -> frozenset[str]:
    """Top-level package names a source imports, from its syntax tree (never executed).

    Where the tree cannot tell (the source does not parse, or it imports through ``__import__``,
    ``importlib``, ``exec`` and the like), every word of the text counts instead: a larger image is
    slower, never wrong.

    A text holding neither ``import`` nor one of those names is not parsed (the caller waits for
    this, on every request): it has no import statement and no dynamic import that the tree would
    show (a text that does not parse cannot import anything either). Where none of those names is a
    word of the text, only statement blocks are walked (an import is a statement; the expressions,
    most of the tree, cannot hold one). Answers for texts up to 64 KiB are kept (the last 256): the
    same program is often evaluated again.
    """
    got = _TOPS_CACHE.get(text)
    if got is not None:
        return got
    got = frozenset(_scan_imports(text))
    if len(text) <= _TOPS_CACHE_TEXT:
        with _TOPS_LOCK:  # callers of a pool run on many threads
            if len(_TOPS_CACHE) >= _TOPS_CACHE_MAX:
                _TOPS_CACHE.pop(next(iter(_TOPS_CACHE)), None)  # the oldest (dicts keep insertion order)
            _TOPS_CACHE[text] = got
    return got


def _word_at(text: str, i: int, n: int) -> bool:
    """True when ``text[i:i+n]`` is a whole word (an ASCII identifier not glued to another)."""
    before = text[i - 1] if i else " "
    after = text[i + n] if i + n < len(text) else " "
    return not (before.isalnum() or before == "_" or after.isalnum() or after == "_")


def _has_word(text: str, word: str) -> bool:
    i = text.find(word)
    while i >= 0:
        if _word_at(text, i, len(word)):
            return True
        i = text.find(word, i + 1)
    return False


def _quick_tops(text: str, wanted: set[str]) -> set[str] | None:
    """Which of ``wanted`` (top-level names) an ASCII source imports, in time that hardly grows with its
    size; None where this cannot tell cheaply (the caller then parses the whole text).

    Only the lines that hold one of the wanted names as a word and the text ``import`` are parsed,
    each on its own: an import statement names its module on the line of its ``import`` or ``from``
    keyword unless a backslash continues the line above, and a line that holds one parses alone as
    statements whose imports are exactly its own. A wanted name on a line after one ending in a
    backslash, or a line that does not parse alone (a parenthesised ``from x import (``, a statement
    after ``else:``, the tail of a string), sends the whole text to the full scan, as do non-ASCII
    text (identifiers are NFKC-normalised) and any dynamic-import name.
    So it never finds less than :func:`_scan_imports` would among ``wanted``.
    """
    if not text.isascii():
        return None
    if any(w in text and _has_word(text, w) for w in _DYNAMIC):
        return None
    if "import" not in text:
        return set()
    if "\r" in text:  # the tokenizer's other line ends, as one (a lone CR ends a line too)
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    found: set[str] = set()
    for name in wanted:
        i = text.find(name)
        while i >= 0:
            if _word_at(text, i, len(name)):
                start = text.rfind("\n", 0, i) + 1
                end = text.find("\n", i)
                end = len(text) if end < 0 else end
                if start >= 2 and text[start - 2] == "\\":
                    return None  # maybe continued from the line above: parse the whole text
                line = text[start:end]
                if "import" in line:
                    try:
                        tree = compile(line.strip(), "<line>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
                    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
                        return None
                    for node in ast.walk(tree):
                        if isinstance(node, ast.Import):
                            found.update(t for t in (a.name.partition(".")[0] for a in node.names) if t in wanted)
                        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                            if node.module.partition(".")[0] in wanted:
                                found.add(node.module.partition(".")[0])
                i = end
            i = text.find(name, i + 1)
    return found


def _scan_imports(text: str) -> set[str]:
    dynamic = _DYNAMIC_WORD.search(text) is not None
    if "import" not in text and not dynamic:
        return set()
    try:
        tree = compile(text, "<candidate>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return set(_WORD.findall(text))
    tops: set[str] = set()
    if dynamic:
        nodes: Any = ast.walk(tree)  # iterative: a deep tree cannot overflow the stack here
    else:
        nodes = _statements(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            tops.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                tops.add(node.module.partition(".")[0])
        elif dynamic and ((isinstance(node, ast.Name) and node.id in _DYNAMIC) or (
                isinstance(node, ast.Attribute) and node.attr in _DYNAMIC)):
            return set(_WORD.findall(text))
    return tops


def _statements(tree: ast.AST) -> Any:
    """Every statement of ``tree`` (and the handler and case nodes that hold statements), iteratively."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for field in _BLOCKS:
            block = getattr(node, field, None)
            if block:
                stack.extend(block)


_SCALARS = frozenset({int, float, bool, str, type(None), bytes})


def _carries_arrays(payload: Any) -> bool:
    """True when ``payload`` holds a NumPy array or scalar (the child must load NumPy to decode it),
    or is too large to tell within :data:`_ARRAY_SCAN_NODES` containers (then NumPy is assumed).

    A list or tuple of plain scalars (a grid row, a schedule) is checked in one pass at C speed."""
    np = sys.modules.get("numpy")
    if np is None:  # never loaded here: no array can be in the payload
        return False
    stack, seen = [payload], 0
    while stack:
        obj = stack.pop()
        seen += 1
        if seen > _ARRAY_SCAN_NODES:
            return True
        if isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            if not set(map(type, obj)) <= _SCALARS:
                stack.extend(obj)
        elif isinstance(obj, (np.ndarray, np.generic)):
            return True
    return False


def fit_profile(request: RunRequest, preload: Sequence[str]) -> tuple[str, ...]:
    """The modules of ``preload`` a request's candidate imports (sorted).

    Read from the import statements of its source and of its ``.py`` files (parsed, never run);
    a name in a comment or a string does not count. Code that imports dynamically, or does not
    parse, counts every word it holds, and oversized sources get the whole ``preload``: a larger
    image is slower, never wrong, and whatever a candidate imports beyond its image the child
    imports on the candidate's clock. A payload holding NumPy arrays adds ``numpy`` (when it is in
    ``preload``): the child decodes them before the candidate's code runs. A candidate that
    imports nothing of ``preload`` gets the empty image, a bare interpreter with the engine.
    """
    texts = [request.source] + [bytes(v).decode("utf-8", "replace") for k, v in request.files.items()
                                 if isinstance(k, str) and k.endswith(".py") and isinstance(v, (bytes, bytearray))]
    if sum(len(t) for t in texts) > _FIT_SCAN_CAP:
        return tuple(sorted(set(preload)))
    tops: set[str] = set()
    wanted = {m.partition(".")[0] for m in preload}
    for text in texts:
        # The cheap scan first: a new large candidate (an ARC solver with its DSL) is not parsed whole on
        # the trusted side on every request; it finds at least what the full scan would among `wanted`.
        quick = _quick_tops(text, wanted) if len(text) > _QUICK_SCAN_MIN else None
        tops |= quick if quick is not None else _imported_tops(text)
    if "numpy" not in tops and _carries_arrays(request.payload):
        tops.add("numpy")
    return tuple(sorted({m for m in preload if m.partition(".")[0] in tops}))


def _collect_trace(trace: dict[str, int], head: dict[str, Any], blobs: list[memoryview]) -> None:
    """Adds the worker's and the child's stamps of a traced reply to ``trace`` (ints only; never raises)."""
    got = head.get("trace")
    parts: list[Any] = []
    if isinstance(got, dict):
        parts += [got.get("req"), got.get("prev")]
    try:
        child = decode_value_frame(blobs, head)
    except Exception:  # a child's bytes: display data only, never an error
        child = None
    if child is not None and isinstance(child[0], dict):
        parts.append(child[0].get("t"))
    for part in parts:
        if isinstance(part, dict):
            trace.update({k: v for k, v in part.items()
                          if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)})


class _Failed(Exception):
    """A request ended without a normal reply (worker stuck or died); carries the outcome to return."""

    def __init__(self, outcome: RunOutcome) -> None:
        super().__init__(outcome.error)
        self.outcome = outcome


class SandboxPool:
    """A pool of warm sandbox workers (thread-safe; implements ``SandboxRunner``).

    Args:
        config: a :class:`SandboxConfig`; default: auto mode, one worker per core.

    Raises:
        SandboxUnavailableError: ``mode="nsjail"`` was asked for and cannot run here.
        SandboxError: a worker failed to start.

    Example:
        >>> with SandboxPool(SandboxConfig(workers=2)) as pool:
        ...     out = pool.run(RunRequest(source="def run(x):\\n    return x + 1\\n", payload={"x": 1}))
        ...     out.value
        2
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        if not isinstance(self.config, SandboxConfig):
            raise ConfigError(f"config must be a SandboxConfig, not {type(self.config).__name__}")
        set_child_subreaper()
        self._tmp = Path(tempfile.mkdtemp(prefix="reasearch-pool-"))
        os.chmod(self._tmp, 0o711)
        try:
            self._launcher = make_launcher(self.config, self._tmp)
        except BaseException:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise
        self._closed = False
        self._restarts = 0
        self._switches = 0
        self._last_switch = float("-inf")
        self._background: set[threading.Thread] = set()  # workers being replaced for another image
        self._starting: dict[WorkerHandle, tuple[str, ...]] = {}  # cold slots started ahead (prestart)
        self._lock = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        self._idle: list[WorkerHandle] = []  # least recently released first
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        # Modules a profile may name: what the jail's runtime holds (see _runtime.build_runtime).
        self._importable = ({"reasearch"} | set(RUNTIME_PACKAGES) | set(self.config.runtime_packages)
                            | {m.partition(".")[0] for m in self.config.preload})
        # Workers are started (and restarted, and replaced for another image) by this one thread,
        # which lives as long as the pool: each worker dies with the thread that started it.
        self._spawner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sandbox-spawn")
        self._workers = [WorkerHandle(i, self._launcher, self.config, self._tmp, self._count_restart,
                                      spawn=self._spawn)
                         for i in range(self.config.n_workers)]
        if self.config.lazy_start:
            for w in self._workers:
                w.cold = True  # started by _acquire, on first need, with the image that need asks for
        try:
            for w in self._workers:
                if not w.cold:
                    w.start()
            for w in self._workers:
                if not w.cold:
                    w.wait_ready(self.config.start_timeout_s)
        except BaseException:
            self.close()
            raise
        self._idle.extend(self._workers)

    def _spawn(self, popen: Any) -> Any:
        return self._spawner.submit(popen).result()

    def _count_restart(self) -> None:
        self._restarts += 1

    @property
    def mode(self) -> str:
        """``"nsjail"`` or ``"process"``."""
        return self._launcher.mode

    @property
    def isolation(self) -> str:
        """One line: the mode and what it does (and does not) isolate."""
        return self._launcher.describe()

    @property
    def workers(self) -> int:
        return len(self._workers)

    @property
    def restarts(self) -> int:
        """How many times a worker was respawned (it died, or did not answer and was killed)."""
        return self._restarts

    @property
    def profile_switches(self) -> int:
        """How many times an idle worker was replaced by one with another warm image (profile)."""
        return self._switches

    def profile_of(self, request: RunRequest) -> tuple[str, ...]:
        """The warm image (sorted module names) that serves ``request``.

        ``request.preload`` when given; otherwise, with ``config.fit_images``, the modules of
        ``config.preload`` that the candidate's source (and its ``.py`` files) imports, plus NumPy
        when its payload carries arrays (see :func:`fit_profile`); without it, ``config.preload``.

        Raises:
            ConfigError: the request names a module outside the pool's runtime (the jail could not
                import it).
        """
        if request.preload is None:
            if not self.config.fit_images:
                return tuple(sorted(set(self.config.preload)))
            return fit_profile(request, self.config.preload)
        profile = tuple(sorted(set(request.preload)))
        outside = [m for m in profile if m.partition(".")[0] not in self._importable]
        if outside:
            raise ConfigError(f"RunRequest.preload names modules outside this pool's runtime: {outside}; "
                              "add their packages to SandboxConfig.runtime_packages or preload")
        return profile

    def profiles(self) -> list[tuple[str, ...]]:
        """The warm image of each worker, by slot."""
        return [w.profile for w in self._workers]

    @property
    def separate_child_uid(self) -> bool:
        """True when each child runs as a uid other than its worker's (it cannot signal the worker)."""
        return self._launcher.separate_child_uid

    def ping(self) -> list[dict[str, Any]]:
        """Asks every worker for its state (waits for busy ones): the pids of its pre-forked child and
        of its zygote (None without one), as seen inside the worker's PID namespace. Used by tests
        that look for stray processes."""
        states = []
        taken = [self._acquire() for _ in self._workers]
        try:
            for w in taken:
                w.send({"op": "ping"})
                try:
                    head, _, _ = w.reply(time.monotonic() + self.config.grace_s)
                except WorkerRetired:
                    w.restart()
                    w.send({"op": "ping"})
                    head, _, _ = w.reply(time.monotonic() + self.config.grace_s)
                states.append({"worker": w.index, "pid": w.proc.pid if w.proc else None,
                               "idle_child": head.get("idle_child"), "zygote": head.get("zygote")})
        finally:
            for w in taken:
                self._release(w)
        return sorted(states, key=lambda d: d["worker"])

    def worker_info(self) -> list[dict[str, Any]]:
        """What each worker reported at start (pid, uid, interpreter, preload seconds)."""
        return [dict(w.info) for w in self._workers]

    # -- scheduling
    def _acquire(self, profile: tuple[str, ...] | None = None) -> WorkerHandle:
        """A free worker whose warm image serves ``profile`` (None: any free worker).

        In order: an idle worker with exactly that image; else, while the last image switch is
        less than ``config.switch_interval_s`` old, an idle worker whose image holds that one (it
        serves the request correctly, only its fork is slower); else the least recently used idle
        worker is replaced (its jail killed) by a fresh one with that image (with that image and
        its old one together, when the last switch is that recent: a workload that keeps changing
        images grows a worker that serves them all, instead of replacing workers on every request). The pool never holds
        more than ``config.n_workers`` workers, whatever mix of images it serves. With no worker
        idle, it waits.

        Spreading: when the worker taken is the only one with its image, and another worker has sat
        idle with another image for ``switch_interval_s`` (and no switch happened meanwhile), that
        one is replaced by a worker with this image in the background: a steady stream of one
        image, even from one caller, ends up served by every worker, each forking its next child
        while the others serve.
        """
        if self._closed:
            raise SandboxError("this SandboxPool is closed; create a new one (or use default_pool())")
        with self._cond:
            while True:
                if self._closed:
                    raise SandboxError("this SandboxPool is closed; create a new one (or use default_pool())")
                # First in, first out: the worker released longest ago has had the most time to
                # tear down its last child and fork the next one (it does that after its reply).
                pick = next((w for w in self._idle if not w.cold and (profile is None or w.profile == profile)),
                            None)
                if pick is None and profile is not None and profile in self._starting.values():
                    self._cond.wait(0.5)  # a slot is being started ahead with this very image: it serves
                    continue
                switch = False
                target = profile
                cold = None if pick is not None else next((w for w in self._idle if w.cold), None)
                if cold is not None:  # a slot never started: start it with this image (nothing warm is lost)
                    pick = cold
                elif pick is None and self._idle:
                    assert profile is not None
                    recent = time.monotonic() - self._last_switch < self.config.switch_interval_s
                    wanted = set(profile)
                    pick = next((w for w in self._idle if wanted <= set(w.profile)), None) if recent else None
                    if pick is None:
                        pick, switch = self._idle[0], True
                        self._last_switch = time.monotonic()
                        self._switches += 1
                        if recent:  # images churn: grow this one to serve both (a superset serves next time)
                            target = tuple(sorted(wanted | set(pick.profile)))
                if pick is not None:
                    self._idle.remove(pick)
                    spread = None if switch or cold is not None or profile is None else self._spread_target(profile)
                    break
                self._cond.wait(0.5)
        if spread is not None:
            assert profile is not None
            t = threading.Thread(target=self._switch_in_background, args=(spread, profile),
                                 name="sandbox-spread", daemon=True)
            self._background.add(t)
            t.start()
        try:
            if cold is not None:
                pick.switch_profile(tuple(sorted(set(self.config.preload))) if profile is None else profile)
            elif switch:
                assert target is not None
                pick.switch_profile(target)
            elif not pick.alive():
                pick.restart()
        except BaseException:
            self._release(pick)  # a worker that failed to start is restarted by its next user
            raise
        self._launcher.keepalive()
        return pick

    def prestart(self, request: RunRequest) -> bool:
        """Starts, in the background, a never-started slot of a lazy pool (``config.lazy_start``) with
        the image that will serve ``request`` (:meth:`profile_of`), so that its jail starts while the
        caller still prepares (``reasearch eval`` imports the task's module meanwhile). A request for
        that image waits for it rather than starting another slot. Returns False (and starts nothing)
        when no slot is cold, or a worker with that image is already up or on its way.

        Raises:
            ConfigError: as :meth:`profile_of`.
        """
        profile = self.profile_of(request)
        with self._cond:
            if self._closed or any(w.profile == profile and not w.cold for w in self._workers) \
                    or profile in self._starting.values():
                return False
            cold = next((w for w in self._idle if w.cold), None)
            if cold is None:
                return False
            self._idle.remove(cold)
            self._starting[cold] = profile
            t = threading.Thread(target=self._start_ahead, args=(cold, profile), name="sandbox-prestart", daemon=True)
            self._background.add(t)
        t.start()
        return True

    def _start_ahead(self, w: WorkerHandle, profile: tuple[str, ...]) -> None:
        try:
            if not self._closed:
                w.switch_profile(profile)
        except BaseException:
            pass  # it failed to start: it stays cold, and the request that needs it starts it (and reports why)
        finally:
            with self._cond:
                self._starting.pop(w, None)
                self._background.discard(threading.current_thread())
            self._release(w)

    def _spread_target(self, profile: tuple[str, ...]) -> WorkerHandle | None:
        """An idle worker to give ``profile`` in the background (see :meth:`_acquire`), taken off
        the idle list; None when none qualifies. Call with ``self._cond`` held."""
        now = time.monotonic()
        interval = self.config.switch_interval_s
        if now - self._last_switch < interval or sum(w.profile == profile and not w.cold for w in self._workers) != 1:
            return None
        other = next((w for w in self._idle if w.profile != profile and now - w.last_used >= interval), None)
        if other is not None:
            self._idle.remove(other)
            self._last_switch = now
            self._switches += 1
        return other

    def _switch_in_background(self, w: WorkerHandle, profile: tuple[str, ...]) -> None:
        try:
            if not self._closed:
                w.switch_profile(profile)
        except BaseException:
            pass  # it failed to start: its next user restarts it (on the pool's own image)
        finally:
            self._release(w)
            with self._cond:
                self._background.discard(threading.current_thread())

    def _release(self, w: WorkerHandle) -> None:
        w.last_used = time.monotonic()
        with self._cond:
            if w not in self._idle:
                self._idle.append(w)
            self._cond.notify()

    def _exchange(self, w: WorkerHandle, op: str, obj: Any, wall_s: float,
                  trace: dict[str, int] | None = None) -> tuple[dict[str, Any], list[memoryview], float]:
        """One request/reply with worker ``w`` -> (reply header, blobs, start of the candidate's clock).

        Worker death or silence becomes a :class:`_Failed` (after the worker was respawned)."""
        if self._closed:
            raise SandboxError("this SandboxPool is closed; create a new one (or use default_pool())")
        t0 = time.monotonic()
        try:
            for attempt in range(2):
                if op in ("run", "session"):
                    req: RunRequest = obj
                    header: dict[str, Any] = {"op": op, "source": req.source,
                              "entry": [req.entry] if isinstance(req.entry, str) else list(req.entry),
                              "harness": req.harness, "limits": _limits_dict(req.limits)}
                    if trace is not None:
                        header["trace"] = True
                        trace["e_worker"] = w.index
                        trace["e_start"] = time.monotonic_ns()
                    w.send(header, {"payload": dict(req.payload), "files": dict(req.files)}, trace)
                elif op == "call":
                    w.send({"op": "call", "timeout_s": wall_s}, dict(obj))
                else:
                    w.send({"op": op})
                try:
                    return w.reply(t0 + wall_s + self.config.grace_s, wall_s, t0)
                except WorkerRetired as exc:
                    # Only an idle worker retires (never one holding a session): the request never
                    # started, so it goes once to the fresh worker (its clock restarts there).
                    if attempt or op not in ("run", "session", "ping"):
                        raise SandboxError(f"sandbox worker {w.index} retired twice in a row: {exc}") from None
                    w.restart()
                    t0 = time.monotonic()
            raise AssertionError("unreachable")
        except _wire.NotPlainDataError as exc:
            raise ConfigError(f"request payload is not plain data (JSON types and NumPy arrays): {exc}") from None
        except WorkerStuck:
            waited = time.monotonic() - t0
            tail = w.log_tail(1000)
            w.kill()
            w.restart()
            raise _Failed(RunOutcome(Status.TIMEOUT, None, waited, 0.0,
                                     error=f"the sandbox worker did not answer within {wall_s:g} s + "
                                     f"{self.config.grace_s:g} s grace; its jail was killed and respawned. "
                                     f"Worker log tail:\n{tail}", sandbox_mode=self.mode)) from None
        except WorkerDied:
            waited = time.monotonic() - t0
            try:
                code = w.proc.wait(timeout=1.0) if w.proc else None
            except subprocess.TimeoutExpired:
                code = None
            w.kill()
            w.restart()
            raise _Failed(RunOutcome(Status.CRASH, None, waited, 0.0,
                                     error=f"the sandbox worker died during the request (exit status {code}); "
                                     "it was respawned. A candidate that kills its worker ends here.",
                                     exit_code=code, sandbox_mode=self.mode)) from None
        except SandboxError:
            raise  # the worker reported an engine error and is still in step with us
        except BaseException:
            # Interrupted mid-request (KeyboardInterrupt, a bug): the worker's next reply would answer
            # the wrong request, so it is killed; the next _acquire() starts a fresh one.
            w.kill()
            raise

    # -- the SandboxRunner API
    def run(self, request: RunRequest) -> RunOutcome:
        """Runs one request in a free worker (blocks; thread-safe).

        The worker is one whose warm image is the request's profile (:meth:`profile_of`).

        Returns:
            A :class:`RunOutcome` whose status the engine decided from what it observed.

        Raises:
            ConfigError: the request is malformed (bad entry, harness, preload or limits, non-plain payload).
            SandboxError: the engine failed (a harness that cannot be imported, a worker that cannot
                be started); candidate failures never raise.
        """
        return self._run(request, None)

    def run_traced(self, request: RunRequest) -> tuple[RunOutcome, dict[str, int]]:
        """:meth:`run`, plus monotonic ns stamps of each step (benchmarks only; see ``reasearch bench``).

        Stamps: ``e_*`` taken here (``e_worker``: the worker's slot), ``w_*`` by the worker
        (``w_cpu_ns``: its own CPU clock), ``c_*`` by the child (only on an ``OK`` outcome; a
        candidate could forge them, so they are for display only), ``p_*`` by the worker after its
        previous reply (teardown of the previous child, the next fork, clean-up), ``child_cpu_*``
        and ``p_child_cpu_ns``: the child's CPU ns before its request, at the reply, and over its
        whole life (the previous child's, exit included).
        """
        trace: dict[str, int] = {}
        return self._run(request, trace), trace

    def _run(self, request: RunRequest, trace: dict[str, int] | None) -> RunOutcome:
        _check_request(request)
        w = self._acquire(self.profile_of(request))
        try:
            try:
                head, blobs, t0 = self._exchange(w, "run", request, request.limits.wall_s, trace)
            except _Failed as exc:
                return exc.outcome
            if trace is not None:
                trace["e_recv"] = time.monotonic_ns()
            out = classify(head, blobs, request.limits, time.monotonic() - t0, self.mode)
            if trace is not None:
                trace["e_done"] = time.monotonic_ns()
                _collect_trace(trace, head, blobs)
            return out
        finally:
            self._release(w)

    def fork_floor(self, n: int = 200, profile: tuple[str, ...] | None = None) -> list[int]:
        """ns per bare fork + ``_exit(0)`` + reap of a worker's warm image, measured inside its jail
        (benchmarks only: the floor under any evaluation served by that image)."""
        w = self._acquire(self.profile_of(RunRequest(source="", preload=profile)))
        try:
            w.send({"op": "floor", "n": int(n)})
            head, _, _ = w.reply(time.monotonic() + 60.0 + self.config.grace_s)
            return [int(x) for x in head.get("fork_exit_ns") or []]
        finally:
            self._release(w)

    def submit(self, request: RunRequest) -> concurrent.futures.Future[RunOutcome]:
        """Runs a request on the pool's own threads; returns a future of its :class:`RunOutcome`."""
        with self._lock:
            if self._closed:
                raise SandboxError("this SandboxPool is closed; create a new one (or use default_pool())")
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(self.workers, thread_name_prefix="sandbox")
            return self._executor.submit(self.run, request)

    def session(self, request: RunRequest) -> PoolSession:
        """Starts a session: the candidate is imported once, then served call by call.

        The worker stays reserved until the session is closed (use it as a context manager). If the
        candidate fails to load, the returned session is already closed and :meth:`PoolSession.close`
        returns the failure; every :meth:`PoolSession.call` then answers ``CRASH``.
        """
        _check_request(request)
        w = self._acquire(self.profile_of(request))
        sess = PoolSession(self, w, request)
        sess._open()
        return sess

    def close(self) -> None:
        """Stops every worker (killing their jails) and removes the pool's temporary files."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            ex, self._executor = self._executor, None
        with self._cond:
            self._cond.notify_all()  # waiters see the pool closed
            background = list(self._background)
        for t in background:  # a worker being started in the background is killed below, once up
            t.join(self.config.start_timeout_s)
        if ex is not None:
            ex.shutdown(wait=True, cancel_futures=True)
        for w in self._workers:
            w.kill()
        self._spawner.shutdown(wait=True)
        self._launcher.cleanup()
        shutil.rmtree(self._tmp, ignore_errors=True)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SandboxPool(mode={self.mode!r}, workers={self.workers}, closed={self._closed})"


_default: SandboxPool | None = None
_default_lock = threading.Lock()
_atexit_registered = False


def default_pool() -> SandboxPool:
    """The process-wide pool: started on first use, closed at exit, recreated if it was closed."""
    global _default, _atexit_registered
    with _default_lock:
        if _default is None or _default.closed:
            _default = SandboxPool(SandboxConfig(lazy_start=True))  # a process may evaluate only once
            if not _atexit_registered:
                atexit.register(close_default_pool)
                _atexit_registered = True
        return _default


def close_default_pool() -> None:
    """Closes the process-wide pool if it is running (a later :func:`default_pool` starts a new one)."""
    global _default
    with _default_lock:
        pool, _default = _default, None
    if pool is not None:
        pool.close()

