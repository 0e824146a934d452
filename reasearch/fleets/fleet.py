"""Fleets: many agent runs at once (tasks x seeds x models), on one machine or a Ray cluster.

A fleet is a :class:`FleetSpec` stored in the run store under a fleet id, and one agent run per
member (``<fleet id>-m000``, ``-m001``, ...), each an ordinary run of that store: ``reasearch runs``,
``show``, ``export`` and ``resume`` work on them. Members run in parallel:

- ``executor="local"``: threads of this process (one warm sandbox pool shared by every agent);
- ``executor="ray"``: one Ray task per member (Ray schedules them over the cluster's nodes; each
  node's process evaluates in its own sandbox pool). A member whose node dies is retried by Ray; the
  retry resumes the member's run from the store as its only driver (recorded steps replay without
  spending anything), so a lost node loses no work and spends nothing twice.

The store is the one place every member writes: a multi-node fleet needs PostgreSQL (a SQLite file
belongs to one machine). A fleet-wide cap (dollars, tokens) binds every member: each member's run
sees what the whole fleet has left (:meth:`reasearch.runs.Run.remaining`).

``resume_fleet`` finishes whatever a crash left: members never started start, unfinished and failed
ones resume, finished ones are only read. A member that raises (a bug, a reply nothing can read) ends
``failed`` with the exception as its run's reason; the other members go on.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import json
import os
import statistics
import time
import tomllib
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from reasearch.agent.config import AgentConfig
from reasearch.agent.launch import open_agent, start_run
from reasearch.errors import ConfigError, RunNotFoundError, StoreError
from reasearch.evaluators.params import check_finite
from reasearch.evaluators.registry import is_folder_ref
from reasearch.evaluators.registry import spec as task_spec
from reasearch.evaluators.training import heldout_public_of
from reasearch.fleets._handover import RETRY_HANDOVER_S, wait_for_other_drivers
from reasearch.methods import method_config, open_method, start_method
from reasearch.models import ModelSpec, build_model
from reasearch.runs import Budget, Run, RunState, Store, Unit, open_store
from reasearch.runs.fleet_link import FleetLink
from reasearch.runs.ray_cluster import connect_ray, gpu_options
from reasearch.runs.run import effective_state
from reasearch.runs.store import MAX_FLEET_ID_LEN, check_id

__all__ = ["FleetSpec", "FleetMember", "MemberResult", "FleetReport", "run_fleet", "resume_fleet", "fleet_report",
           "fleet_report_in"]

_REASON_CHARS = 300  # of a failed member's exception message, kept in its run's reason


@dataclass(frozen=True, slots=True)
class FleetMember:
    """One agent run of a fleet: a task, a seed, a model and, for multi-trace fleets, a trace number."""

    index: int
    task_id: str
    seed: int
    model: str
    trace: int = 0
    shared: bool = False  # a trace that shares lessons and best candidates with the others of its group
    method: str = "agent"  # the optimizer: agent, agent:<ablation>, or a baseline of reasearch.methods

    def run_id(self, fleet_id: str) -> str:
        return f"{fleet_id}-m{self.index:03d}"

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "task_id": self.task_id, "seed": self.seed, "model": self.model,
                "trace": self.trace, "shared": self.shared, "method": self.method}


@dataclass(frozen=True, slots=True)
class FleetSpec:
    """What a fleet runs: every task x seed x model (x trace), each under the same per-run budget.

    Attributes:
        tasks: registry ids.
        seeds: run seeds.
        models: model names as ``reasearch optimize --model`` takes them (``claude-...``,
            ``openai/NAME``, ``scripted/FILE``).
        budget: per-run caps, e.g. ``{"evaluations": 50, "dollars": 2}``.
        caps: fleet-wide caps over all members (e.g. ``{"dollars": 20}``); every member stops when spent.
        parallelism: members running at once.
        traces: agents per (task, seed, model): independent traces at the same per-run budget.
        task_params: constructor parameters per task id.
        agent: :class:`~reasearch.agent.AgentConfig` settings for every member (``max_turns``, ...).
        base_url: endpoint of the ``openai/...`` members (an OpenAI-compatible ``.../v1`` URL); a fleet
            with no ``openai/`` model sends every member there (an Anthropic proxy). Anthropic members of
            a mixed fleet use ``$ANTHROPIC_BASE_URL`` or the default endpoint.
        price_in: USD per million input tokens for every member's model (models without a list price).
        price_out: USD per million output tokens.
        share_traces: with ``traces > 1``, the traces of one (task, seed, model) see each other's
            lessons in their snapshots and may adopt each other's best candidate; False runs them
            independently; ``"both"`` runs each group twice, shared and independent, at the same
            per-run budget, and the results table compares the two.
        methods: the optimizers every (task, seed, model) runs: ``agent``, ``agent:no-snapshot`` (or
            ``no-lessons``, ``no-compaction``), ``best-of-n``, ``evolve``, ``reflect``.
        task_budgets: per-task caps replacing ``budget`` for that task (a prompt task's unit is
            student calls, a program task's evaluations).
        method_configs: settings per baseline method (the keys of its config class).
    """

    tasks: tuple[str, ...]
    seeds: tuple[int, ...] = (0,)
    models: tuple[str, ...] = ("claude-sonnet-4-6",)
    budget: Mapping[str, float] = field(default_factory=lambda: {"evaluations": 50})
    caps: Mapping[str, float] = field(default_factory=dict)
    parallelism: int = 2
    traces: int = 1
    task_params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    agent: Mapping[str, Any] = field(default_factory=dict)
    base_url: str | None = None
    price_in: float | None = None
    price_out: float | None = None
    share_traces: bool | str = True
    methods: tuple[str, ...] = ("agent",)
    task_budgets: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    method_configs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.share_traces not in (True, False, "both"):
            raise ConfigError(f"share_traces is true, false or \"both\", not {self.share_traces!r}")
        for name in ("tasks", "seeds", "models", "methods"):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
                raise ConfigError(f"a fleet's {name} is a non-empty list, not {value!r}")
            object.__setattr__(self, name, tuple(value))
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        if self.parallelism < 1 or self.traces < 1:
            raise ConfigError("parallelism and traces must be >= 1")
        Budget.from_dict(self.budget)  # unknown units and bad caps fail here, before anything runs
        caps = Budget.from_dict(self.caps)
        if caps.units() and not set(caps.units()) <= {Unit.DOLLARS, Unit.TOKENS, Unit.MODEL_CALLS}:
            raise ConfigError("fleet-wide caps apply to model spending: dollars, tokens or model_calls")
        unknown = set(self.task_params) - set(self.tasks)
        if unknown:
            raise ConfigError(f"task_params for tasks the fleet does not run: {sorted(unknown)}")
        known = {f.name for f in fields(AgentConfig)} - {"models"}
        if set(self.agent) - known:
            raise ConfigError(f"unknown agent settings {sorted(set(self.agent) - known)}; known: {sorted(known)}")
        AgentConfig(**{**dict(self.agent), "models": {"agent": ModelSpec()}})  # bad values fail here
        for model in self.models:
            self.model_spec(model)  # validated with its endpoint: openai/NAME needs the fleet's base_url
        for method in self.methods:
            check_method(method, self.method_configs.get(method))
        unknown = (set(self.task_budgets) - set(self.tasks)) | (set(self.method_configs) - set(self.methods))
        if unknown:
            raise ConfigError(f"task_budgets or method_configs name what the fleet does not run: {sorted(unknown)}")
        for task_caps in self.task_budgets.values():
            Budget.from_dict(task_caps)

    def members(self) -> list[FleetMember]:
        """Every member, in a stable order (task, seed, model, trace)."""
        shared = self.traces > 1 and self.share_traces is not False
        modes = (True, False) if self.traces > 1 and self.share_traces == "both" else (shared,)
        combos = itertools.product(self.tasks, self.seeds, self.models, self.methods, modes, range(self.traces))
        return [FleetMember(i, t, s, m, tr, sh, me) for i, (t, s, m, me, sh, tr) in enumerate(combos)]

    def model_spec(self, model: str) -> ModelSpec:
        """The spec of a member's ``model``, with the endpoint it uses (see ``base_url``)."""
        providers = {_provider(m) for m in self.models}
        mixed = "openai" in providers and "anthropic" in providers
        base_url = self.base_url if _provider(model) == "openai" or not mixed else None
        return ModelSpec.parse(model, base_url=base_url, price_in=self.price_in, price_out=self.price_out)

    def agent_config(self, model: str, method: str = "agent") -> AgentConfig:
        """The agent settings of a member using ``model`` (with the ablation ``method`` names, if any)."""
        _, _, ablation = method.partition(":")
        extra = AgentConfig.ablation(ablation) if ablation else {}
        return AgentConfig(**{**dict(self.agent), **extra, "models": {"agent": self.model_spec(model)}})

    def budget_of(self, task_id: str) -> Mapping[str, float]:
        """The per-run caps of ``task_id``'s members."""
        return self.task_budgets.get(task_id, self.budget)

    def to_dict(self) -> dict[str, Any]:
        return {"tasks": list(self.tasks), "seeds": list(self.seeds), "models": list(self.models),
                "budget": dict(self.budget), "caps": dict(self.caps), "parallelism": self.parallelism,
                "traces": self.traces, "task_params": {k: dict(v) for k, v in self.task_params.items()},
                "agent": dict(self.agent), "base_url": self.base_url, "price_in": self.price_in,
                "price_out": self.price_out, "share_traces": self.share_traces,
                # written only when used, so a fleet recorded before methods existed compares equal
                **({"methods": list(self.methods)} if self.methods != ("agent",) else {}),
                **({"task_budgets": {k: dict(v) for k, v in self.task_budgets.items()}} if self.task_budgets else {}),
                **({"method_configs": {k: dict(v) for k, v in self.method_configs.items()}}
                   if self.method_configs else {})}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FleetSpec:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ConfigError(f"unknown fleet spec keys {sorted(unknown)}; known: {sorted(known)}")
        check_finite(dict(d), "fleet spec")  # NaN, inf (TOML's nan/inf, JSON's NaN/Infinity/1e400), huge ints
        return cls(**dict(d))

    @classmethod
    def from_file(cls, path: str | Path) -> FleetSpec:
        """A spec from a JSON or TOML file (the keys of :class:`FleetSpec`). A task folder written as a relative
        path (``"./my_task"``, ``"../tasks/x"``, or a bare name of a folder beside the file) is the folder next to
        the spec file, whatever the current directory, and is stored by its absolute path."""
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read fleet spec {p}: {exc.strerror}") from None
        try:
            data = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
        except (ValueError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{p}: not valid {'TOML' if p.suffix == '.toml' else 'JSON'}: {exc}") from None
        if isinstance(data, dict):
            check_finite(data, f"fleet spec {p}")
            data = _folders_beside(data, p.resolve().parent)
        return cls.from_dict(data)


def _folders_beside(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """A spec file's task folders (in ``tasks`` and as keys of ``task_params`` and ``task_budgets``) by their absolute
    paths, a relative one read against the spec file's folder ``base``; registry ids as written."""

    def ref(task: Any) -> Any:
        if not isinstance(task, str):
            return task  # the spec's own check names what is wrong
        path = Path(task).expanduser()
        if path.is_absolute() or task.startswith(("./", "../")) or (base / path).is_dir():
            return str((base / path).resolve())  # base / an absolute path is that path
        return task

    out = dict(data)
    if isinstance(out.get("tasks"), list):
        out["tasks"] = [ref(t) for t in out["tasks"]]
    for key in ("task_params", "task_budgets"):
        if isinstance(out.get(key), dict):
            out[key] = {ref(k): v for k, v in out[key].items()}
    return out


@dataclass(frozen=True, slots=True)
class MemberResult:
    """How one member ended, read from the store."""

    member: FleetMember
    run_id: str
    state: str
    best_score: float | None
    normalized: float | None
    evaluations: int
    used: Mapping[str, float]
    reason: str = ""
    node: str = ""
    heldout_public: bool | None = None  # a training task's: its held-out data is public (None: not stated)

    def to_dict(self) -> dict[str, Any]:
        return {**self.member.to_dict(), "run_id": self.run_id, "state": self.state, "best_score": self.best_score,
                "normalized": self.normalized, "evaluations": self.evaluations, "used": dict(self.used),
                "reason": self.reason, "node": self.node, "heldout_public": self.heldout_public}


@dataclass(frozen=True, slots=True)
class FleetReport:
    """Every member's result and the aggregate per (task, model)."""

    fleet_id: str
    members: tuple[MemberResult, ...]
    wall_s: float = 0.0

    def groups(self) -> list[dict[str, Any]]:
        """Mean and spread of the best normalized score per (task, model), over seeds and traces."""
        out = []
        key = lambda m: (m.member.task_id, m.member.model, m.member.method, m.member.shared)  # noqa: E731
        for (task, model, method, shared), group in itertools.groupby(sorted(self.members, key=key), key=key):
            rows = list(group)
            scores = [r.normalized if r.normalized is not None else r.best_score for r in rows]
            vals = [s for s in scores if s is not None]
            out.append({"task_id": task, "model": model, "method": method,
                        "traces": "shared" if shared else "independent",
                        "runs": len(rows),
                        "finished": sum(r.state == RunState.FINISHED.value for r in rows),
                        "mean": statistics.fmean(vals) if vals else None,
                        "std": statistics.stdev(vals) if len(vals) > 1 else (0.0 if vals else None),
                        "best": max(vals) if vals else None,
                        "dollars": sum(r.used.get("dollars", 0.0) for r in rows),
                        "evaluations": sum(r.evaluations for r in rows)})
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"fleet_id": self.fleet_id, "wall_s": self.wall_s, "members": [m.to_dict() for m in self.members],
                "groups": self.groups()}


def _provider(model: str) -> str:
    """The provider ``ModelSpec.parse`` gives ``model`` (a name without a known prefix is Anthropic's)."""
    if model == "demo":
        return "demo"
    prefix, sep, _ = model.partition("/")
    return prefix if sep and prefix in ("anthropic", "openai", "scripted", "demo") else "anthropic"


def new_fleet_id() -> str:
    return "fleet-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def _member_result(store: Store, member: FleetMember, run_id: str, node: str = "") -> MemberResult:
    try:
        rec = store.get_run(run_id)
    except RunNotFoundError:  # reserved, not created yet (a store that failed raises on)
        return MemberResult(member, run_id, "pending", None, None, 0, {}, node=node)
    run = Run(store, rec)
    st = run.status()
    normalized = None
    if st.best_score is not None:
        normalized = run.task.spec.normalize(st.best_score)
    if not node:  # read from the store (a live table, `fleet show`): the host of the member's latest driver
        drivers = store.drivers(run_id)
        node = max(drivers, key=lambda d: d.started_at).host if drivers else ""
    return MemberResult(member, run_id, effective_state(store, rec).value, st.best_score, normalized,
                        st.evaluations, {u.value: v for u, v in st.used.items() if v}, rec.reason, node,
                        heldout_public_of(run.task))


def run_member(fleet_id: str, spec_data: Mapping[str, Any], member_data: Mapping[str, Any], store_url: str,
               run_dir: str, folders: Sequence[Mapping[str, Any]] | None = None, *,
               handover_s: float = 0.0) -> dict[str, Any]:
    """Runs (or resumes) one member to its end; what a local thread or a Ray task executes.

    Plain data in and out, so that it crosses process boundaries. A member already finished is only
    read; one recorded but unfinished (or failed: a resume retries it) is resumed by this process as its
    only driver. A member that raises ends ``failed`` with the exception as its reason (its run keeps
    what it recorded) and the others go on; one its model interrupted stays ``interrupted``. A recorded run
    another process still holds is waited for up to ``handover_s`` seconds before the takeover (a Ray retry:
    the worker of a node that died may not be gone yet, see :mod:`reasearch.fleets._handover`).
    """
    spec = FleetSpec.from_dict(spec_data)
    member = FleetMember(**member_data)
    node = os.uname().nodename
    if folders:  # the fleet's task folders, shipped by content (a node need not hold the path)
        from reasearch.evaluators.folder import unpack_folder

        for bundle in folders:
            unpack_folder(bundle)
    with open_store(store_url) as store:
        run_id = store.add_fleet_member(fleet_id, member.index, member.run_id(fleet_id))
        try:
            _drive_member(fleet_id, spec, member, store, run_id, run_dir, handover_s)
        except Exception as exc:  # this member's failure is its own: recorded, the fleet goes on
            try:
                return _record_failure(store, member, run_id, node, exc).to_dict()
            except StoreError as lost:  # a full disk (say) keeps the failure out of the store: resumable, said so
                reason = (f"{failure_reason(exc)}; the failure could not be recorded "
                          f"({printable_line(str(lost))[:300]}): the run is interrupted, "
                          f"`reasearch fleet resume {fleet_id}` continues it")
                try:
                    return replace(_member_result(store, member, run_id, node), reason=reason).to_dict()
                except StoreError:  # the store cannot even be read: what this process saw, nothing more
                    return MemberResult(member, run_id, RunState.INTERRUPTED.value, None, None, 0, {}, reason,
                                        node).to_dict()
        return _member_result(store, member, run_id, node).to_dict()


def _drive_member(fleet_id: str, spec: FleetSpec, member: FleetMember, store: Store, run_id: str,
                  run_dir: str, handover_s: float) -> None:
    try:
        rec = store.get_run(run_id)
    except RunNotFoundError:  # only "no such run" starts one: a store that failed raises on (never a second create)
        rec = None
    if rec is not None and rec.state is RunState.FINISHED:
        return
    if rec is not None:  # resumed as its only driver: a driver that died with its node may still be exiting
        wait_for_other_drivers(store, run_id, handover_s)
    if not member.method.startswith("agent"):
        _run_method(fleet_id, spec, member, store, run_id, rec is None)
        return
    if rec is None:
        config = spec.agent_config(member.model, member.method)
        models = {role: build_model(s, seed=member.seed) for role, s in config.models.items()}
        agent = start_run(
            member.task_id,
            budget=spec.budget_of(member.task_id),
            config=config,
            run_dir=run_dir,
            store=store,
            task_params=dict(spec.task_params.get(member.task_id, {})),
            seed=member.seed,
            models=models,
            run_id=run_id,
            fleet=FleetLink(fleet_id, member.index, dict(spec.caps), member.trace, member.shared),
        )
    else:  # models rebuilt from the run's own config, advanced past the replies its journal holds
        agent = open_agent(run_id, run_dir=run_dir, store=store, takeover=True)
    try:
        agent.optimize()
    finally:
        agent.run.close()


def printable_line(text: str) -> str:
    """``text`` on one line, control characters escaped (``\\x1b``): a reason may quote a model's reply, and a
    terminal or log that shows it must not take it as commands."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in " ".join(text.split()))


def failure_reason(exc: BaseException) -> str:
    """One line naming what a member raised and where: ``crashed: Type: message (at file:line in function)``."""
    message = printable_line(str(exc))
    if len(message) > _REASON_CHARS:
        message = message[:_REASON_CHARS] + "..."
    frames = traceback.extract_tb(exc.__traceback__)  # frames only: nothing is formatted (nor parsed)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return f"crashed: {type(exc).__name__}" + (f": {message}" if message else "") + where


def _record_failure(store: Store, member: FleetMember, run_id: str, node: str, exc: BaseException) -> MemberResult:
    """Marks the member's run ``failed`` with ``exc`` as its reason (unless its loop already ended it
    ``interrupted``, a resumable model error); a member that failed before its run existed is reported only."""
    reason = failure_reason(exc)
    try:
        rec = store.get_run(run_id)
    except RunNotFoundError:
        return MemberResult(member, run_id, RunState.FAILED.value, None, None, 0, {}, reason, node)
    if rec.state is RunState.RUNNING:
        store.set_run_state(run_id, RunState.FAILED, reason=reason)
    return _member_result(store, member, run_id, node)


def check_method(method: str, config: Mapping[str, Any] | None = None) -> None:
    """Raises ConfigError for an unknown method, ablation or method setting."""
    name, _, ablation = method.partition(":")
    if name == "agent":
        if ablation:
            AgentConfig.ablation(ablation)
        if config:
            raise ConfigError("the agent's settings go in the fleet's agent section, not method_configs")
        return
    method_config(method, config)


def _run_method(fleet_id: str, spec: FleetSpec, member: FleetMember, store: Store, run_id: str, new: bool) -> None:
    """Runs (or resumes, as the only driver) a baseline method's member."""
    if new:
        runner = start_method(member.method, member.task_id, budget=spec.budget_of(member.task_id), store=store,
                              model_spec=spec.model_spec(member.model),
                              config=spec.method_configs.get(member.method),
                              task_params=dict(spec.task_params.get(member.task_id, {})), seed=member.seed,
                              run_id=run_id, fleet=FleetLink(fleet_id, member.index, dict(spec.caps)))
    else:
        runner = open_method(run_id, store=store, takeover=True)
    try:
        runner.optimize()
    finally:
        runner.run.close()


def _result_from(data: Mapping[str, Any]) -> MemberResult:
    keys = {f.name for f in fields(FleetMember)}
    member = FleetMember(**{k: data[k] for k in keys if k in data})
    return MemberResult(member, data["run_id"], data["state"], data["best_score"], data["normalized"],
                        data["evaluations"], data["used"], data.get("reason", ""), data.get("node", ""),
                        data.get("heldout_public"))


def _check_store_for_cluster(store_url: str, machines: int) -> None:
    """A SQLite store serves a cluster on one machine (its nodes share the file system), never one on several."""
    if machines > 1 and not store_url.startswith(("postgresql://", "postgres://")):
        raise ConfigError(f"this Ray cluster spans {machines} machines but the store is {store_url!r}: a SQLite file "
                          "belongs to one machine. Give the fleet a shared store: --store postgresql://USER@HOST/DB")


def _ray_member_task() -> Any:
    import ray

    # Ray retries a task whose worker or node died (system failures), not one that raised: a member
    # that fails on its own ends as a failed run, and its retry would fail the same way.
    return ray.remote(num_cpus=1, max_retries=3)(run_member)


def member_ray_options(task_id: str, task_params: Mapping[str, Any], cluster_gpus: float) -> dict[str, Any]:
    """Ray resources of a member beyond its CPU (:func:`reasearch.runs.ray_cluster.gpu_options`): one GPU
    for a training task on a cluster with GPUs. Ray sets the member's ``CUDA_VISIBLE_DEVICES`` to that GPU
    and its experiments lease exactly it (one at a time); other members never get it."""
    if not cluster_gpus:
        return {}
    from reasearch.evaluators.registry import build_task

    return gpu_options(build_task(task_id, dict(task_params)), cluster_gpus)


def run_fleet(spec: FleetSpec, *, store: str | Path, run_dir: str | Path = "runs", fleet_id: str | None = None,
              executor: str = "local", address: str | None = None,
              on_update: Callable[[list[MemberResult]], None] | None = None) -> FleetReport:
    """Runs every member of a fleet (or what is left of it) and returns the results table.

    Args:
        spec: what to run.
        store: the run store's URL or directory (PostgreSQL for a multi-node Ray cluster).
        run_dir: where members keep their workspaces.
        fleet_id: an explicit id (default: a new one); an existing id with the same spec continues it.
        executor: ``local`` (threads of this process) or ``ray``.
        address: Ray cluster address (``ray`` executor; default: a local Ray instance).
        on_update: called with every member's current result whenever one finishes.

    Raises:
        ConfigError: a bad spec, an unknown task id, SQLite for a multi-node cluster, an unknown executor, a
            fleet id that is not one safe path component (nothing is created).
    """
    if executor not in ("local", "ray"):
        raise ConfigError(f"executor must be 'local' or 'ray', not {executor!r}")
    if fleet_id is not None:  # it names its members' runs and folders: checked before anything is made
        check_id(fleet_id, "fleet id", max_len=MAX_FLEET_ID_LEN)
    for task_id in spec.tasks:
        task_spec(task_id, **dict(spec.task_params.get(task_id, {})))  # unknown ids fail before anything runs
    store_url = str(store)
    fleet_id = fleet_id or new_fleet_id()
    with open_store(store_url) as s:
        if not s.create_fleet(fleet_id, spec.to_dict()) and s.get_fleet(fleet_id) != json.loads(
                json.dumps(spec.to_dict())):
            raise ConfigError(f"fleet {fleet_id} exists with another spec; `reasearch fleet resume {fleet_id}` "
                              "continues it as recorded")
    return _drive(fleet_id, spec, store_url, str(run_dir), executor, address, on_update)


def resume_fleet(fleet_id: str, *, store: str | Path, run_dir: str | Path = "runs", executor: str = "local",
                 address: str | None = None,
                 on_update: Callable[[list[MemberResult]], None] | None = None) -> FleetReport:
    """Finishes a fleet as recorded: starts members never started, resumes unfinished and failed ones."""
    with open_store(str(store)) as s:
        spec = FleetSpec.from_dict(s.get_fleet(fleet_id))
    return _drive(fleet_id, spec, str(store), str(run_dir), executor, address, on_update)


def fleet_report(fleet_id: str, *, store: str | Path) -> FleetReport:
    """The fleet's results as stored now (members not started show ``pending``)."""
    with open_store(str(store)) as s:
        return fleet_report_in(s, fleet_id)


def fleet_report_in(store: Store, fleet_id: str) -> FleetReport:
    """:func:`fleet_report` from a store already open (the dashboard's)."""
    spec = FleetSpec.from_dict(store.get_fleet(fleet_id))
    runs = store.fleet_members(fleet_id)
    return FleetReport(fleet_id, tuple(_member_result(store, m, runs.get(m.index, m.run_id(fleet_id)))
                                       for m in spec.members()))


def _drive(fleet_id: str, spec: FleetSpec, store_url: str, run_dir: str, executor: str, address: str | None,
           on_update: Callable[[list[MemberResult]], None] | None) -> FleetReport:
    t0 = time.monotonic()
    members = spec.members()
    spec_data = spec.to_dict()
    results: dict[int, MemberResult] = {}
    with open_store(store_url) as s:
        for m in members:
            results[m.index] = _member_result(s, m, m.run_id(fleet_id))
    todo = [m for m in members if results[m.index].state != "finished"]  # a resume retries failed members too

    def update(data: Mapping[str, Any]) -> None:
        r = _result_from(data)
        results[r.member.index] = r
        if on_update is not None:
            on_update([results[m.index] for m in members])

    if on_update is not None:
        on_update([results[m.index] for m in members])
    if executor == "local":
        with cf.ThreadPoolExecutor(max_workers=spec.parallelism, thread_name_prefix="fleet") as pool:
            futures = {pool.submit(run_member, fleet_id, spec_data, m.to_dict(), store_url, run_dir): m for m in todo}
            for fut in cf.as_completed(futures):
                try:
                    data = fut.result()
                except Exception as exc:  # raised outside the member's own guard (opening the store): still its own
                    data = _crash_data(futures[fut], fleet_id, exc)
                update(data)
    else:
        _drive_ray(fleet_id, spec, spec_data, todo, store_url, run_dir, address, update)
    with open_store(store_url) as s:  # the final word is the store's (a failure before any run existed: ours)
        final = tuple(_final_result(s, m, fleet_id, results[m.index]) for m in members)
    return FleetReport(fleet_id, final, time.monotonic() - t0)


def _crash_data(member: FleetMember, fleet_id: str, exc: BaseException) -> dict[str, Any]:
    return MemberResult(member, member.run_id(fleet_id), RunState.FAILED.value, None, None, 0, {},
                        failure_reason(exc)).to_dict()


def _final_result(store: Store, member: FleetMember, fleet_id: str, seen: MemberResult) -> MemberResult:
    now = _member_result(store, member, member.run_id(fleet_id), seen.node)
    if now.state == seen.state == RunState.INTERRUPTED.value and "could not be recorded" in seen.reason:
        return seen  # why it is interrupted is known only here (the store could not be told)
    ended = (RunState.FAILED.value, RunState.INTERRUPTED.value)  # before its run existed, or its store failed
    return seen if now.state == "pending" and seen.state in ended else now


def _drive_ray(fleet_id: str, spec: FleetSpec, spec_data: Mapping[str, Any], todo: list[FleetMember], store_url: str,
               run_dir: str, address: str | None, update: Callable[[Mapping[str, Any]], None]) -> None:
    # No address: a new local instance, shut down (its workers reaped) when the fleet is done; a Ray this
    # process had already initialized is used as it is.
    conn = connect_ray(address or None, fallback_to_local=False, user="the ray executor")
    ray = conn.ray
    try:
        _check_store_for_cluster(store_url, conn.alive_machines())
        task = _ray_member_task()
        cluster_gpus = conn.cluster_gpus()
        # Each task folder's content goes once into Ray's object store; a member's node gets it by reference.
        from reasearch.evaluators.folder import pack_folder

        bundles = [pack_folder(t) for t in dict.fromkeys(spec.tasks) if is_folder_ref(t)]
        folders = ray.put(bundles) if bundles else None
        waiting = list(todo)
        running: dict[Any, FleetMember] = {}
        while waiting or running:
            while waiting and len(running) < spec.parallelism:
                m = waiting.pop(0)
                options = member_ray_options(m.task_id, dict(spec.task_params.get(m.task_id, {})), cluster_gpus)
                running[task.options(**options).remote(fleet_id, spec_data, m.to_dict(), store_url, run_dir,
                                                       folders, handover_s=RETRY_HANDOVER_S)] = m
            done, _ = ray.wait(list(running), num_returns=1)
            for ref in done:
                m = running.pop(ref)
                try:
                    data = ray.get(ref)
                except Exception as exc:  # Ray gave up on it (its node died more often than retried): its own
                    data = _crash_data(m, fleet_id, exc)
                update(data)
    finally:
        conn.close()
