"""The agent's ``evaluate(repeat=True)``: a fresh, charged evaluation of an evaluated program, and the
score spread it shows (tool output and state snapshot)."""

from __future__ import annotations

from typing import Any

from reasearch.agent.snapshot import EvalRecord, render_snapshot, score_spreads
from reasearch.evaluators.spec import TaskSpec
from reasearch.models.testing import call, say
from reasearch.runs import Unit


def test_repeat_is_charged_and_shows_the_spread(make_agent: Any) -> None:
    script = [say("", call("evaluate")), say("", call("evaluate")), say("", call("evaluate", repeat=True)),
              say("", call("finish", reason="done"))]
    agent, run = make_agent(script)
    agent.optimize()
    assert [r.cached for r in agent.history] == [False, True, False]
    assert run.used()[Unit.EVALUATIONS] == 2.0  # the first and the repeat; the cache hit was free
    results = [e for e in run.events() if e.kind == "tool_result"]
    texts = [str(e.payload) for e in results]
    assert "spread over" not in texts[0] and "spread over" not in texts[1]
    assert "spread over 2 fresh scores of this candidate" in texts[2]
    repeat_eval = run.evaluations()[-1].result
    assert repeat_eval.metrics["repeat"] is True and not repeat_eval.cached
    assert "repeat" not in run.evaluations()[0].result.metrics
    snapshot = agent.snapshot_text(include_lessons=False)
    assert "Score spread of candidates evaluated afresh more than once" in snapshot


def test_score_spreads_ignore_cached_and_failed() -> None:
    h = [EvalRecord(0, "a" * 64, "OK", 1.0, None), EvalRecord(1, "a" * 64, "OK", 1.0, None, cached=True),
         EvalRecord(2, "a" * 64, "OK", 3.0, None), EvalRecord(3, "b" * 64, "OK", 2.0, None),
         EvalRecord(4, "b" * 64, "TIMEOUT", None, None)]
    assert score_spreads(h) == {"a" * 64: (2, 1.0, 3.0, 2 ** 0.5)}
    spec = TaskSpec(id="t/x-v1", version=1, direction="maximize", time_limit_s=1.0, memory_mb=64)
    text = render_snapshot(turn=1, max_turns=3, spec=spec, remaining={}, best=None, history=h, current="x",
                           lessons=None, stagnation_after=10, recent=5, lessons_max_chars=10, elapsed_s=0.0,
                           max_wall_s=None)
    assert "  aaaaaaaaaaaa  n=2  min 1  max 3  std 1.41" in text.splitlines()
