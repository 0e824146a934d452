"""Installed task packages: tasks a distribution registers through the ``reasearch.tasks`` entry-point group.

The contract (docs/your-own-task.md, "An installed task package"): each entry point's *name* is the task's
name and version (``name-vN``), its *value* ``package.module:attr`` names a
:class:`~reasearch.evaluators.base.Task` subclass (built with the ``-p`` parameters as keyword arguments) or a
factory function returning a ``Task`` (called the same way). The task id is namespaced by the value's top-level
module: ``my_tasks/name-v1`` for ``my_tasks.sub:Cls``, and the built task's spec must carry that id. A
namespace that is a built-in task family's is refused, and an id two packages declare belongs to the first
found; every such problem is one line naming the package, kept for ``reasearch tasks`` to print, and never
hides, replaces or breaks a built-in task.

Nothing of a package is imported until one of its ids is built (its entry point is read from its metadata).

Trust boundary: an installed package is code the user installed, run on the host like a task class. Its
candidates run in the sandbox like any program task's; the jail imports only ``reasearch``'s marked modules,
so a plugin task runs its candidate through a harness of ours (:data:`CALL_HARNESS`) and scores on the
trusted side.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from reasearch.errors import ConfigError

__all__ = ["GROUP", "CALL_HARNESS", "PluginEntry", "discover", "problem", "load_object", "build", "takes_any_keyword"]

GROUP = "reasearch.tasks"
#: The harness a plugin's program task names: it calls the candidate's entry point with the payload's
#: ``params`` it asks for by name (and ``seed``) and returns what it returned as plain data.
CALL_HARNESS = "reasearch.evaluators._folder_harness:folder_harness"

_VALUE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+-v\d+$")
_NAMESPACE = re.compile(r"^[a-z0-9_]+$")


@dataclass(frozen=True, slots=True)
class PluginEntry:
    """One entry point of the group: its name, what it names, and the package it came from."""

    name: str
    value: str
    package: str  # "name version"

    @property
    def id(self) -> str:
        """``<top-level module of the value>/<name>``."""
        return f"{self.value.split('.', 1)[0].split(':', 1)[0]}/{self.name}"


def discover() -> Iterable[PluginEntry]:
    """Every entry point of :data:`GROUP` among the installed distributions (read from metadata, not imported)."""
    for ep in importlib.metadata.entry_points(group=GROUP):
        dist = getattr(ep, "dist", None)
        package = f"{dist.metadata['Name']} {dist.version}" if dist is not None else f"the package of {ep.value}"
        yield PluginEntry(ep.name.strip(), ep.value.strip(), package)


def problem(entry: PluginEntry, builtin_namespaces: set[str], taken: dict[str, str]) -> str:
    """Why ``entry`` cannot be registered ("" when it can): a bad id or value, a built-in namespace, a clash."""
    where = f"task package {entry.package}: entry point {entry.name!r} of group {GROUP}"
    if not _NAME.match(entry.name):
        return f"{where}: the name must be a task's name and version like 'name-v1'; rename it in the package's " \
               "pyproject.toml"
    if not _VALUE.match(entry.value):
        return f"{where}: {entry.value!r} must name 'package.module:ClassOrFunction'"
    namespace = entry.id.split("/", 1)[0]
    if not _NAMESPACE.match(namespace):
        return f"{where}: its top-level module {namespace!r} names the ids' namespace: lower-case letters, digits, _"
    if namespace in builtin_namespaces:
        return f"{where}: its namespace {namespace!r} is a built-in task family's; rename the package's module"
    if entry.id in taken:
        return f"{where}: the id is already registered by {taken[entry.id]}; ignored (uninstall one of them)"
    return ""


def load_object(entry_id: str, value: str, package: str) -> Any:
    """The Task subclass or factory an entry point names; a failure is one :class:`ConfigError` naming the package."""
    from reasearch.evaluators.base import Task

    module, _, attr = value.partition(":")
    where = f"task {entry_id} of package {package}"
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # noqa: BLE001 - a broken package (ImportError, or its module raising) is one line
        raise ConfigError(f"{where}: cannot load {value}: {type(exc).__name__}: {exc}; fix or reinstall the "
                          f"package") from None
    if isinstance(obj, type):
        if not issubclass(obj, Task):
            raise ConfigError(f"{where}: {value} is a class but not a reasearch Task subclass")
        return obj
    if not inspect.isfunction(obj):
        raise ConfigError(f"{where}: {value} is {type(obj).__name__}, not a Task subclass or a function returning "
                          "a Task")
    return obj


def build(obj: Any, entry_id: str, package: str, kwargs: dict[str, Any]) -> Any:
    """Builds the task of a plugin's class or factory; whatever goes wrong is one line naming the package."""
    from reasearch.evaluators.base import Task

    where = f"task {entry_id} of package {package}"
    try:
        task = obj(**kwargs)
        task_id = task.spec.id if isinstance(task, Task) else None
    except ConfigError as exc:  # a parameter the task itself refused: its own message, which names it
        raise ConfigError(f"{where}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the package's bug, reported as one line
        raise ConfigError(f"{where}: building it raised {type(exc).__name__}: {exc}") from None
    if not isinstance(task, Task):
        raise ConfigError(f"{where}: the factory returned {type(task).__name__}, not a reasearch Task")
    if task_id != entry_id:
        raise ConfigError(f"{where}: it builds a task with id {task_id!r}; the entry point's name and the task's "
                          "spec id must be the same")
    return task


def takes_any_keyword(obj: Any) -> bool:
    """Whether a factory takes ``**kwargs`` (its task checks the parameters, not its signature)."""
    if isinstance(obj, type):
        return False
    return any(p.kind is p.VAR_KEYWORD for p in inspect.signature(obj).parameters.values())
