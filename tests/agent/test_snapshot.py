"""The state snapshot: stagnation count in both directions, budget line, cut lessons."""

from __future__ import annotations

from reasearch.agent.snapshot import EvalRecord, render_snapshot, since_improvement
from reasearch.evaluators.spec import TaskSpec
from reasearch.runs import Unit


def _spec(direction: str) -> TaskSpec:
    return TaskSpec(id="t/x-v1", version=1, direction=direction, time_limit_s=1.0, memory_mb=64,  # type: ignore[arg-type]
                    best_known=10.0)


def _hist(*items: tuple[str, float | None]) -> list[EvalRecord]:
    return [EvalRecord(i, f"c{i:02d}" * 8, st, sc, None) for i, (st, sc) in enumerate(items)]


def test_since_improvement_follows_the_direction() -> None:
    h = _hist(("OK", 5.0), ("OK", 7.0), ("CRASH", None), ("OK", 6.0), ("INVALID", None))
    assert since_improvement(h, _spec("maximize")) == 3  # 7.0 at index 1, three after it
    assert since_improvement(h, _spec("minimize")) == 4  # 5.0 at index 0 stays the best
    assert since_improvement(_hist(("CRASH", None), ("TIMEOUT", None)), _spec("maximize")) == 2
    assert since_improvement([], _spec("maximize")) == 0


def test_render_snapshot_lines() -> None:
    h = _hist(("OK", 5.0), ("OK", 4.0), ("OK", 3.0))
    text = render_snapshot(turn=4, max_turns=10, spec=_spec("maximize"),
                           remaining={Unit.EVALUATIONS: 7.0, Unit.DOLLARS: 1.5, Unit.TOKENS: None},
                           best=(h[0].candidate, 5.0, 0.5), history=h, current="candidate x, not evaluated yet",
                           lessons="L" * 50, stagnation_after=2, recent=2, lessons_max_chars=10, elapsed_s=12.4,
                           max_wall_s=600.0, notice="NOTICE")
    lines = text.splitlines()
    assert lines[0] == "## State snapshot (turn 4 of 10; active time 12 s of 600 s)"
    assert lines[1] == "Task: t/x-v1 (maximize; best known 10)"
    assert lines[2] == "Budget: evaluations: 7 left; dollars: $1.50 left"
    assert lines[3] == "Best so far: 5 (normalized 0.500000), candidate c00c00c00c00"
    assert lines[5] == "Last 2 of 3 evaluations:"
    assert lines[6] == "  step    1  c01c01c01c01  OK       4"
    assert lines[8].startswith("WARNING: 2 evaluations without improvement")
    assert lines[-4:] == ["L" * 10, "[... lessons.md cut; read_file shows all of it]", "", "NOTICE"]
