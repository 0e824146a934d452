"""``ToolContext``: the little the program and control tools may use of a running agent.

Tools know nothing of the loop (no import of :mod:`reasearch.agent.loop`): the loop builds a context
of plain objects and callbacks, and the tools take it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from reasearch.agent.snapshot import EvalRecord
from reasearch.agent.tools.workspace import Workspace
from reasearch.evaluators.base import Task
from reasearch.models.messages import ModelReply, ModelRequest
from reasearch.runs.run import Run

__all__ = ["Complete", "ToolContext", "ToolState"]

Complete = Callable[[str, ModelRequest, str], ModelReply]  # (role, request, journal kind) -> reply


@dataclass(frozen=True, slots=True)
class ToolState:
    """The loop's state as a tool sees it when it runs.

    Attributes:
        step: the step of the running tool call (recorded with evaluations).
        parent: the last evaluated candidate, or None (a repository experiment's parent; programs and prompts
            take the most similar stored candidate: Run.lineage_parent).
        history: every evaluation of the run so far, oldest first.
    """

    step: int
    parent: str | None
    history: tuple[EvalRecord, ...]


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What the program and control tools work with.

    Attributes:
        run: the run (evaluations and candidates are recorded there).
        task: the run's task.
        workspace: the agent's workspace (``candidate.py`` lives there).
        complete: a journaled, debited model call ``complete(role, request, kind)``.
        state: the loop's current :class:`ToolState`.
        status: the state snapshot text, without lessons.md.
    """

    run: Run
    task: Task
    workspace: Workspace
    complete: Complete
    state: Callable[[], ToolState]
    status: Callable[[], str]
