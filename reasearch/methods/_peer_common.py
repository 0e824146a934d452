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
import threading
from collections.abc import Callable, Iterable
from typing import Any

from reasearch.evaluators.result import EvalResult
from reasearch.methods._driver import Candidate, MethodDriver

__all__ = ["budget_result", "continue_after_record", "evaluate_program", "kill_groups", "prestart_sandbox"]


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
    cand = driver.evaluate(source, parent=None, note=note)
    evaluated.append(cand.step)  # its own step: the driver's counter moves on under other requests at once
    return cand.result


def prestart_sandbox(driver: MethodDriver) -> threading.Thread | None:
    """Starts, in the background, the sandbox worker that will evaluate the run's seed program, so that it
    starts while the peer's process imports its package and forks its workers (its first evaluation found
    a cold pool and waited for it: 24.8 s on a busy machine). The pool is the process's one pool, which
    serves every evaluation the peer's workers post to the proxy. Best effort: an executor without a local
    pool (Ray) or a slot already up starts nothing; a failure is left to the first evaluation to report.
    Returns the thread (None when nothing was started)."""
    pool = getattr(driver.run.executor, "pool", None)
    prestart = getattr(pool, "prestart", None)
    if not callable(prestart):
        return None

    def start() -> None:
        try:
            prestart(driver.task.build_request(driver.task.seed_program(), seed=int(driver.run.seed)))
        except Exception:  # noqa: BLE001 - the first evaluation starts the worker and reports its failure
            pass

    thread = threading.Thread(target=start, name="reasearch-prestart", daemon=True)
    thread.start()
    return thread


def kill_groups(procs: Iterable[subprocess.Popen[Any]]) -> None:
    """Kills each process's whole group (a peer's forked workers outlive a killed parent) and reaps it."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
