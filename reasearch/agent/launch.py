"""Starting and resuming agent runs on a store (the Python face of ``reasearch optimize`` / ``resume``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from reasearch.agent.config import AgentConfig
from reasearch.agent.loop import Agent, AgentProgress, AgentResult, require_prices
from reasearch.agent.tools.workspace import ExecFn
from reasearch.errors import ConfigError
from reasearch.models import Model
from reasearch.models.base import ModelSpec
from reasearch.runs import Budget, Run, Store, Unit, open_store
from reasearch.runs.events import EventKind
from reasearch.runs.fleet_link import FleetLink
from reasearch.runs.store import open_existing_store as _open_existing

__all__ = [
    "DEFAULT_RUN_DIR",
    "check_budget",
    "effective_config",
    "open_agent",
    "open_existing_store",
    "recorded_endpoints",
    "resume_run",
    "start_checked_run",
    "start_run",
]

DEFAULT_RUN_DIR = "runs"
MODELS_EVENT = EventKind.MODELS  # a resume that changed the models records the new ones under this kind
_COUNTED = (Unit.EVALUATIONS, Unit.STUDENT_CALLS, Unit.EXPERIMENTS, Unit.MODEL_CALLS)


def check_budget(budget: Budget) -> None:
    """Raises ConfigError when a cap allows nothing (``--budget 0``): refused before any model call."""
    for unit, cap in budget.units().items():
        nothing = not budget.allows(unit, 0.0, 1.0) if unit in _COUNTED else cap <= 0
        if nothing:
            raise ConfigError(f"the {unit.value} cap of {cap:g} allows nothing: the run could not do a single "
                              f"step; give a cap above 0 (or leave {unit.value} uncapped)")


def open_existing_store(run_dir: str | Path) -> Store:
    """The store of ``run_dir``; a missing SQLite store is an error (a mistyped directory is never created)."""
    return _open_existing(run_dir, hint="pass the --run-dir the run was started with")


def start_run(task_id: str, *, budget: Budget | Mapping[str, float], config: AgentConfig | None = None,
              run_dir: str | Path = DEFAULT_RUN_DIR, store: Store | None = None,
              task_params: Mapping[str, Any] | None = None, seed: int = 0, models: Mapping[str, Model] | None = None,
              lessons: str | None = None, executor: Any = None, exec_fn: ExecFn | None = None,
              on_progress: Callable[[AgentProgress], None] | None = None, run_id: str | None = None,
              fleet: FleetLink | Mapping[str, Any] | None = None) -> Agent:
    """Creates a run of ``task_id`` and the agent that will work on it (call ``.optimize()``).

    Args:
        task_id: registry id, e.g. ``heilbronn/n11-v1``.
        budget: caps per unit, e.g. ``{"evaluations": 50, "dollars": 5}``; a cap that allows nothing
            (``0``) is refused.
        config: the agent's settings (models per role, limits); stored in the run for resume.
        run_dir: directory of the store and of ``<run_id>/workspace`` and ``<run_id>/transcripts``.
        store: an open store (default: the SQLite store in ``run_dir``).
        task_params: constructor parameters of the task.
        seed: the run's seed.
        models: model clients by role (default: built from ``config.models``).
        lessons: text preloaded into ``lessons.md`` (lessons of an earlier run, or a library).
        executor: where evaluations run (default: the engine's local executor).
        exec_fn: runner of ``python_exec``/``bash`` (default: the engine's ``exec_in_sandbox``).
        on_progress: called after every step.
        run_id: an explicit run id (fleets name their members); default a new unique id.
        fleet: the run's :class:`FleetLink` when it is a fleet member (fleet-wide caps apply).

    Raises:
        ConfigError: a cap allows nothing, or a dollar cap without prices (nothing is stored then).
    """
    config = config or AgentConfig()
    budget = budget if isinstance(budget, Budget) else Budget.from_dict(budget)  # parsed once, here
    check_budget(budget)
    if budget.cap(Unit.DOLLARS) is not None:
        require_prices(config)  # before anything is stored: a dollar cap without prices could never bind
    return start_checked_run(task_id, budget=budget, config=config, run_dir=run_dir, store=store,
                             task_params=task_params, seed=seed, models=models, lessons=lessons, executor=executor,
                             exec_fn=exec_fn, on_progress=on_progress, run_id=run_id, fleet=fleet)


def start_checked_run(task_id: str, *, budget: Budget, config: AgentConfig, run_dir: str | Path = DEFAULT_RUN_DIR,
                      store: Store | None = None, task_params: Mapping[str, Any] | None = None, seed: int = 0,
                      models: Mapping[str, Model] | None = None, lessons: str | None = None, executor: Any = None,
                      exec_fn: ExecFn | None = None, on_progress: Callable[[AgentProgress], None] | None = None,
                      run_id: str | None = None, fleet: FleetLink | Mapping[str, Any] | None = None) -> Agent:
    """:func:`start_run` for a caller that has checked ``budget`` and ``config`` itself, once (``reasearch
    optimize`` does, each check where it reports it: :func:`check_budget` before any model is built,
    :func:`~reasearch.agent.model_calls.require_prices` before an endpoint is probed). Nothing is checked
    again here; the budget goes to :meth:`Run.create` as it is and is stored in its plain form."""
    store = store or open_store(run_dir)
    run_config: dict[str, Any] = {"driver": "agent", "agent": config.to_dict()}
    if fleet is not None:
        run_config["fleet"] = FleetLink.of(fleet).to_dict()
    run = Run.create(store, task_id=task_id, task_params=dict(task_params or {}), seed=seed, budget=budget,
                     config=run_config, executor=executor, run_id=run_id)
    try:
        return Agent(run, Path(run_dir) / run.id, config=config, models=models, lessons=lessons, exec_fn=exec_fn,
                     on_progress=on_progress)
    except BaseException:
        run.close()  # no agent drives it: its heartbeat stops (the caller records why it failed)
        raise


def effective_config(run: Any) -> AgentConfig:
    """The run's agent config with the models of its latest recorded model change applied."""
    config = AgentConfig.from_dict(dict(run.config.get("agent") or {}))
    change = _latest_models_event(run)
    if change is not None:
        config = replace(config, models=dict(change["models"]), fallbacks=dict(change.get("fallbacks") or {}))
    return config


def _latest_models_event(run: Any) -> dict[str, Any] | None:
    events = [e for e in run.events() if str(e.kind).split(".", 1)[0] == MODELS_EVENT]
    return dict(events[-1].payload) if events else None


def recorded_endpoints(run: Any) -> dict[str, str | None]:
    """The endpoint of each role as last recorded (at the start, or by a resume that changed models)."""
    change = _latest_models_event(run)
    if change is not None:
        return dict(change.get("endpoints") or {})
    start: Mapping[str, Any] = next((e.payload for e in run.events() if e.kind == EventKind.START), {})
    return dict(start.get("endpoints") or {})


def open_agent(run_id: str, *, run_dir: str | Path = DEFAULT_RUN_DIR, store: Store | None = None,
               models: Mapping[str, Model] | None = None, executor: Any = None, exec_fn: ExecFn | None = None,
               on_progress: Callable[[AgentProgress], None] | None = None,
               model_specs: Mapping[str, ModelSpec] | None = None, fallbacks: Mapping[str, ModelSpec] | None = None,
               allow_endpoint_change: bool = False, takeover: bool = False) -> Agent:
    """The agent of a stored run, configured as recorded (its models are rebuilt from the run's config).

    ``takeover=True`` resumes as the run's only driver: drivers known to be dead (a retried fleet
    task) have their budget reservations charged at once (work in flight may have been paid for; see
    :meth:`Store.reclaim`).

    Args:
        run_id: the run (or a unique prefix).
        run_dir: its run directory; a directory without a store is an error (nothing is created).
        model_specs: new model specs for some roles (``resume --model/--base-url/--price-*``): recorded
            as a ``models`` event before anything runs, and used by later resumes too.
        fallbacks: new fallback specs (replace the recorded ones when ``model_specs`` is given).
        allow_endpoint_change: let the models go to another endpoint than the one the run recorded
            (``--base-url`` given explicitly). Without it such a resume is refused.

    Raises:
        StoreError: no store in ``run_dir``, or no such run.
        ConfigError: the models would go to another endpoint than recorded.
    """
    store = store or open_existing_store(run_dir)
    run = Run.open(store, run_id, executor=executor, resume=takeover, takeover=takeover)
    if run.config.get("driver") == "mcp":  # its model was the MCP client: there is none to resume with here
        raise ConfigError(f"run {run.id} was driven over MCP: continue it with `reasearch mcp --run {run.id}`")
    if run.config.get("driver") == "method":  # a baseline's run: the agent must not take it over
        raise ConfigError(f"run {run.id} was driven by the {run.config.get('method')} method, not the agent: continue "
                          "its comparison with `reasearch fleet resume FLEET_ID` (or reasearch.methods.open_method)")
    config = effective_config(run)
    if model_specs:
        config = replace(config, models={**dict(config.models), **dict(model_specs)},
                         fallbacks=dict(fallbacks if fallbacks is not None else config.fallbacks))
    fleet_caps = dict(link.caps) if (link := FleetLink.from_config(run.config)) else {}
    # A fleet-wide dollar cap binds the members whose models have a price (a local model's has none); the
    # run's own dollar cap needs prices (start_run checked them for the models it started with).
    if run.remaining().get(Unit.DOLLARS) is not None and "dollars" not in fleet_caps:
        require_prices(config)
    agent = Agent(run, Path(run_dir) / run.id, config=config, models=models, exec_fn=exec_fn, on_progress=on_progress)
    now = agent.calls.endpoints()
    before = recorded_endpoints(run)
    moved = {role: (before[role], now.get(role)) for role in before
             if before[role] is not None and now.get(role) is not None and now.get(role) != before[role]}
    if moved and not allow_endpoint_change:
        role, (old, new) = sorted(moved.items())[0]
        raise ConfigError(f"run {run.id} sent its {role} model to {old}; this resume would send it to {new} "
                          f"(from --model, $ANTHROPIC_BASE_URL or the default). Pass --base-url {old} to keep the "
                          f"recorded endpoint, or --base-url {new} to switch on purpose")
    if model_specs:
        kind = next(k for k in (MODELS_EVENT, *(f"{MODELS_EVENT}.{i}" for i in range(1, 10_000)))
                    if agent.journal.get(agent.journal.last_recorded + 1, k) is None)
        agent.journal.record(agent.journal.last_recorded + 1, kind, {
            "models": {role: spec.to_dict() for role, spec in config.models.items()},
            "fallbacks": {role: spec.to_dict() for role, spec in config.fallbacks.items()},
            "endpoints": now, "previous_endpoints": before})
    return agent


def resume_run(run_id: str, **kwargs: Any) -> AgentResult:
    """Resumes a run: recorded steps replay without spending anything, then the agent goes on live."""
    agent = open_agent(run_id, **kwargs)
    agent.run.resume(takeover=bool(kwargs.get("takeover")))
    return agent.optimize()
