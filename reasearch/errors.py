"""The exception tree: one root, narrow subclasses, messages that say what to do."""

from __future__ import annotations

__all__ = [
    "ReasearchError",
    "ConfigError",
    "UnknownTaskError",
    "TaskDefinitionError",
    "TaskCheckError",
    "SandboxError",
    "SandboxUnavailableError",
    "StoreError",
    "RunNotFoundError",
    "FleetNotFoundError",
    "BudgetExceededError",
    "ModelError",
    "TaskFolderError",
]


class ReasearchError(Exception):
    """Root of every error this package raises on purpose."""


class ConfigError(ReasearchError, ValueError):
    """A configuration value or parameter is wrong (unknown key, bad range, bad type)."""


class UnknownTaskError(ReasearchError, KeyError):
    """No task is registered under the requested id."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class TaskDefinitionError(ReasearchError):
    """A task (or its data) is defined inconsistently: a bug in the task, not in a candidate."""


class TaskFolderError(ConfigError):
    """A task folder is wrong (a missing entry point, a score.py that raises, a parameter without a type):
    the message names the file, the line and the fix."""


class TaskCheckError(ReasearchError, AssertionError):
    """``check_task`` found a task that breaks the Task API contract."""


class SandboxError(ReasearchError):
    """The sandbox engine itself failed (not the candidate): raised with its traceback."""


class SandboxUnavailableError(SandboxError):
    """The requested isolation mode cannot run on this machine; the message says why and how to fix it."""


class StoreError(ReasearchError):
    """The run store cannot be opened or written (bad URL, unknown schema version, ...)."""


class RunNotFoundError(StoreError):
    """The store holds no run with this id (nor a unique prefix of it): the one "not stored (yet)" answer.

    A store that failed (a full disk, a lost connection, a locked file) raises a plain :class:`StoreError`
    instead: code that reads "no run" as "create it" catches only this subclass."""


class AmbiguousIdError(StoreError):
    """An id prefix matches more than one stored run: the caller's input, not a store failure."""


class FleetNotFoundError(StoreError):
    """The store holds no fleet with this id; a store that failed raises a plain :class:`StoreError`."""


class BudgetExceededError(ReasearchError):
    """A budget cap was reached; raised only where a status result is not possible."""


class ModelError(ReasearchError):
    """A model client failed after its retries (or was configured wrongly, e.g. no API key)."""
