"""What the peer methods (``openevolve``, ``gepa`` in peers.py; ``shinka`` in shinka_loop.py) share: a resumed
run's restart point and the result a program gets once the budget is spent.

Trust boundary: none of its own (it reads the run's store, written by the trusted side).
"""

from __future__ import annotations

from reasearch.evaluators.result import EvalResult
from reasearch.methods._driver import Candidate, MethodDriver

__all__ = ["budget_result", "continue_after_record"]


def budget_result(reason: str) -> EvalResult:
    from reasearch.evaluators.result import Status

    return EvalResult.failure(Status.REFUSED, f"not evaluated: {reason}")


def continue_after_record(driver: MethodDriver) -> None:
    """A resumed run: the peer's loop is not a function of the recorded replies, so it is not replayed; it
    starts again after the last recorded step on what the budget has left (nothing recorded is paid
    again), and the recorded evaluations stay candidates for the final choice."""
    run = driver.run
    for ev in run.store.evaluations(run.id):
        if ev.candidate_id:
            driver.history.append(Candidate(ev.step, ev.candidate_id, run.candidate_source(ev.candidate_id), None,
                                            ev.result))
    driver.step = max(driver.step, driver.replay_until)
