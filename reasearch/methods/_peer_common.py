"""What the peer methods (``openevolve``, ``gepa`` in peers.py; ``shinka`` in shinka_loop.py) share: a resumed
run's restart point, the result a program the peer hands back gets, and the end of the peer's process groups.

Trust boundary: the peer's program files are read as data (by :func:`reasearch.adapters.read_program`) and
evaluated only through the run's sandbox; the rest reads the run's store, written by the trusted side.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Iterable
from typing import Any

from reasearch.evaluators.result import EvalResult
from reasearch.methods._driver import Candidate, MethodDriver

__all__ = ["budget_result", "continue_after_record", "evaluate_program", "kill_groups"]


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


def evaluate_program(driver: MethodDriver, program_path: str, *, note: str, spent: Callable[[], str | None],
                     evaluated: list[int]) -> EvalResult:
    """The result of the program a peer's evaluator hands back at ``program_path``: the file's own failure
    when it cannot be read as a program, the refusal ``spent()`` words when the budget is spent (a spent
    model budget leaves proposed programs to evaluate), else the run's evaluation (its step appended to
    ``evaluated``)."""
    from reasearch.adapters import read_program

    source = read_program(program_path)
    if isinstance(source, EvalResult):
        return source
    reason = spent()
    if reason is not None:
        return budget_result(reason)
    result = driver.evaluate(source, parent=None, note=note).result
    evaluated.append(driver.step)
    return result


def kill_groups(procs: Iterable[subprocess.Popen[Any]]) -> None:
    """Kills each process's whole group (a peer's forked workers outlive a killed parent) and reaps it."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
