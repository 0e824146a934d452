"""A task defined by a folder: ``task.toml``, a description, a seed program and a trusted ``score.py``.

The format (docs/your-own-task.md)::

    my_task/
      task.toml        id, entry point, direction, limits, best known, parameters (below)
      description.md   what the optimizer reads
      seed.py          the starting program; defines the entry point
      score.py         score(returned, params) -> float | {"score": ..., "feedback": ..., "instances": [...]}

``reasearch.make("path/to/my_task")`` (and every command that takes a task id) builds a
:class:`FolderTask`. The candidate runs in the sandbox like any program task's (harness
:mod:`reasearch.evaluators._folder_harness`); what it returns comes back as plain data and the
folder's ``score.py`` scores it on the trusted side.

The task's spec records the folder's content hash (sha256 over every file's relative path and bytes) and
each file's hash: a task rebuilt from a stored spec (resume, a remote worker) whose folder changed is refused,
naming the files that changed.

Trust boundary: the folder is the user's own code, run on the host by design (like a task class). The
candidate's return value is hostile data: its size is capped by the sandbox, NumPy arrays arrive as lists,
and what ``score.py`` makes of it is checked (a finite number, feedback text cut to a bound, finite
per-instance scores) before it can become a score.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import hashlib
import math
import os
import re
import shutil
import tempfile
import tomllib
import traceback
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from reasearch.ast_lock import parse as parse_locked
from reasearch.engine.protocol import Limits, SandboxRunner
from reasearch.errors import ConfigError, TaskFolderError
from reasearch.evaluators._folder_example import write_example_folder
from reasearch.evaluators.base import Task, default_runner, failure_feedback
from reasearch.evaluators.params import Range, TaskParam
from reasearch.evaluators.result import EvalResult, Provenance, Status
from reasearch.evaluators.spec import TaskSpec

__all__ = ["FolderTask", "folder_cache", "folder_manifest", "pack_folder", "unpack_folder", "write_example_folder"]

TOML = "task.toml"
_KEYS = {"id", "description", "seed", "score", "entry_point", "returns", "direction", "time_limit_s", "memory_mb",
         "best_known", "best_known_source", "seed_score", "deterministic", "params", "stage1"}
_STAGE1_KEYS = {"params", "min_score", "time_limit_s"}
_PARAM_KEYS = {"type", "default", "min", "max", "choices", "help"}
_TYPES: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool}
_ID = re.compile(r"^[a-z0-9_]+/[A-Za-z0-9_.\-]+-v(\d+)$")
_ENTRY = re.compile(r"^[A-Za-z_]\w*$")
MAX_FILES, MAX_FOLDER_BYTES = 200, 16 * 1024 * 1024  # a task folder is code and a description, not data
MAX_FEEDBACK = 2000  # characters of score.py's feedback the optimizer sees
MAX_INSTANCES = 10_000
RESULT_BYTES = 4 * 1024 * 1024  # a larger return value is refused by the sandbox (CRASH)


def folder_manifest(folder: Path) -> dict[str, str]:
    """``relative path -> sha256`` of every file of the folder (``__pycache__`` and ``*.pyc`` left out)."""
    files: dict[str, str] = {}
    total = 0
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        if path.is_symlink():
            raise TaskFolderError(f"{folder / rel}: a task folder holds no symbolic links; copy the file in")
        if not path.is_file():
            continue
        total += path.stat().st_size  # before reading: a 1 GiB file is refused, not loaded
        if len(files) >= MAX_FILES or total > MAX_FOLDER_BYTES:
            raise TaskFolderError(f"{folder}: a task folder holds at most {MAX_FILES} files and "
                                  f"{MAX_FOLDER_BYTES >> 20} MB; keep data sets outside it")
        files[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return files


# ------------------------------------------------------------------------------ a folder's content, by its hash
# A fleet on a Ray cluster ships each task folder's content to the nodes that run its members: a node writes it
# into its folder cache under the content hash (checked: bytes that do not hash to it are refused) and every
# FolderTask of that folder in this process reads from there, whatever the node holds at the folder's path.

_SHIPPED: dict[str, Path] = {}  # a folder's absolute path (as specs name it) -> its shipped content on this node


def folder_cache() -> Path:
    """Where this node keeps shipped task folders: ``$REASEARCH_TASK_CACHE``, else ``~/.cache/reasearch/task-folders``.
    """
    root = os.environ.get("REASEARCH_TASK_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "reasearch" / "task-folders"


def pack_folder(folder: str) -> dict[str, Any]:
    """A task folder's content as plain data: ``{"folder": absolute path, "content_hash": ..., "files": {relative
    path: bytes}}`` (at most :data:`MAX_FILES` files and :data:`MAX_FOLDER_BYTES` bytes, no symbolic links)."""
    path = Path(folder).expanduser().resolve()
    if not path.is_dir():
        raise TaskFolderError(f"{folder}: no such task folder")
    manifest = folder_manifest(path)
    files = {rel: (path / rel).read_bytes() for rel in manifest}
    if {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()} != manifest:
        raise TaskFolderError(f"{path} changed while it was read; run again")
    return {"folder": str(path), "content_hash": _content_hash(manifest), "files": files}


def unpack_folder(bundle: Mapping[str, Any]) -> Path:
    """Writes a :func:`pack_folder` bundle into this node's folder cache (once per content hash) and makes every
    FolderTask of its folder path in this process read from there; returns the cached folder."""
    origin, content_hash, files = str(bundle["folder"]), str(bundle["content_hash"]), bundle["files"]
    if not re.fullmatch(r"[0-9a-f]{64}", content_hash):
        raise TaskFolderError(f"a shipped task folder's content hash must be 64 hex digits, not {content_hash!r}")
    if not isinstance(files, Mapping) or len(files) > MAX_FILES or sum(len(v) for v in files.values()) > \
            MAX_FOLDER_BYTES:
        raise TaskFolderError(f"the shipped content of {origin} is over {MAX_FILES} files or "
                              f"{MAX_FOLDER_BYTES >> 20} MB")
    manifest: dict[str, str] = {}
    for rel, data in files.items():
        parts = PurePosixPath(rel).parts if isinstance(rel, str) else ()
        if not parts or rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in rel \
                or not isinstance(data, bytes):
            raise TaskFolderError(f"the shipped content of {origin} holds a bad file name {rel!r}")
        manifest[rel] = hashlib.sha256(data).hexdigest()
    if _content_hash(manifest) != content_hash:
        raise TaskFolderError(f"the shipped content of {origin} does not hash to {content_hash[:12]}; refused")
    target = folder_cache() / content_hash
    if not (target.is_dir() and _content_hash(folder_manifest(target)) == content_hash):
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{content_hash[:12]}-", dir=target.parent))
        for rel, data in files.items():
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            (staging / rel).write_bytes(data)
        if target.exists():  # a partial or tampered copy: replaced
            shutil.rmtree(target, ignore_errors=True)
        try:
            staging.rename(target)
        except OSError:  # another process of this node wrote it first: its copy is checked when it is read
            shutil.rmtree(staging, ignore_errors=True)
    _SHIPPED[origin] = target
    return target


def _content_hash(files: Mapping[str, str]) -> str:
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{rel}\0{files[rel]}\n".encode())
    return h.hexdigest()


def _changes(old: Mapping[str, str], new: Mapping[str, str]) -> str:
    parts = [f"{f} changed" for f in sorted(set(old) & set(new)) if old[f] != new[f]]
    parts += [f"{f} removed" for f in sorted(set(old) - set(new))]
    parts += [f"{f} added" for f in sorted(set(new) - set(old))]
    return ", ".join(parts) or "its content hash differs"


def _line_of(text: str, key: str, table: str = "") -> int:
    """The line of ``key = ...`` in the TOML table ``table`` ("" is the top), or of the table's header; 1 if absent."""
    current = ""
    for i, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        header = re.match(r"^\[([^\[\]]+)\]", stripped)
        if header:
            current = header.group(1).strip()
            if current == table and not key:
                return i
            continue
        if current == table and key and re.match(rf"^{re.escape(key)}\s*=", stripped):
            return i
    return 1


@dataclass(frozen=True, slots=True)
class _Stage1:
    """The cheap first stage: the candidate run on a quick instance; its failure skips the full evaluation."""

    params: dict[str, Any]
    min_score: float | None
    time_limit_s: float | None


@dataclass(frozen=True, slots=True)
class _Layout:
    """What ``task.toml`` declares, checked."""

    id: str
    version: int
    description: str
    seed: str
    score: str
    entry_point: str
    returns: str
    direction: str
    time_limit_s: float
    memory_mb: int
    best_known: float | None
    best_known_source: str
    seed_score: float | None
    deterministic: bool
    params: tuple[TaskParam, ...]
    stage1: _Stage1 | None = None


def _read_layout(folder: Path) -> tuple[_Layout, str]:
    """Reads and checks ``task.toml``; a mistake is one :class:`TaskFolderError` line naming file, line and fix."""
    toml_path = folder / TOML
    if not toml_path.is_file():
        raise TaskFolderError(f"{toml_path}: no such file; a task folder holds a {TOML} "
                              f"(`reasearch new-task NAME` writes a working example), or is an OpenEvolve folder "
                              f"(initial_program.py + evaluator.py) or a ShinkaEvolve one (initial.py + evaluate.py)")
    text = toml_path.read_text(encoding="utf-8")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TaskFolderError(f"{toml_path}: {exc}; fix the TOML syntax") from None

    def fail(key: str, why: str, table: str = "") -> TaskFolderError:
        return TaskFolderError(f"{toml_path} line {_line_of(text, key, table)}: {why}")

    unknown = sorted(set(doc) - _KEYS)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(_KEYS), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"the keys are {', '.join(sorted(_KEYS))}"
        raise fail(unknown[0], f"unknown key {unknown[0]!r}; {hint}")

    def get(key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if key not in doc:
            if default is ...:
                raise TaskFolderError(f"{toml_path}: no {key!r}; add a line `{key} = ...` (docs/your-own-task.md)")
            return default
        value = doc[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and bool not in (
                kind if isinstance(kind, tuple) else (kind,))):
            raise fail(key, f"{key} must be {_kind_text(kind)}, not {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise fail(key, f"{key} must be a finite number, not {value!r}")
        return value

    task_id = get("id", str)
    m = _ID.match(task_id)
    if not m:
        raise fail("id", f"id {task_id!r} must look like 'namespace/name-v1' (lower-case namespace, a -vN version)")
    direction = get("direction", str)
    if direction not in ("maximize", "minimize"):
        raise fail("direction", f"direction must be \"maximize\" or \"minimize\", not {direction!r}")
    entry = get("entry_point", str)
    if not _ENTRY.match(entry):
        raise fail("entry_point", f"entry_point must be a Python function name, not {entry!r}")
    time_limit = float(get("time_limit_s", (int, float), 10.0))
    memory = get("memory_mb", int, 1024)
    if time_limit <= 0 or memory < 64:
        raise fail("time_limit_s" if time_limit <= 0 else "memory_mb", "time_limit_s must be > 0 and memory_mb >= 64")
    files = {k: get(k, str, f"{k}.md" if k == "description" else f"{k}.py") for k in ("description", "seed", "score")}
    for key, name in files.items():
        inside = (folder / name).resolve()
        if not inside.is_relative_to(folder.resolve()) or not inside.is_file():
            raise fail(key, f"{key} = {name!r}: no such file in {folder}; create it or fix the name", ) if key in doc \
                else TaskFolderError(f"{folder / name}: no such file; create it (or name another file with "
                                     f"`{key} = \"...\"` in {TOML})")
    best = get("best_known", (int, float), None)
    seed_score = get("seed_score", (int, float), None)
    raw_params = get("params", dict, {})
    params = tuple(_read_param(name, spec, fail) for name, spec in raw_params.items())
    stage1 = _read_stage1(get("stage1", dict, None), params, fail)
    layout = _Layout(
        id=task_id, version=int(m.group(1)), description=files["description"], seed=files["seed"],
        score=files["score"], entry_point=entry, returns=get("returns", str, ""), direction=direction,
        time_limit_s=time_limit, memory_mb=memory, best_known=None if best is None else float(best),
        best_known_source=get("best_known_source", str, ""),
        seed_score=None if seed_score is None else float(seed_score),
        deterministic=get("deterministic", bool, True), params=params, stage1=stage1)
    return layout, text


def _read_stage1(table: dict[str, Any] | None, params: tuple[TaskParam, ...],
                 fail: Callable[..., TaskFolderError]) -> _Stage1 | None:
    """``[stage1]``: ``params`` (a table of declared parameters' quick values), optional ``min_score`` and
    ``time_limit_s``."""
    if table is None:
        return None
    unknown = sorted(set(table) - _STAGE1_KEYS)
    if unknown:
        raise fail(unknown[0], f"[stage1]: unknown key {unknown[0]!r}; the keys are {', '.join(sorted(_STAGE1_KEYS))}",
                   "stage1")
    values = table.get("params")
    if not isinstance(values, dict) or not values:
        raise fail("params" if "params" in table else "", "[stage1] needs params = { NAME = VALUE, ... }: the "
                   "parameter values of the quick run (the others as in the full run)", "stage1")
    declared = {p.name: p for p in params}
    for name, value in values.items():
        p = declared.get(name)
        if p is None:
            raise fail("params", f"[stage1] params: {name!r} is not a declared parameter (declared: "
                                 f"{', '.join(declared) or 'none'}); declare it under [params.{name}]", "stage1")
        if not _param_ok(p, value):
            raise fail("params", f"[stage1] params: {name} = {value!r} is not {p.describe()}", "stage1")
    bounds: dict[str, float | None] = {}
    for key in ("min_score", "time_limit_s"):
        v = table.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                              or (key == "time_limit_s" and v <= 0)):
            raise fail(key, f"[stage1] {key} must be a finite number{' > 0' if key == 'time_limit_s' else ''}, "
                            f"not {v!r}", "stage1")
        bounds[key] = None if v is None else float(v)
    return _Stage1(dict(values), bounds["min_score"], bounds["time_limit_s"])


def _kind_text(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    words = {str: "text in quotes", int: "an integer", float: "a number", bool: "true or false", dict: "a table"}
    return " or ".join(dict.fromkeys(words.get(k, k.__name__) for k in kinds))


def _read_param(name: str, spec: Any, fail: Callable[..., TaskFolderError]) -> TaskParam:
    table = f"params.{name}"
    if not isinstance(spec, dict):
        raise fail(name, f"parameter {name} must be a table: [params.{name}] with type = \"int\" and default = ...",
                   "params")
    unknown = sorted(set(spec) - _PARAM_KEYS)
    if unknown:
        raise fail(unknown[0], f"parameter {name}: unknown key {unknown[0]!r}; the keys are "
                               f"{', '.join(sorted(_PARAM_KEYS))}", table)
    if "type" not in spec:
        raise fail("", f"parameter {name} has no type; add type = \"int\" (or \"float\", \"str\", \"bool\")", table)
    kind = _TYPES.get(spec["type"]) if isinstance(spec["type"], str) else None
    if kind is None:
        raise fail("type", f"parameter {name}: type must be one of {', '.join(_TYPES)}, not {spec['type']!r}", table)
    if "default" not in spec:
        raise fail("", f"parameter {name} has no default; add default = ... (a {spec['type']})", table)
    choices = spec.get("choices", [])
    rng = None
    if choices or "min" in spec or "max" in spec:
        for key in ("min", "max"):
            if key in spec and (isinstance(spec[key], bool) or not isinstance(spec[key], (int, float))
                                or not math.isfinite(spec[key])):
                raise fail(key, f"parameter {name}: {key} must be a finite number, not {spec[key]!r}", table)
        rng = Range(ge=spec.get("min"), le=spec.get("max"), choices=tuple(choices) if isinstance(choices, list) else ())
    help_text = spec.get("help", "")
    param = TaskParam(name, (kind,), spec["default"], rng, str(help_text))
    if not _param_ok(param, spec["default"]):
        raise fail("default", f"parameter {name}: default {spec['default']!r} is not {param.describe()}", table)
    return param


def _param_ok(p: TaskParam, value: Any) -> bool:
    if not p.accepts(value) or (isinstance(value, float) and not math.isfinite(value)):
        return False
    if p.range is None:
        return True
    try:
        return p.range.ok(value)
    except TypeError:
        return False


class FolderTask(Task):
    """A program task defined by a folder (see the module docstring and docs/your-own-task.md).

    Args:
        folder: the folder holding ``task.toml``.
        params: values for the folder's declared parameters (the rest take their defaults).
        content_hash: when given (a stored spec), the folder must still hash to it, or the task is refused.
        files: per-file hashes recorded with ``content_hash``, to name what changed.
    """

    harness = "reasearch.evaluators._folder_harness:folder_harness"

    def __init__(self, folder: str, params: Mapping[str, Any] | None = None, content_hash: str = "",
                 files: Mapping[str, str] | None = None) -> None:
        self.folder = folder
        self.params = params
        self.content_hash = content_hash
        self.files = files

    # ---------------------------------------------------------------- reading the folder
    @property
    def origin(self) -> Path:
        """The folder's absolute path, as the spec names it."""
        return Path(self.folder).expanduser().resolve()

    @property
    def path(self) -> Path:
        """Where the folder's files are read: its shipped content on this node (a fleet member on Ray), else the
        content cached under the recorded hash when the folder is not here, else the folder itself."""
        origin = self.origin
        shipped = _SHIPPED.get(str(origin))
        if shipped is not None:
            return shipped
        if self.content_hash and not origin.is_dir() and (folder_cache() / self.content_hash).is_dir():
            return folder_cache() / self.content_hash
        return origin

    def _loaded(self) -> tuple[_Layout, dict[str, Any], dict[str, str]]:
        cached = self.__dict__.get("_layout")
        if cached is None:
            folder = self.path
            if not folder.is_dir():
                raise TaskFolderError(f"{self.folder}: no such task folder (a task is an id from `reasearch tasks` "
                                      f"or a folder holding {TOML})")
            manifest = folder_manifest(folder)
            if self.content_hash and _content_hash(manifest) != self.content_hash:
                what = _changes(self.files or {}, manifest)
                raise TaskFolderError(f"{folder} changed since this run was stored ({what}); restore those files, "
                                      f"or start a new run on the folder")
            layout, _ = _read_layout(folder)
            _check_seed(folder, layout)
            values = self._resolve_params(layout)
            # The texts are read once, now, before any candidate runs: a candidate in the rlimit-only sandbox
            # (no filesystem isolation) that rewrites score.py changes nothing this task scores with.
            self.__dict__["_texts"] = {name: (folder / name).read_text(encoding="utf-8")
                                       for name in (layout.description, layout.seed, layout.score)}
            cached = self.__dict__["_layout"] = (layout, values, manifest)
        return cached

    def _resolve_params(self, layout: _Layout) -> dict[str, Any]:
        declared = {p.name: p for p in layout.params}
        given = dict(self.params or {})
        for name, value in given.items():
            p = declared.get(name)
            if p is None:
                raise ConfigError(f"{layout.id} has no parameter {name!r}; its parameters: "
                                  f"{', '.join(declared) or 'none'} (`reasearch tasks {self.folder} --params`)")
            if not _param_ok(p, value):
                raise ConfigError(f"parameter {name} of {layout.id} takes {p.describe()}, not {value!r}")
        values = {p.name: given.get(p.name, p.default) for p in layout.params}
        return {k: (float(v) if float in declared[k].types and not isinstance(v, bool) else v)
                for k, v in values.items()}

    def declared_params(self) -> list[TaskParam]:
        """The parameters ``task.toml`` declares (``reasearch tasks PATH --params``)."""
        return list(self._loaded()[0].params)

    def _make_spec(self) -> TaskSpec:
        layout, values, manifest = self._loaded()
        defaults = values == {p.name: p.default for p in layout.params}
        return TaskSpec(
            id=layout.id, version=layout.version, direction=layout.direction,  # type: ignore[arg-type]
            time_limit_s=layout.time_limit_s, memory_mb=layout.memory_mb,
            best_known=layout.best_known if defaults else None,  # recorded for the default parameters
            best_known_source=layout.best_known_source if defaults else "",
            entry_point=layout.entry_point, deterministic=layout.deterministic,
            seed_score=layout.seed_score if defaults else None,
            params={"folder": str(self.origin), "params": values, "content_hash": _content_hash(manifest),
                    "files": manifest},
            task_class=f"{FolderTask.__module__}:{FolderTask.__qualname__}",
        )

    def shipment(self) -> dict[str, Any]:
        """The folder's content (:func:`pack_folder`), named by its original path: a node without the folder
        rebuilds this task from it."""
        bundle = pack_folder(str(self.path))
        return {**bundle, "folder": str(self.origin)}

    @classmethod
    def receive_shipment(cls, shipment: Mapping[str, Any]) -> None:
        """Writes a shipped folder into this node's folder cache (:func:`unpack_folder`)."""
        unpack_folder(shipment)

    def get_params(self) -> dict[str, Any]:
        """The spec's parameters: the folder, the parameter values and the content hash it was built from."""
        return dict(self.spec.params)

    def __getstate__(self) -> dict[str, Any]:
        # A copy sent elsewhere (a Ray worker) carries the content hash: it refuses a folder that differs.
        return dict(self.spec.params)

    def provenance(self, candidate_source: str, *, seed: int | None, sandbox_mode: str) -> Provenance:
        """The base provenance; its parameters keep the content hash but not the per-file hashes (the run's spec
        holds those once, not every result)."""
        prov = super().provenance(candidate_source, seed=seed, sandbox_mode=sandbox_mode)
        return dataclasses.replace(prov, params={k: v for k, v in prov.params.items() if k != "files"})

    def evaluator_hash(self) -> str:
        """The base hash extended with the folder's content hash (score.py is the evaluator)."""
        extended = super().evaluator_hash() + str(self.spec.params["content_hash"])
        return hashlib.sha256(extended.encode()).hexdigest()[:16]

    def _read(self, name: str) -> str:
        self._loaded()
        return str(self.__dict__["_texts"][name])

    def describe(self) -> str:
        layout, values, _ = self._loaded()
        text = self._read(layout.description).strip()
        args = ", ".join(values) or "no arguments"
        lines = [text, "", "## How the candidate is called",
                 f"Define `{layout.entry_point}()` in one Python file; it is called with the parameters it names "
                 f"({args}; `seed` too) and its return value is scored (to {layout.direction}).",
                 f"It returns: {layout.returns}" if layout.returns else "",
                 f"Parameters: {', '.join(f'{k} = {v!r}' for k, v in values.items())}" if values else "",
                 f"Limits: {layout.time_limit_s:g} s wall time, {layout.memory_mb} MB memory per evaluation.",
                 _stage1_text(layout.stage1, layout.direction)]
        return "\n".join(line for line in lines if line is not None) + "\n"

    def seed_program(self) -> str:
        return self._read(self._loaded()[0].seed)

    def payload(self, seed: int | None) -> dict[str, Any]:
        return {"seed": seed, "params": self._loaded()[1]}

    def limits(self) -> Limits:
        return Limits(wall_s=self.spec.time_limit_s, memory_mb=self.spec.memory_mb, result_bytes=RESULT_BYTES)

    # ---------------------------------------------------------------- trusted scoring
    def _scorer(self) -> Callable[..., Any]:
        fn = self.__dict__.get("_score_fn")
        if fn is None:
            layout = self._loaded()[0]
            path = self.path / layout.score
            source = self._read(layout.score)
            try:
                code = compile(source, str(path), "exec")  # compiled here: no __pycache__ left in the folder
            except SyntaxError as exc:
                raise TaskFolderError(f"{path} line {exc.lineno}: syntax error: {exc.msg}; fix score.py") from None
            module = types.ModuleType(f"reasearch_task_folder_score_{hashlib.sha256(bytes(path)).hexdigest()[:8]}")
            module.__file__ = str(path)
            try:
                exec(code, module.__dict__)  # the user's own scoring code, on the host by design
            except Exception as exc:  # noqa: BLE001 - the folder's bug, reported as one line
                raise TaskFolderError(f"{path} line {_user_line(exc, path)}: loading it raised "
                                      f"{type(exc).__name__}: {exc}; fix score.py") from None
            fn = module.__dict__.get("score")
            if not callable(fn):
                raise TaskFolderError(f"{path} line 1: no function score(returned, params); define it "
                                      "(it returns a number or {\"score\": ..., \"feedback\": ...})")
            self.__dict__["_score_fn"] = fn
        return fn

    def score_returned(self, data: Any, params: Mapping[str, Any] | None = None) -> EvalResult:
        """Runs ``score.py`` over a returned value (with the task's parameters, or ``params``); raises
        :class:`_ScoreError` when score.py fails on it."""
        fn = self._scorer()
        path = self.path / self._loaded()[0].score
        line = fn.__code__.co_firstlineno if hasattr(fn, "__code__") else 1
        try:
            returned = _plain(data)
        except RecursionError:  # the wire caps nesting; this frame may sit deep in a driver's stack
            raise _ScoreError(path, 1, "the returned value nests too deeply to score") from None
        try:
            out = fn(returned, dict(self._loaded()[1] if params is None else params))
        except Exception as exc:  # noqa: BLE001 - score.py rejected (or tripped over) this output
            raise _ScoreError(path, _user_line(exc, path), f"score() raised {type(exc).__name__}: {exc}") from None
        feedback, instances = "", None
        if isinstance(out, dict):
            unknown = sorted(set(map(str, out)) - {"score", "feedback", "instances"})
            if unknown or "score" not in out:
                raise _ScoreError(path, line, f"score() returned a dict with keys {sorted(map(str, out))}; give "
                                              "'score' and optionally 'feedback' and 'instances'")
            feedback = out.get("feedback", "")
            if not isinstance(feedback, str):
                raise _ScoreError(path, line, f"score()'s feedback must be text, not {type(feedback).__name__}")
            instances = out.get("instances")
            if instances is not None:
                if (not isinstance(instances, (list, tuple)) or len(instances) > MAX_INSTANCES
                        or not all(_finite(v) for v in instances)):
                    raise _ScoreError(path, line, f"score()'s instances must be a list of at most {MAX_INSTANCES} "
                                                  "finite numbers")
                instances = [float(v) for v in instances]
            out = out["score"]
        if not _finite(out):
            raise _ScoreError(path, line, f"score() returned {out!r}; return a finite number (or a dict with "
                                          "'score': a finite number)")
        metrics: dict[str, Any] = {"instances": instances} if instances is not None else {}
        feedback = feedback if len(feedback) <= MAX_FEEDBACK else feedback[:MAX_FEEDBACK] + " ...(cut)"
        return self.result(float(out), metrics=metrics, feedback=feedback)

    def score_solution(self, data: Any, *, seed: int | None = None) -> EvalResult:
        try:
            return self.score_returned(data)
        except _ScoreError as exc:  # the candidate's output did not score: no fitness, the reason as feedback
            return self.invalid(str(exc))

    # ---------------------------------------------------------------- the cheap first stage
    def evaluate(self, candidate_source: str, *, seed: int | None = None,
                 executor: SandboxRunner | None = None) -> EvalResult:
        """The base evaluation, after the folder's ``[stage1]`` when it declares one: the candidate first runs on
        the quick instance; a failure there (any status but OK, or a score past ``min_score``) is the result,
        without the full run. Every result of such a task carries ``stage1_status``, ``stage1_score`` and
        ``stage1_passed`` in its metrics (``failure_stage: "stage1"`` when the full run was skipped)."""
        stage = self._loaded()[0].stage1
        if stage is None or not isinstance(candidate_source, str):
            return super().evaluate(candidate_source, seed=seed, executor=executor)
        runner = executor if executor is not None else default_runner()
        quick = self._run_stage1(candidate_source, seed, runner, stage)
        passed, why = self._stage1_verdict(quick, stage)
        summary = {"stage1_status": quick.status.value, "stage1_score": quick.score, "stage1_passed": passed}
        if not passed:
            status = quick.status if not quick.ok else Status.INVALID
            return EvalResult.failure(status, f"stage 1 ({_values_text(stage.params)}) {why}; the full evaluation "
                                      "was skipped", wall_s=quick.wall_s, cpu_s=quick.cpu_s,
                                      metrics={**summary, "failure_stage": "stage1"}, provenance=quick.provenance)
        full = super().evaluate(candidate_source, seed=seed, executor=runner)
        return full.with_(metrics={**full.metrics, **summary}, wall_s=full.wall_s + quick.wall_s,
                          cpu_s=full.cpu_s + quick.cpu_s)

    def _run_stage1(self, source: str, seed: int | None, runner: SandboxRunner, stage: _Stage1) -> EvalResult:
        values = {**self._loaded()[1], **stage.params}
        request = dataclasses.replace(self.build_request(source, seed=seed), payload={"seed": seed, "params": values})
        if stage.time_limit_s is not None:
            request = dataclasses.replace(request, limits=dataclasses.replace(request.limits,
                                                                              wall_s=stage.time_limit_s))
        outcome = runner.run(request)
        prov = self.provenance(source, seed=seed, sandbox_mode=outcome.sandbox_mode)
        if outcome.status is not Status.OK:
            return EvalResult.failure(outcome.status, failure_feedback(outcome), wall_s=outcome.wall_s,
                                      cpu_s=outcome.cpu_s, provenance=prov)
        try:
            result = self.score_returned(outcome.value, values)
        except _ScoreError as exc:
            result = self.invalid(str(exc))
        return result.with_(wall_s=outcome.wall_s, cpu_s=outcome.cpu_s, provenance=prov)

    def _stage1_verdict(self, quick: EvalResult, stage: _Stage1) -> tuple[bool, str]:
        if not quick.ok or quick.score is None:
            return False, f"failed ({quick.status.value}: {quick.feedback.strip()[:500]})"
        if stage.min_score is not None:
            maximize = self.spec.direction == "maximize"
            if (quick.score < stage.min_score) if maximize else (quick.score > stage.min_score):
                return False, (f"scored {quick.score:.6g}, {'below' if maximize else 'above'} its min_score "
                               f"{stage.min_score:g}")
        return True, ""

    def preflight(self, *, executor: SandboxRunner | None = None, seed: int = 0) -> EvalResult:
        """Runs the seed program and scores it: a seed that fails its own task, or a ``score.py`` that raises
        or returns no finite number on it, is a :class:`TaskFolderError` (one line: file, line, fix)."""
        layout = self._loaded()[0]
        runner = executor if executor is not None else default_runner()
        source = self.seed_program()
        outcome = runner.run(self.build_request(source, seed=seed))
        seed_path = self.path / layout.seed
        if outcome.status is not Status.OK:
            first = (outcome.error.strip() or outcome.stderr.strip() or "no detail").splitlines()[-1][:300]
            raise TaskFolderError(f"{seed_path} line {_seed_line(outcome.stderr + outcome.error, seed_path, source)}: "
                                  f"the seed fails its own task ({outcome.status.value}: {first}); fix the seed "
                                  f"(`reasearch eval {self.folder} {seed_path}` shows the whole error)")
        try:
            result = self.score_returned(outcome.value)
        except _ScoreError as exc:
            raise TaskFolderError(f"{exc} on the seed's output ({seed_path.name}); fix {exc.path.name}, or the seed "
                                  f"if its output is wrong") from None
        stage = layout.stage1
        if stage is not None:
            passed, why = self._stage1_verdict(self._run_stage1(source, seed, runner, stage), stage)
            if not passed:
                toml = self.path / TOML
                line = _line_of(toml.read_text(encoding="utf-8"), "", "stage1")
                raise TaskFolderError(f"{toml} line {line}: the seed fails its own stage 1 "
                                      f"({_values_text(stage.params)}): {why}; fix [stage1] or the seed")
        prov = self.provenance(source, seed=seed, sandbox_mode=outcome.sandbox_mode)
        return result.with_(wall_s=outcome.wall_s, cpu_s=outcome.cpu_s, provenance=prov)


def _stage1_text(stage: _Stage1 | None, direction: str) -> str:
    if stage is None:
        return ""
    bound = "" if stage.min_score is None else \
        f" and score {'at least' if direction == 'maximize' else 'at most'} {stage.min_score:g}"
    return (f"Stage 1: each candidate first runs with {_values_text(stage.params)}; it must succeed{bound}, or the "
            "full evaluation is skipped and the candidate gets no score.")


def _values_text(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} = {v!r}" for k, v in values.items())


class _ScoreError(Exception):
    """score.py failed on one returned value (a raise, a NaN, a non-number)."""

    def __init__(self, path: Path, line: int, why: str) -> None:
        super().__init__(f"{path} line {line}: {why}")
        self.path = path


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _plain(data: Any) -> Any:
    """NumPy arrays (the wire's only non-JSON value) as lists: score.py sees JSON-shaped data."""
    tolist = getattr(data, "tolist", None)
    if callable(tolist) and type(data).__module__ == "numpy":
        return tolist()
    if isinstance(data, list):
        return [_plain(v) for v in data]
    if isinstance(data, dict):
        return {k: _plain(v) for k, v in data.items()}
    return data


def _user_line(exc: BaseException, path: Path) -> int:
    """The deepest line of ``path`` in the exception's traceback (1 when it has none)."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(path) and f.lineno]
    if isinstance(exc, SyntaxError) and exc.filename == str(path) and exc.lineno:
        lines.append(exc.lineno)
    return lines[-1] if lines else 1


def _seed_line(text: str, seed_path: Path, source: str) -> int:
    """The last line of the candidate module a sandbox traceback names (the seed runs as the candidate)."""
    found = re.findall(r'File "[^"]*", line (\d+), in (?!folder_harness)', text)
    n_lines = len(source.splitlines()) or 1
    hits = [int(n) for n in found if int(n) <= n_lines]
    return hits[-1] if hits else 1


def _check_seed(folder: Path, layout: _Layout) -> None:
    """The seed parses and defines the entry point (a misspelled one: "did you mean")."""
    path = folder / layout.seed
    source = path.read_text(encoding="utf-8")
    try:
        tree = parse_locked(source, str(path))
    except SyntaxError as exc:
        raise TaskFolderError(f"{path} line {exc.lineno}: syntax error: {exc.msg}; fix the seed") from None
    defined = {n.name: n.lineno for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    _check_score_file(folder / layout.score)
    if layout.entry_point in defined:
        return
    toml_line = _line_of((folder / TOML).read_text(encoding="utf-8"), "entry_point")
    close = difflib.get_close_matches(layout.entry_point, list(defined), n=1, cutoff=0.6)
    if close:
        raise TaskFolderError(f"{folder / TOML} line {toml_line}: entry_point = {layout.entry_point!r}, but "
                              f"{path.name} defines {close[0]!r} (line {defined[close[0]]}); did you mean "
                              f"entry_point = {close[0]!r}?")
    names = ", ".join(defined) or "no function"
    raise TaskFolderError(f"{folder / TOML} line {toml_line}: entry_point = {layout.entry_point!r}, but {path.name} "
                          f"defines {names}; define def {layout.entry_point}(...) in {path.name} or fix entry_point")


def _check_score_file(path: Path) -> None:
    """score.py parses and defines ``score`` at its top level (read, not run: it runs when it first scores)."""
    try:
        tree = parse_locked(path.read_text(encoding="utf-8"), str(path))
    except SyntaxError as exc:
        raise TaskFolderError(f"{path} line {exc.lineno}: syntax error: {exc.msg}; fix {path.name}") from None
    names = {n.name: n.lineno for n in tree.body if isinstance(n, ast.FunctionDef)}
    if "score" not in names:
        close = difflib.get_close_matches("score", list(names), n=1, cutoff=0.6)
        where = f"line {names[close[0]]}" if close else "line 1"
        hint = f"rename {close[0]}() to score()" if close else "define it"
        raise TaskFolderError(f"{path} {where}: no function score(returned, params); {hint} (it returns a number "
                              "or {\"score\": ..., \"feedback\": ..., \"instances\": [...]})")
