"""Baseline optimizers that drive the same :class:`~reasearch.runs.Run` as the agent.

``best-of-n`` (independent samples), ``evolve`` (islands and MAP-Elites, OpenEvolve-style) and
``reflect`` (GEPA-style reflection on a Pareto front). Each spends the same budget unit through the
same run, cache, ledger and store as the agent, records its model calls in the same ledger, and
resumes after ``kill -9`` with nothing charged twice (see :mod:`reasearch.methods._driver`).

Example::

    from reasearch.methods import start_method
    from reasearch.runs import open_store

    runner = start_method("evolve", "heilbronn/n11-v1", budget={"evaluations": 20}, store=open_store("runs"),
                          model_spec=ModelSpec.parse("claude-sonnet-4-6"))
    print(runner.optimize())

Sits beside the agent (``fleets -> (agent | methods) -> runs``): imports models, runs and evaluators,
never the agent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from reasearch.errors import BudgetExceededError, ConfigError, ModelError
from reasearch.methods._driver import FINAL_EVENT, REPLY_EVENT, MethodDriver, config_from
from reasearch.methods.best_of_n import BestOfNConfig, best_of_n
from reasearch.methods.evolve import EvolveConfig, evolve
from reasearch.methods.peers import GepaConfig, OpenEvolveConfig, gepa_method, openevolve_method
from reasearch.methods.reflect import ReflectConfig, reflect
from reasearch.methods.shinka_loop import ShinkaConfig, shinka_method
from reasearch.models import Model, ModelSpec, build_model
from reasearch.runs import Budget, Run, RunState, Store
from reasearch.runs.fleet_link import FleetLink

__all__ = ["METHODS", "BestOfNConfig", "EvolveConfig", "MethodResult", "MethodRunner", "ReflectConfig",
           "method_config", "open_method", "start_method"]

# name -> (config class, loop)
METHODS: dict[str, tuple[type, Callable[[MethodDriver, Any], str]]] = {
    "best-of-n": (BestOfNConfig, best_of_n),
    "evolve": (EvolveConfig, evolve),
    "reflect": (ReflectConfig, reflect),
    "openevolve": (OpenEvolveConfig, openevolve_method),  # the installed package's own loop (extra "openevolve")
    "gepa": (GepaConfig, gepa_method),  # the installed package's own loop (extra "gepa")
    "shinka": (ShinkaConfig, shinka_method),  # ShinkaEvolve's loop, in the Python of $REASEARCH_SHINKA_PYTHON
}


_STEERABLE = frozenset({"best-of-n", "evolve", "reflect"})  # a person's interventions reach their loops


def method_config(method: str, data: Mapping[str, Any] | None = None) -> Any:
    """The typed config of ``method`` from plain data (unknown methods and keys are errors)."""
    if method not in METHODS:
        raise ConfigError(f"unknown method {method!r}; methods: {sorted(METHODS)} (and agent)")
    return config_from(METHODS[method][0], data)


@dataclass(frozen=True, slots=True)
class MethodResult:
    """How a method's run ended."""

    run_id: str
    method: str
    final_candidate: str | None
    final_score: float | None
    reason: str
    evaluations: int
    model_calls: int


class MethodRunner:
    """One method working on one run (``optimize()`` runs it to its end, replaying what is recorded)."""

    def __init__(self, run: Run, model: Model, method: str, config: Any) -> None:
        self.run = run
        self.method = method
        self.config = config
        self.driver = MethodDriver(run, model, method=method)

    def optimize(self) -> MethodResult:
        """Runs (or resumes) the method until its budget is spent; the run ends ``finished``."""
        final = next((e.payload for e in self.run.events(kind=FINAL_EVENT)), None)
        if final is not None and self.run.store.get_run(self.run.id).state is RunState.FINISHED:
            return self._result(dict(final))
        loop = METHODS[self.method][1]
        try:
            reason = loop(self.driver, self.config)
        except BudgetExceededError as exc:
            reason = str(exc)
        except ModelError as exc:  # resumable: every reply and evaluation up to here is stored
            self.run.finish(state="interrupted", reason=f"model error: {exc}")
            raise
        except KeyboardInterrupt:
            self.run.finish(state="interrupted", reason="interrupted by the user")
            raise
        best = self.driver.conclude(reason)
        return MethodResult(self.run.id, self.method, best.id if best else None,
                            best.result.score if best else None, reason, len(self.driver.history),
                            self.driver.model_calls)

    def _result(self, final: dict[str, Any]) -> MethodResult:
        st = self.run.status()
        return MethodResult(self.run.id, self.method, final.get("candidate"), final.get("score"),
                            str(final.get("stop_reason", "")), st.evaluations, int(final.get("model_calls", 0)))


def start_method(method: str, task_id: str, *, budget: Budget | Mapping[str, float], store: Store,
                 model_spec: ModelSpec, model: Model | None = None, config: Mapping[str, Any] | None = None,
                 task_params: Mapping[str, Any] | None = None, seed: int = 0, executor: Any = None,
                 run_id: str | None = None, fleet: FleetLink | Mapping[str, Any] | None = None) -> MethodRunner:
    """Creates a run of ``task_id`` driven by ``method`` (call ``.optimize()``).

    Args:
        method: ``best-of-n``, ``evolve`` or ``reflect``.
        budget: caps per unit, as for the agent (e.g. ``{"evaluations": 50}``).
        store: where the run is recorded.
        model_spec: the proposal model (recorded, so a resume rebuilds it).
        model: a client to use instead of building one from ``model_spec`` (tests, benchmarks).
        config: the method's settings (its config class's keys).
        fleet: the run's :class:`FleetLink` when it is a fleet member.

    Raises:
        ConfigError: unknown method or config key, a cap that allows nothing, a training task.
    """
    cfg = method_config(method, config)
    budget = budget if isinstance(budget, Budget) else Budget.from_dict(budget)
    for unit, cap in budget.units().items():
        if cap <= 0:
            raise ConfigError(f"the {unit.value} cap of {cap:g} allows nothing; give a cap above 0")
    run_config: dict[str, Any] = {"driver": "method", "method": method, "method_config": cfg.to_dict(),
                                  "model": model_spec.to_dict()}
    if method not in _STEERABLE:  # their own loop runs in the package: no step boundary of ours to steer at
        run_config["unsteerable"] = f"the {method} method runs the package's own loop, which takes no interventions"
    if fleet is not None:
        run_config["fleet"] = FleetLink.of(fleet).to_dict()
    run = Run.create(store, task_id=task_id, task_params=dict(task_params or {}), seed=seed, budget=budget,
                     config=run_config, executor=executor, run_id=run_id)
    try:
        return MethodRunner(run, model or build_model(model_spec, seed=run.seed), method, cfg)
    except Exception:
        run.finish(state="failed", reason="the method could not start (see the error)")
        raise


def open_method(run_id: str, *, store: Store, model: Model | None = None, executor: Any = None,
                takeover: bool = False) -> MethodRunner:
    """The method runner of a stored run, configured as recorded; resumes it as a driver.

    ``takeover=True`` charges the budget reservations of drivers known to be dead (a killed process) at
    their reserved amounts, once: the work they had in flight may have been answered and paid for.
    """
    run = Run.open(store, run_id, executor=executor)
    if store.get_run(run.id).state is not RunState.FINISHED:  # a finished run is only read back
        run.resume(takeover=takeover)
    if run.config.get("driver") != "method":
        raise ConfigError(f"run {run.id} is not a method's run (driver {run.config.get('driver')!r})")
    method = str(run.config["method"])
    cfg = method_config(method, run.config.get("method_config"))
    if model is None:
        model = build_model(ModelSpec.from_dict(run.config["model"]), seed=run.seed)
        if hasattr(model, "advance"):  # a scripted model skips the replies the run already holds
            model.advance(len(run.events(kind=REPLY_EVENT)))
    return MethodRunner(run, model, method, cfg)
