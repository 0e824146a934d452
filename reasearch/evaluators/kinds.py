"""What a task's candidate is, as types, and the options one evaluation of each kind takes.

Three kinds: a task whose candidate is one Python program (any :class:`Task`), a system prompt for a
student model (:class:`~reasearch.evaluators.prompt.task.PromptTask`) or a repository that trains a
model (:class:`~reasearch.evaluators.training.TrainingTask`). :func:`task_kind` is the one place that
tells them apart: code that does something kind-specific matches on what it returns (mypy checks that
every kind is handled) instead of comparing ``candidate_kind`` strings. ``Task.candidate_kind`` stays the
stored name of the kind (specs, records and reports write it); :func:`task_kind` refuses a task whose
declared name and type disagree (a plugin that says "prompt" without being a ``PromptTask``).

Kind-specific evaluation options travel as one typed object, :class:`PromptOptions` or
:class:`ExperimentOptions` (declared in :mod:`reasearch.evaluators.kind_options`, which the task modules
import; re-exported here), the ``options`` argument of that kind's ``evaluate``.

Trust boundary: none here (types and plain options); this module runs on the trusted side only.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from reasearch.errors import ConfigError
from reasearch.evaluators.base import CandidateKind, Task
from reasearch.evaluators.kind_options import ExperimentOptions, PromptOptions

if TYPE_CHECKING:
    from reasearch.evaluators.prompt.task import PromptTask
    from reasearch.evaluators.training import TrainingTask

__all__ = ["ExperimentOptions", "ProgramKind", "PromptKind", "PromptOptions", "RepositoryKind", "TaskKind",
           "task_kind"]


@dataclass(frozen=True, slots=True)
class ProgramKind:
    """A task whose candidate is one Python program (``candidate.py``)."""

    task: Task
    name: ClassVar[CandidateKind] = "program"


@dataclass(frozen=True, slots=True)
class PromptKind:
    """A task whose candidate is a system prompt for a student model."""

    task: PromptTask
    name: ClassVar[CandidateKind] = "prompt"


@dataclass(frozen=True, slots=True)
class RepositoryKind:
    """A training task: the candidate is a repository whose ``train.py`` trains a model in a time budget."""

    task: TrainingTask
    name: ClassVar[CandidateKind] = "repository"


TaskKind = ProgramKind | PromptKind | RepositoryKind

_PROMPT_MODULE = "reasearch.evaluators.prompt.task"
_TRAINING_MODULE = "reasearch.evaluators.training"


def task_kind(task: Task) -> TaskKind:
    """The kind of ``task``, narrowed to its type (the one place that tells the kinds apart).

    Raises:
        ConfigError: the task declares a ``candidate_kind`` its type does not have.
    """
    declared = task.candidate_kind
    # A task of a kind's class exists only once that class's module is loaded: a program task never loads them.
    if declared == "prompt" or _PROMPT_MODULE in sys.modules:
        from reasearch.evaluators.prompt.task import PromptTask

        if isinstance(task, PromptTask):
            return _agreed(PromptKind(task), declared)
    if declared == "repository" or _TRAINING_MODULE in sys.modules:
        from reasearch.evaluators.training import TrainingTask

        if isinstance(task, TrainingTask):
            return _agreed(RepositoryKind(task), declared)
    return _agreed(ProgramKind(task), declared)


def _agreed(kind: TaskKind, declared: str) -> TaskKind:
    if kind.name != declared:
        needs = {"prompt": "a PromptTask", "repository": "a TrainingTask", "program": "neither a PromptTask nor a "
                 "TrainingTask"}.get(declared, "one of program, prompt or repository")
        raise ConfigError(f"{type(kind.task).__name__} declares candidate_kind={declared!r} but is a {kind.name} "
                          f"task: a {declared} task must be {needs}")
    return kind
