"""GEPA inside a run: its student calls go through the run's ledger and GEPA stops at the run's budget.

Trust boundary: GEPA is trusted code; the prompts it proposes are not. ``RunStudentCaller`` hands each
batch to the run's :class:`~reasearch.runs.students.StudentLedger` (stored, debited, capped, repeats
free) at a fresh step, so a GEPA run and an agent run of the same task are charged in one ledger.
``RunBudgetStop`` is a GEPA stop condition: True once the run's student-call budget is spent, so GEPA's
own loop ends there; calls past the cap are ``REFUSED`` by the ledger and never made.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reasearch.evaluators.prompt import StudentReply, StudentRequest
from reasearch.runs.ledger import Unit
from reasearch.runs.prompt_splits import prompt_task_of
from reasearch.runs.run import Run
from reasearch.runs.students import StudentLedger

__all__ = ["RunBudgetStop", "RunStudentCaller", "gepa_for_run"]


class RunStudentCaller:
    """The run's ledger as a student caller, one step per batch (after the run's last recorded step)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.step = max(run.last_step(), 0)

    def call_batch(self, requests: Sequence[StudentRequest]) -> list[StudentReply]:
        self.step += 1
        return StudentLedger(self.run, step=self.step).call_batch(requests)  # "student": a repeat in this run is free


class RunBudgetStop:
    """GEPA stop condition: the run's student calls are spent (an uncapped run never stops here)."""

    def __init__(self, run: Run) -> None:
        self.run = run

    def __call__(self, gepa_state: Any = None) -> bool:
        left = self.run.remaining().get(Unit.STUDENT_CALLS)
        return left is not None and left <= 0


def gepa_for_run(run: Run, caller: Any = None) -> dict[str, Any]:
    """Keyword arguments for ``gepa.optimize`` on a run's prompt task: datasets, adapter, budget stop.

    ``caller`` replaces :class:`RunStudentCaller` (a method that numbers the run's steps itself passes its own).
    """
    from reasearch.adapters.gepa import PromptGEPAAdapter, gepa_datasets

    task = prompt_task_of(run)
    trainset, valset = gepa_datasets(task)
    return {
        "trainset": trainset,
        "valset": valset,
        "adapter": PromptGEPAAdapter(task, caller if caller is not None else RunStudentCaller(run)),
        "stop_callbacks": [RunBudgetStop(run)],
    }
