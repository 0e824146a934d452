"""One registry of versioned task ids with lazy entry points (in the manner of Gymnasium's).

Ids look like ``circle_packing/n26-v1``. A *family* registers a pattern such as
``arc_agi_2/{task_id}-v1``: its fields become constructor keyword arguments, and an optional
``enumerate`` callable lists the concrete ids.
"""

from __future__ import annotations

import difflib
import importlib
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reasearch.errors import ConfigError, UnknownTaskError
from reasearch.evaluators.params import check_finite, check_params
from reasearch.evaluators.spec import TaskSpec

if TYPE_CHECKING:  # the base class (and the engine under it) loads with the first task class, not the registry
    from reasearch.evaluators.base import Task
    from reasearch.evaluators.folder import FolderTask
    from reasearch.evaluators.peer_folder import PeerFolderTask

__all__ = [
    "LISTING_KEYS",
    "TaskEntry",
    "register",
    "make",
    "spec",
    "build_task",
    "make_folder_task",
    "is_folder_ref",
    "list_tasks",
    "registered_entry",
    "family_entries",
    "unregister",
    "plugin_problems",
    "task_class_of",
    "refresh_plugins",
]

_ENTRY_POINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # package.module:name
_ID = re.compile(r"^[a-z0-9_]+/(?:[A-Za-z0-9_.{}\-]+-)?v\d+$")  # name-vN, or a bare vN (eplb/v1)


@dataclass(frozen=True)
class TaskEntry:
    """A registered id (or id pattern) and how to build it."""

    id: str
    entry_point: str  # "package.module:ClassName"
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    enumerate: Callable[[], Iterable[Mapping[str, Any]]] | None = None  # families only
    summary: str = ""
    listing: Mapping[str, Any] = field(default_factory=dict)  # spec facts `reasearch tasks` shows (LISTING_KEYS)
    drawing: str = ""  # "package.module:draw_svg": the family's report drawing (reasearch.evaluators.svg)
    open_ids: bool = False  # families only: ids the pattern matches beyond what `enumerate` lists are valid too
    package: str = ""  # "name version" of the installed task package that registered it ("": built in)

    @property
    def is_family(self) -> bool:
        return "{" in self.id

    def _regex(self) -> re.Pattern[str]:
        parts = re.split(r"(\{[a-z_]+\})", self.id)
        rx = "".join(f"(?P<{p[1:-1]}>[^/]+?)" if p.startswith("{") else re.escape(p) for p in parts)
        return re.compile(f"^{rx}$")

    def match(self, task_id: str) -> dict[str, str] | None:
        m = self._regex().match(task_id)
        return m.groupdict() if m else None

    def load(self) -> Any:
        """The task class (or, for an installed package's id, the class or factory function) it names."""
        if self.package:
            from reasearch.evaluators.plugins import load_object

            return load_object(self.id, self.entry_point, self.package)
        return _load_class(self.entry_point)


def _load_class(entry_point: str) -> type[Task]:
    """The Task subclass named by ``"package.module:Class"`` (a lazy entry point, as in Gymnasium)."""
    module, _, attr = entry_point.partition(":")
    if not module or not attr:
        raise ConfigError(f"a task class is named 'package.module:Class', not {entry_point!r}")
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load task class {entry_point!r}: {exc}") from None
    from reasearch.evaluators.base import Task

    if not (isinstance(obj, type) and issubclass(obj, Task)):
        raise ConfigError(f"{entry_point} is not a Task subclass")
    return obj


LISTING_KEYS = frozenset({"direction", "best_known", "best_known_source", "seed_score"})
"""The spec facts a registration may declare so that listing the id imports nothing (see :func:`register`)."""

_REGISTRY: dict[str, TaskEntry] = {}
_BUILTINS_LOADED = False
_BUILTINS_LOCK = threading.RLock()


def register(
    task_id: str,
    entry_point: str,
    *,
    kwargs: Mapping[str, Any] | None = None,
    enumerate: Callable[[], Iterable[Mapping[str, Any]]] | None = None,
    summary: str = "",
    overwrite: bool = False,
    listing: Mapping[str, Any] | None = None,
    drawing: str = "",
    open_ids: bool = False,
) -> None:
    """Registers a task id (or a ``{field}`` pattern) with a lazy ``"module:Class"`` entry point.

    Args:
        task_id: ``namespace/name-vN``; a pattern may hold ``{field}`` parts.
        entry_point: ``"package.module:ClassName"``, imported on first ``make``.
        kwargs: constructor keyword arguments for this id.
        enumerate: for patterns, a callable yielding the field values of every concrete id. An id the
            pattern matches but ``enumerate`` does not list is unknown (one line, "did you mean"), unless
            ``open_ids`` (or the callable lists none: a family without its data, whose task says how to get it).
        summary: one line shown by ``reasearch tasks``.
        overwrite: replace an existing registration instead of raising.
        listing: for a concrete id, the spec facts ``reasearch tasks`` shows (all of
            :data:`LISTING_KEYS`), so that listing imports no task module; they must equal the
            built task's spec (the registry's conformance test checks every built-in id). Without
            them the listing builds the task.
        drawing: ``"package.module:function"``, the report drawing of this id's results: a function of a
            :class:`~reasearch.evaluators.svg.DrawingContext` returning an HTML fragment, kept in the
            family's package beside its PNG code and imported only when a report draws (the reports find
            it through :func:`family_entries`). Empty: the reports' generic drawing.
        open_ids: for patterns whose ``enumerate`` lists only examples: any id the pattern matches is valid.
    """
    if listing is not None and set(listing) != LISTING_KEYS:
        raise ConfigError(f"listing of {task_id!r} must give exactly {sorted(LISTING_KEYS)}; got {sorted(listing)}")
    if drawing and not _ENTRY_POINT.match(drawing):
        raise ConfigError(f"drawing of {task_id!r} is named 'package.module:function', not {drawing!r}")
    if not _ID.match(task_id):
        raise ConfigError(f"task id {task_id!r} must look like 'namespace/name-vN' (or 'namespace/vN')")
    if task_id in _REGISTRY and not overwrite:
        raise ConfigError(f"task id {task_id!r} is already registered (pass overwrite=True to replace it)")
    _REGISTRY[task_id] = TaskEntry(task_id, entry_point, dict(kwargs or {}), enumerate, summary, dict(listing or {}),
                                   drawing, open_ids)


def unregister(task_id: str) -> None:
    _REGISTRY.pop(task_id, None)


def _load_builtins() -> None:
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    # Threads (an executor's first requests) race here: the others wait until every built-in is
    # registered. The import's own lock makes a re-entrant call from a task module see a no-op.
    with _BUILTINS_LOCK:
        if not _BUILTINS_LOADED:
            importlib.import_module("reasearch.evaluators._builtin")
            _register_plugins()
            _BUILTINS_LOADED = True


_PLUGIN_PROBLEMS: list[str] = []


def _register_plugins() -> None:
    """Registers the ids of installed task packages (entry-point group ``reasearch.tasks``) after the built-ins:
    one that cannot be registered is kept as a one-line problem (:func:`plugin_problems`), never an error."""
    from reasearch.evaluators.plugins import discover, problem

    builtin_namespaces = {e.id.split("/", 1)[0] for e in _REGISTRY.values() if not e.package}
    taken = {e.id: e.package or "a built-in task" for e in _REGISTRY.values()}
    for entry in discover():
        why = problem(entry, builtin_namespaces, taken)
        if why:
            _PLUGIN_PROBLEMS.append(why)
            continue
        taken[entry.id] = entry.package
        _REGISTRY[entry.id] = TaskEntry(entry.id, entry.value, summary=f"from the task package {entry.package}",
                                        package=entry.package)


def plugin_problems() -> list[str]:
    """One line per installed task package entry point that was not registered (the reason and the package)."""
    _load_builtins()
    return list(_PLUGIN_PROBLEMS)


def refresh_plugins() -> None:
    """Reads the installed task packages again (after an install into the running interpreter's path)."""
    _load_builtins()
    with _BUILTINS_LOCK:
        for task_id in [k for k, e in _REGISTRY.items() if e.package]:
            del _REGISTRY[task_id]
        _PLUGIN_PROBLEMS.clear()
        importlib.invalidate_caches()
        _register_plugins()


def registered_entry(task_id: str) -> tuple[TaskEntry, dict[str, Any]]:
    """The entry for ``task_id`` and the keyword arguments it implies."""
    _load_builtins()
    entry = _REGISTRY.get(task_id)
    if entry is not None and not entry.is_family:
        return entry, dict(entry.kwargs)
    for entry in _REGISTRY.values():
        if entry.is_family:
            fields = entry.match(task_id)
            if fields is not None:
                if task_id != entry.id:  # the pattern itself names the family (the listing reads it)
                    _check_member(entry, task_id)
                return entry, {**entry.kwargs, **fields}
    raise UnknownTaskError(_unknown_message(task_id))


def _check_member(entry: TaskEntry, task_id: str) -> None:
    """A family id must be one its ``enumerate`` lists (when it lists any: without its data a family lists
    none, and the task says how to get the data); else one line with the closest ids, as for any other id."""
    if entry.enumerate is None or entry.open_ids:
        return
    members = [entry.id.format(**fields) for fields in entry.enumerate()]
    if not members or task_id in members:
        return
    # Compared on what varies (`halfcheetah` against `HalfCheetah-v5`), not on the family's shared prefix and suffix.
    head, tail = entry.id.split("{", 1)[0], entry.id.rsplit("}", 1)[1]

    def middle(text: str) -> str:
        return text[len(head):len(text) - len(tail)].lower()

    lowered = {middle(m): m for m in members}
    close = difflib.get_close_matches(middle(task_id), list(lowered), n=3, cutoff=0.6)
    msg = f"unknown task id {task_id!r}: the family {entry.id} has {len(members)} ids."
    if close:
        msg += " Did you mean " + " or ".join(repr(lowered[c]) for c in close) + "?"
    else:
        shown = ", ".join(members[:8]) + (", ..." if len(members) > 8 else "")
        msg += f" They are: {shown} (`reasearch tasks --all` lists them)."
    raise UnknownTaskError(msg)


def family_entries(family: str) -> list[TaskEntry]:
    """The registrations (ids and id patterns) of a task family: the ids that start with ``family/``."""
    _load_builtins()
    return [entry for entry in _REGISTRY.values() if entry.id.split("/", 1)[0] == family]


def _unknown_message(task_id: str) -> str:
    known = list_tasks(include_families=False, expand=True)
    close = difflib.get_close_matches(task_id, known, n=3, cutoff=0.6)
    msg = f"unknown task id {task_id!r}."
    if close:
        msg += " Did you mean " + " or ".join(repr(c) for c in close) + "?"
    else:
        msg += " `reasearch tasks` lists the registered ids."
    return msg


def make(task_id: str | TaskSpec, /, **params: Any) -> Task:  # positional-only: a family field may be named task_id
    """Builds the task registered under ``task_id``, or exactly the task a :class:`TaskSpec` describes.

    Args:
        task_id: e.g. ``"circle_packing/n26-v1"``; a task folder's path (``"./my_task"``, docs/your-own-task.md);
            or a spec (``task.spec``, or one read back from a
            store with ``TaskSpec.from_json``), rebuilt from its ``task_class`` and ``params`` (no
            registry needed, so tasks defined outside the package rebuild on any worker).
        **params: constructor keyword arguments overriding the registered ones (not with a spec).

    Raises:
        UnknownTaskError: no such id (the message suggests close matches).
        ConfigError: a parameter the task does not take; a spec whose class builds another id.
    """
    if isinstance(task_id, TaskSpec):
        if params:
            raise ConfigError("make(spec) rebuilds the spec's task exactly: put parameters in the spec, not in make()")
        return build_task(task_id.id, task_id.params, task_id.task_class)
    if is_folder_ref(task_id):
        return make_folder_task(task_id, params)
    entry, kwargs = registered_entry(task_id)
    cls = entry.load()
    if entry.package:  # an installed package's class or factory: any failure is one line naming the package
        from reasearch.evaluators.plugins import build, takes_any_keyword

        if not takes_any_keyword(cls):
            check_params(cls, task_id, params)
        return build(cls, task_id, entry.package, {**kwargs, **params})
    check_params(cls, task_id, params)  # a wrong name, type or range: one line naming the parameter
    kwargs.update(params)
    try:
        task = cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{task_id}: {exc}") from None
    if task.spec.id != task_id:
        raise ConfigError(f"parameters {params} change the task's id to {task.spec.id!r}; make that id instead")
    return task


def is_folder_ref(text: str) -> bool:
    """Whether a task argument names a folder (an existing one, or one written as a path) rather than an id."""
    return Path(text).is_dir() or text.startswith(("/", "./", "../", "~"))


def make_folder_task(folder: str, params: Mapping[str, Any] | None = None) -> FolderTask | PeerFolderTask:
    """The :class:`~reasearch.evaluators.folder.FolderTask` of a task folder, checked (its ``task.toml``, seed and
    parameters); a mistake is one line naming the file, the line and the fix. An OpenEvolve or ShinkaEvolve folder
    (:func:`~reasearch.evaluators.peer_folder.peer_folder_kind`) is a
    :class:`~reasearch.evaluators.peer_folder.PeerFolderTask`."""
    from reasearch.evaluators.folder import FolderTask
    from reasearch.evaluators.peer_folder import PeerFolderTask, peer_folder_kind

    task: FolderTask | PeerFolderTask
    if peer_folder_kind(folder) is not None:  # an OpenEvolve or ShinkaEvolve folder, run unchanged
        unknown = sorted(set(params or {}) - {"time_limit_s"})
        if unknown:
            raise ConfigError(f"{folder} is a peer's task folder: its one parameter is time_limit_s, "
                              f"not {unknown[0]!r}")
        task = PeerFolderTask(folder, time_limit_s=(params or {}).get("time_limit_s"))
    else:
        task = FolderTask(folder, dict(params or {}))
    task.spec  # noqa: B018 - reads and checks the folder now, not at the first evaluation
    return task


def build_task(task_id: str, params: Mapping[str, Any] | None = None, task_class: str = "") -> Task:
    """Builds a task from its id, parameters and class: the class when given, else the registry.

    This is how stored runs, resumes and remote workers rebuild a task (one code path).

    Raises:
        UnknownTaskError: no class given and the id is not registered.
        ConfigError: the class cannot be loaded, refuses the parameters, or builds another id.
    """
    params = dict(params or {})
    if not task_class:
        return make(task_id, **params)
    cls = _load_class(task_class)
    check_finite(params, f"parameters of {task_id}")  # a stored or hand-written spec: no NaN, infinity, huge int
    try:
        task = cls(**params)
    except TypeError as exc:
        raise ConfigError(f"{task_class}({params}): {exc}") from None
    if task.spec.id != task_id:
        raise ConfigError(f"{task_class}({params}) builds task {task.spec.id!r}, not {task_id!r}")
    return task


def task_class_of(spec: TaskSpec) -> type[Task]:
    """The Task class a spec names (its ``task_class``, else its registered id's)."""
    if spec.task_class:
        return _load_class(spec.task_class)
    return type(make(spec.id, **dict(spec.params)))


def spec(task_id: str, /, **params: Any) -> TaskSpec:
    """The :class:`TaskSpec` of a registered id (direction, limits, best known, entry points, class).

    Task constructors only store their keyword arguments (nothing is loaded, compiled or started),
    so this costs an import of the task's module and nothing else.
    """
    return make(task_id, **params).spec


def list_tasks(*, include_families: bool = True, expand: bool = True) -> list[str]:
    """Registered ids, sorted. Families are expanded through their ``enumerate`` callable."""
    _load_builtins()
    ids: list[str] = []
    for entry in _REGISTRY.values():
        if not entry.is_family:
            ids.append(entry.id)
            continue
        if include_families:
            ids.append(entry.id)
        if expand and entry.enumerate is not None:
            ids.extend(entry.id.format(**fields) for fields in entry.enumerate())
    return sorted(dict.fromkeys(ids))
