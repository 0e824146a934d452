"""Controller overhead per evaluation of each baseline method, against the agent's harness, in one run.

Every optimizer works on the same ToyTask run layout: a real SQLite store, evaluations on a
:class:`StaticRunner` (no sandbox: it reads the literal a candidate returns) and an instant model (the
methods' :class:`MutatingModel`; the agent's scripted model, one ``evaluate`` call a turn). What is
timed is everything else: prompts, journaling, debits, the store, the method's own bookkeeping
(islands, grids, fronts). The figure is wall time divided by the evaluations recorded; the ratio is the
agent's figure over the method's (>1: the method's controller is lighter than the agent's harness).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from reasearch._bench import BenchRow

__all__ = ["agent_per_evaluation", "method_per_evaluation", "run"]


def method_per_evaluation(method: str, evaluations: int, workdir: Path) -> float:
    """Seconds of controller time per evaluation of ``method`` over a run of ``evaluations``."""
    from reasearch.agent.testing import StaticRunner
    from reasearch.evaluators.testing import ToyTask
    from reasearch.methods import MethodRunner, method_config
    from reasearch.methods.testing import MutatingModel
    from reasearch.runs import LocalExecutor, Run, open_store

    cfg = method_config(method, {"num_islands": 2} if method == "evolve" else None)
    with open_store(workdir) as store, LocalExecutor(1, pool=StaticRunner()) as executor:
        run = Run.create(store, task=ToyTask(dim=2), budget={"evaluations": evaluations},
                         config={"driver": "method", "method": method}, executor=executor)
        runner = MethodRunner(run, MutatingModel(0), method, cfg)
        t0 = time.perf_counter()
        runner.optimize()
        elapsed = time.perf_counter() - t0
        n = len(store.evaluations(run.id))
    return elapsed / max(n, 1)


def agent_per_evaluation(evaluations: int, workdir: Path) -> float:
    """Seconds of harness time per evaluation of the agent (one ``evaluate`` a turn, scripted model)."""
    from reasearch.agent import Agent, AgentConfig, ModelSpec
    from reasearch.agent.testing import ScriptedModel, StaticRunner, call, say
    from reasearch.evaluators.testing import ToyTask, toy_candidate
    from reasearch.models.messages import ModelReply, Usage
    from reasearch.runs import LocalExecutor, Run, open_store

    script: list[Any] = [say("", call("evaluate", code=toy_candidate([0.01 * i, 1.0]))) for i in range(evaluations)]
    script.append(say("", call("finish", reason="benchmark over")))
    script = [ModelReply(r.content, r.stop_reason, Usage(2000, 50)) for r in script]
    config = AgentConfig(models={"agent": ModelSpec(provider="scripted", name="bench")}, max_turns=evaluations + 5)
    with open_store(workdir) as store, LocalExecutor(1, pool=StaticRunner()) as executor:
        run = Run.create(store, task=ToyTask(dim=2), budget={"evaluations": evaluations + 1},
                         config={"agent": config.to_dict()}, executor=executor)
        agent = Agent(run, workdir / "agent", config=config, models={"agent": ScriptedModel(script, name="bench")})
        t0 = time.perf_counter()
        agent.optimize()
        elapsed = time.perf_counter() - t0
        n = len(store.evaluations(run.id))
    return elapsed / max(n, 1)


def run(quick: bool) -> list[BenchRow]:
    evaluations = 30 if quick else 150
    with tempfile.TemporaryDirectory(prefix="reasearch-bench-methods-") as tmp:
        method_per_evaluation("best-of-n", 5, Path(tmp) / "warm-up")  # imports and first-use costs, untimed
        agent_ms = agent_per_evaluation(evaluations, Path(tmp) / "agent") * 1e3
        rows = [BenchRow("methods", "agent harness overhead per evaluation (SQLite)", agent_ms, "ms",
                         note=f"{evaluations} evaluations, scripted model, StaticRunner (no sandbox)")]
        for method in ("best-of-n", "evolve", "reflect"):
            ms = method_per_evaluation(method, evaluations, Path(tmp) / method) * 1e3
            rows.append(BenchRow("methods", f"{method} controller overhead per evaluation (SQLite)", ms, "ms",
                                 reference="agent harness", reference_value=agent_ms,
                                 ratio=agent_ms / ms if ms else None,
                                 note=f"{evaluations}-evaluation budget, instant model, StaticRunner"))
    return rows
