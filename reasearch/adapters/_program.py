"""Reading a program file another optimizer proposes, and evaluating it with a registered task.

Trust boundary: the file's contents are untrusted candidate source; only its text is read here
(size-capped, UTF-8), and it runs only in the task's sandbox. Tasks are built once per process.
"""

from __future__ import annotations

import atexit
import math
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reasearch.errors import ConfigError
from reasearch.evaluators.base import Task
from reasearch.evaluators.kinds import ProgramKind, task_kind
from reasearch.evaluators.result import EvalResult, Status

__all__ = ["MAX_PROGRAM_BYTES", "close_sandboxes", "evaluate_file", "numeric_metrics", "pin_of", "read_program",
           "sandbox_for_this_process", "task_for"]

MAX_PROGRAM_BYTES = 1 << 20
_TASKS: dict[tuple[str, tuple[tuple[str, str], ...], str], Task] = {}
_POOL: dict[int, Any] = {}  # pid -> SandboxPool of that process
_POOL_LOCK = threading.Lock()


def sandbox_for_this_process() -> Any:
    """A sandbox pool owned by the calling process.

    Optimizers fork worker processes (OpenEvolve's process pool does, after its parent evaluated the
    initial program): a pool inherited through ``fork`` holds its parent's threads' locks and pipes, so
    each process starts its own and never touches an inherited one.
    """
    from reasearch.engine.sandbox import SandboxPool

    pid = os.getpid()
    with _POOL_LOCK:
        pool = _POOL.get(pid)
        if pool is None or pool.closed:
            _POOL.clear()  # an inherited entry belongs to the parent: dropped, never closed here
            pool = _POOL[pid] = SandboxPool()
            atexit.register(_close_pool, pid)
        return pool


def close_sandboxes() -> None:
    """Closes this process's adapter pool (a later evaluation starts a new one)."""
    with _POOL_LOCK:
        pool = _POOL.pop(os.getpid(), None)
    if pool is not None:
        pool.close()


def _close_pool(pid: int) -> None:
    pool = _POOL.get(pid)
    if pool is not None and os.getpid() == pid:
        pool.close()


def task_for(task_id: str, params: Mapping[str, Any] | None = None, pin: Mapping[str, Any] | None = None) -> Task:
    """The registered task ``task_id`` (built once per process and parameter set).

    ``pin`` (:func:`pin_of`, written into an exported evaluator): a task folder must still hold the content it was
    exported with, or the task is refused with a line naming the files that changed."""
    from reasearch.evaluators.registry import make

    params = dict(params or {})
    key = (task_id, tuple(sorted((k, repr(v)) for k, v in params.items())), repr(sorted((pin or {}).items())))
    task = _TASKS.get(key)
    if task is None:
        if pin:
            from reasearch.evaluators.folder import FolderTask

            task = FolderTask(task_id, params, content_hash=str(pin["content_hash"]), files=dict(pin["files"]))
            task.spec  # noqa: B018 - the folder is read and checked against the pin now
        else:
            task = make(task_id, **params)
        if not isinstance(task_kind(task), ProgramKind):
            raise ConfigError(f"{task_id} does not evaluate one program file; pick a program task (reasearch tasks)")
        if pin or not pin_of(task):  # an unpinned folder is read anew each time: an export pins what it holds now
            _TASKS[key] = task
    return task


def pin_of(task: Task) -> dict[str, Any]:
    """What an exported evaluator pins of its task: a task folder's content hash and file hashes (else nothing)."""
    params = task.spec.params
    if task.spec.task_class.endswith(":FolderTask") and "content_hash" in params:
        return {"content_hash": params["content_hash"], "files": dict(params["files"])}
    return {}


def read_program(program_path: str | Path) -> str | EvalResult:
    """The program's text (size-capped UTF-8), or the ``INVALID`` result that says why it cannot be read."""
    path = Path(program_path)
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_PROGRAM_BYTES + 1)
    except OSError as exc:
        return EvalResult.failure(Status.INVALID, f"the program file could not be read: {exc.strerror or exc}")
    if len(raw) > MAX_PROGRAM_BYTES:
        return EvalResult.failure(Status.INVALID, f"the program is over {MAX_PROGRAM_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return EvalResult.failure(Status.INVALID, "the program is not UTF-8 text")


def evaluate_file(task: Task, program_path: str | Path, *, seed: int | None = 0) -> EvalResult:
    """The task's result for the program at ``program_path``; an unreadable file is ``INVALID``, never raised."""
    source = read_program(program_path)
    if isinstance(source, EvalResult):
        return source
    return task.evaluate(source, seed=seed, executor=sandbox_for_this_process())


def numeric_metrics(result: EvalResult) -> dict[str, float]:
    """The result's finite numeric metrics (flags and text left out: peers average what they are given)."""
    out: dict[str, float] = {}
    for key, value in result.metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(float(value)):
            out[f"task_{key}"] = float(value)
    return out
