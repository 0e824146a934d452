"""Starting and resuming agent runs on a store (the Python face of ``reasearch optimize`` / ``resume``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from reasearch.agent.config import AgentConfig
from reasearch.agent.loop import Agent, AgentProgress, AgentResult, require_prices
from reasearch.agent.models import Model
from reasearch.agent.tools.workspace import ExecFn
from reasearch.runs import Budget, Run, Store, Unit, open_store

__all__ = ["DEFAULT_RUN_DIR", "open_agent", "resume_run", "start_run"]

DEFAULT_RUN_DIR = "runs"


def start_run(task_id: str, *, budget: Budget | Mapping[str, float], config: AgentConfig | None = None,
              run_dir: str | Path = DEFAULT_RUN_DIR, store: Store | None = None,
              task_params: Mapping[str, Any] | None = None, seed: int = 0, models: Mapping[str, Model] | None = None,
              lessons: str | None = None, executor: Any = None, exec_fn: ExecFn | None = None,
              on_progress: Callable[[AgentProgress], None] | None = None, run_id: str | None = None,
              fleet: Mapping[str, Any] | None = None) -> Agent:
    """Creates a run of ``task_id`` and the agent that will work on it (call ``.optimize()``).

    Args:
        task_id: registry id, e.g. ``heilbronn/n11-v1``.
        budget: caps per unit, e.g. ``{"evaluations": 50, "dollars": 5}``.
        config: the agent's settings (models per role, limits); stored in the run for resume.
        run_dir: directory of the store and of ``<run_id>/workspace`` and ``<run_id>/transcripts``.
        store: an open store (default: the SQLite store in ``run_dir``).
        task_params: constructor parameters of the task.
        seed: the run's seed.
        models: model clients by role (default: built from ``config.models``).
        lessons: text preloaded into ``lessons.md`` (lessons of an earlier run).
        executor: where evaluations run (default: the engine's local executor).
        exec_fn: runner of ``python_exec``/``bash`` (default: the engine's ``exec_in_sandbox``).
        on_progress: called after every step.
        run_id: an explicit run id (fleets name their members); default a new unique id.
        fleet: ``{"id": ..., "caps": {...}}`` when the run is a fleet member (fleet-wide caps apply).
    """
    config = config or AgentConfig()
    budget = budget if isinstance(budget, Budget) else Budget.from_dict(budget)
    if budget.cap(Unit.DOLLARS) is not None:
        require_prices(config)  # before anything is stored: a dollar cap without prices could never bind
    store = store or open_store(run_dir)
    run_config: dict[str, Any] = {"driver": "agent", "agent": config.to_dict()}
    if fleet is not None:
        run_config["fleet"] = dict(fleet)
    run = Run.create(store, task_id=task_id, task_params=dict(task_params or {}), seed=seed, budget=budget,
                     config=run_config, executor=executor, run_id=run_id)
    return Agent(run, Path(run_dir) / run.id, config=config, models=models, lessons=lessons, exec_fn=exec_fn,
                 on_progress=on_progress)


def open_agent(run_id: str, *, run_dir: str | Path = DEFAULT_RUN_DIR, store: Store | None = None,
               models: Mapping[str, Model] | None = None, executor: Any = None, exec_fn: ExecFn | None = None,
               on_progress: Callable[[AgentProgress], None] | None = None, takeover: bool = False) -> Agent:
    """The agent of a stored run, configured as recorded (its models are rebuilt from the run's config).

    ``takeover=True`` resumes as the run's only driver: drivers known to be dead (a retried fleet
    task) lose their budget reservations at once.
    """
    store = store or open_store(run_dir)
    run = Run.open(store, run_id, executor=executor, resume=takeover, takeover=takeover)
    return Agent(run, Path(run_dir) / run.id, models=models, exec_fn=exec_fn, on_progress=on_progress)


def resume_run(run_id: str, **kwargs: Any) -> AgentResult:
    """Resumes a run: recorded steps replay without spending anything, then the agent goes on live."""
    agent = open_agent(run_id, **kwargs)
    agent.run.resume(takeover=bool(kwargs.get("takeover")))
    return agent.optimize()
