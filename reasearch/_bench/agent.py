"""Agent harness overhead per turn with a scripted model, evaluation time excluded.

One turn = snapshot rendered and journaled, the model reply journaled and debited (tokens, model
call), one tool call journaled before and after it runs. The model is a :class:`ScriptedModel` that
reports its usage (so it costs next to nothing) and evaluations go to a :class:`StaticRunner` (no
sandbox), so what is timed is the harness itself: on the real SQLite store, and on the in-memory
recorder as the reference that shows the store's share.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from pathlib import Path
from typing import Any

from reasearch._bench import BenchRow, median, p95

__all__ = ["harness_turns", "run"]

GOAL_MS = 50.0


class _Stopwatch:
    """Wraps a model: the time between successive calls is one turn of the harness."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.stamps: list[float] = []

    @property
    def name(self) -> str:
        return self.inner.name

    def complete(self, request: Any) -> Any:
        self.stamps.append(time.perf_counter())
        return self.inner.complete(request)


def _script(turns: int) -> list[Any]:
    from reasearch.agent.testing import call, say
    from reasearch.models.messages import ModelReply, Usage

    cycle = [lambda i: call("read_file", path="TASK.md"), lambda i: call("get_status"),
             lambda i: call("write_file", path="notes.md", content=f"note {i}\n" * 20), lambda i: call("list_files")]
    replies = [say("", call("evaluate"))]
    replies += [say(f"turn {i}", cycle[i % len(cycle)](i)) for i in range(turns - 2)]
    replies.append(say("", call("finish", reason="benchmark over")))
    return [ModelReply(r.content, r.stop_reason, Usage(2000, 50)) for r in replies]


def harness_turns(turns: int, *, store: str, workdir: Path) -> list[float]:
    """Seconds of each turn (between successive model calls) of a ``turns``-turn scripted run."""
    from reasearch.agent import Agent, AgentConfig, ModelSpec
    from reasearch.agent.testing import ScriptedModel, StaticRunner, memory_run
    from reasearch.evaluators.testing import ToyTask
    from reasearch.runs import Budget, LocalExecutor, Run, open_store

    config = AgentConfig(models={"agent": ModelSpec(provider="scripted", name="bench")}, max_turns=turns + 5)
    runner = StaticRunner()
    if store == "sqlite":
        run: Any = Run.create(open_store(workdir), task=ToyTask(dim=2), budget={"evaluations": 5},
                              config={"agent": config.to_dict()}, executor=LocalExecutor(1, pool=runner))
    else:
        run = memory_run(ToyTask(dim=2), Budget.from_dict({"evaluations": 5}), runner=runner)
    model = _Stopwatch(ScriptedModel(_script(turns), name="bench"))
    agent = Agent(run, workdir / "agent", config=config, models={"agent": model})
    result = agent.optimize()
    end = time.perf_counter()
    if result.chosen_by != "agent" or result.turns != turns:
        raise RuntimeError(f"the benchmark trajectory went wrong: {result}")
    stamps = [*model.stamps, end]
    return [b - a for a, b in itertools.pairwise(stamps[1:])]  # the first turn holds the (free) evaluation


def run(quick: bool) -> list[BenchRow]:
    turns = 40 if quick else 200
    per: dict[str, list[float]] = {}
    for kind in ("sqlite", "memory"):
        with tempfile.TemporaryDirectory(prefix="reasearch-bench-agent-") as tmp:
            per[kind] = harness_turns(turns, store=kind, workdir=Path(tmp))
    sql_ms = median(per["sqlite"]) * 1e3
    mem_ms = median(per["memory"]) * 1e3
    p95_ms = p95(per["sqlite"]) * 1e3
    return [
        BenchRow("agent", "harness overhead per turn, SQLite store (median)", sql_ms, "ms",
                 reference="in-memory store", reference_value=mem_ms, ratio=mem_ms / sql_ms if sql_ms else None,
                 goal=f"<= {GOAL_MS:g} ms", met=sql_ms <= GOAL_MS,
                 note=f"{turns} turns, scripted model, one cheap tool per turn, no evaluation time"),
        BenchRow("agent", "harness overhead per turn, SQLite store (p95)", p95_ms, "ms", goal=f"<= {GOAL_MS:g} ms",
                 met=p95_ms <= GOAL_MS),
    ]
