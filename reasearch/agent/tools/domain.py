"""``AgentDomain``: the toolset that works on a task's candidate, and everything the loop asks of it.

The loop holds exactly one domain, chosen by the task's kind: :class:`~reasearch.agent.tools.program.ProgramTools`
(one Python program), :class:`~reasearch.agent.tools.prompt.PromptTools` (a system prompt) or
:class:`~reasearch.agent.tools.experiments.ExperimentTools` (a repository trained in background
experiments). Each subclasses :class:`AgentDomain`, whose hooks have the defaults of a program task (write
the seed program, the default prompts, no background work), so the loop calls every hook on every domain
and never probes for one. A hook is a plain method, never a ``@tool``: the model cannot call it.

Trust boundary: none of its own; the hooks run on the host with the loop, and what they read of the
workspace goes through its guarded reader.
"""

from __future__ import annotations

from typing import Any, ClassVar

from reasearch.agent.prompts import START_MESSAGE
from reasearch.agent.snapshot import EvalRecord
from reasearch.agent.tools.context import ToolContext
from reasearch.runs.steering import start_source

__all__ = ["AgentDomain"]


class AgentDomain:
    """Base of the domain toolsets: the loop's hooks, each with a program task's default.

    Attributes:
        system_template: the system prompt, ``{task}`` standing for the task's description; None: the
            agent's default system prompt.
        start_message: the first user message of a run.
        current_label: the snapshot's heading of the current candidate.
    """

    system_template: ClassVar[str | None] = None
    start_message: ClassVar[str] = START_MESSAGE
    current_label: ClassVar[str] = "Current code: candidate.py"

    def __init__(self, ctx: ToolContext) -> None:
        self.ctx = ctx

    def setup_workspace(self) -> None:
        """Step 0: the starting candidate in the candidate file (a forked run's start, else the task's seed)."""
        self.ctx.workspace.write_text(self.ctx.task.candidate_file,
                                      start_source(self.ctx.run) or self.ctx.task.seed_program())

    def current_text(self) -> str | None:
        """The snapshot's current-candidate line, or None for the default (the candidate file's hash)."""
        return None

    def snapshot_lines(self) -> list[str]:
        """Lines added to every turn's snapshot (default: none)."""
        return []

    def collect(self, history: tuple[EvalRecord, ...]) -> list[dict[str, Any]]:
        """Background results that ended since the loop last looked, as tool-result data (default: none)."""
        return []

    def settle(self, *, stop: bool = False) -> None:
        """Waits for background work (``stop``: stops it first); default: there is none."""

    def on_finish(self, final: dict[str, Any]) -> None:
        """Called once the run has concluded with ``final`` (its final record); default: nothing."""
