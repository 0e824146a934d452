"""A fleet's spec and its records: what runs (:class:`FleetSpec`, its :class:`FleetMember` list) and what came
of it (:class:`MemberResult`, :class:`FleetReport`).

Plain data, checked when built (unknown keys, bad budgets, unknown methods fail before anything runs), that
crosses process boundaries as dicts. Driving the members (threads or Ray tasks) is :mod:`reasearch.fleets.fleet`.
Trust boundary: a spec file is user input, read with ``check_finite`` and strict keys.
"""

from __future__ import annotations

import itertools
import json
import statistics
import time
import tomllib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from reasearch.agent.config import AgentConfig
from reasearch.errors import ConfigError
from reasearch.evaluators.params import check_finite
from reasearch.methods import method_config
from reasearch.models import ModelSpec
from reasearch.runs import Budget, RunState, Unit

__all__ = ["FleetMember", "FleetReport", "FleetSpec", "MemberResult", "check_method", "new_fleet_id"]


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


