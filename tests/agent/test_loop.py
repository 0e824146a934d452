"""The agent loop on an in-memory run: journaling, ledger, snapshots, tool errors, reply recovery,
limits, compaction, the final choice, and resume after a kill at any point."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import kinds_by_step, toy_source

from reasearch.agent.prompts import CONTINUE_MESSAGE, NO_TOOL_NUDGE, RETRY_CUT, RETRY_EMPTY, SUMMARY_REQUEST
from reasearch.errors import ModelError
from reasearch.evaluators.base import candidate_sha256
from reasearch.models.messages import ModelReply, StopReason, Usage
from reasearch.models.testing import call, say
from reasearch.runs import Run, Unit
from reasearch.runs.testing import executed, ledger_map

BETTER = toy_source([2.0, 2.5])  # score -(1 + 0.25) = -1.25
BEST = toy_source([3.0, 3.0])  # score 0
SEED_SCORE = -18.0  # the seed returns [0, 0]: -(9 + 9)


def _last_text(req: Any) -> str:
    return req.messages[-1]["content"][-1]["text"]


def test_a_trajectory_is_journaled_step_by_step_and_debited(make_agent: Any) -> None:
    script = [
        say("look", call("read_file", path="TASK.md")),
        say("", call("evaluate")),
        say("", call("evaluate", code=BETTER), call("get_status")),
        say("", call("finish", reason="best seen", candidate_id=candidate_sha256(BETTER)[:8])),
    ]
    agent, run = make_agent(script)
    result = agent.optimize()
    assert kinds_by_step(run) == {
        0: ["start"],
        1: ["snapshot", "model_reply"], 2: ["tool_call", "tool_result"],
        3: ["snapshot", "model_reply"], 4: ["tool_call", "tool_result"],
        5: ["snapshot", "model_reply"], 6: ["tool_call", "tool_result"], 7: ["tool_call", "tool_result"],
        8: ["snapshot", "model_reply"], 9: ["tool_call", "tool_result"],
        10: ["final"],
    }
    assert (result.final_candidate, result.final_score, result.chosen_by) == (candidate_sha256(BETTER), -1.25, "agent")
    assert (run.state, run.store.get_run(run.id).final_candidate, run.store.get_run(run.id).reason) == (
        "finished",
        candidate_sha256(BETTER),
        "agent: best seen",
    )
    assert result.turns == 4 and result.steps == 10
    # The ledger matches what happened: one evaluation per evaluate step, one model call per reply,
    # tokens equal to the usage recorded with each reply.
    assert sorted(k[0] for k in ledger_map(run) if k[1] is Unit.EVALUATIONS) == [4, 6]
    replies = [e for e in run.events() if e.kind == "model_reply"]
    assert sorted(k[0] for k in ledger_map(run) if k[1] is Unit.MODEL_CALLS) == [e.step for e in replies]
    tokens = sum(ModelReply.from_dict(e.payload["reply"]).usage.total for e in replies)
    assert run.used()[Unit.TOKENS] == tokens > 0
    assert [r.score for r in agent.history] == [SEED_SCORE, -1.25]
    assert (agent.workspace.root / "candidate.py").read_text() == BETTER
    assert (agent.root / "transcripts" / "final.json").is_file()


def test_snapshot_reports_budget_best_recent_stagnation_and_lessons(make_agent: Any) -> None:
    script = [
        say("", call("evaluate")),
        say("", call("evaluate", code=BETTER)),
        say("", call("evaluate", code=toy_source([0.0, 1.0]))),
        say("", call("evaluate", code=toy_source([1.0, 0.0]))),
        say("", call("finish", reason="r")),
    ]
    agent, _ = make_agent(script, budget={"evaluations": 10, "dollars": 5}, stagnation_after=2, recent_evaluations=2,
                            lessons="# Lessons\n- grid is weak\n")
    agent.optimize()
    text = _last_text(agent.models["agent"].requests[-1])
    cid_better = candidate_sha256(BETTER)[:12]
    assert "Budget: evaluations: 6 left; dollars: $5.00 left" in text
    assert f"Best so far: -1.25, candidate {cid_better}" in text
    assert "Last 2 of 4 evaluations:" in text and "step    2" not in text
    assert "WARNING: 2 evaluations without improvement" in text
    assert text.endswith("## lessons.md\n# Lessons\n- grid is weak")
    assert "WARNING" not in _last_text(agent.models["agent"].requests[2])  # one stale evaluation: no warning yet


def test_tool_errors_go_back_to_the_model_and_the_loop_goes_on(make_agent: Any) -> None:
    def exploding_exec(*a: Any, **k: Any) -> Any:
        raise RuntimeError("sandbox fell over")

    script = [
        say("", call("no_such_tool"), call("read_file", path="../x"), call("read_file", limit="many"),
            call("bash", command="ls"), call("finish", reason="too early")),
        say("no tool call this time"),
        say("", call("evaluate"), call("finish", reason="ok")),
    ]
    agent, run = make_agent(script, exec_fn=exploding_exec)
    result = agent.optimize()
    results = [e.payload for e in run.events() if e.kind == "tool_result"]
    assert [r["is_error"] for r in results] == [True, True, True, True, True, False, False]
    assert "no tool named 'no_such_tool'" in results[0]["text"]
    assert "refused" in results[1]["text"]
    assert "argument 'limit' must be an integer" in results[2]["text"]
    assert (
        results[3]["text"] == "bash failed: RuntimeError: sandbox fell over" and "Traceback" in results[3]["traceback"]
    )
    assert "no candidate has scored OK yet" in results[4]["text"]
    second = agent.models["agent"].requests[1].messages[-1]["content"]
    assert [b.get("is_error", False) for b in second[:5]] == [True] * 5
    assert agent.models["agent"].requests[2].messages[-1]["content"][0]["text"] == NO_TOOL_NUDGE
    assert result.chosen_by == "agent" and result.final_score == SEED_SCORE


def test_finish_validates_the_choice(make_agent: Any) -> None:
    from reasearch.evaluators.testing import ToyTask

    seed_id = candidate_sha256(ToyTask(dim=2).seed_program())
    script = [
        say("", call("evaluate"), call("evaluate", code=BETTER)),
        say("", call("finish", reason="x", candidate_id="abc"), call("finish", reason="x", candidate_id="ffffff")),
        say("", call("finish", reason="seed is more robust", candidate_id=seed_id[:10])),
    ]
    agent, run = make_agent(script)
    result = agent.optimize()
    texts = [e.payload["text"] for e in run.events() if e.kind == "tool_result"]
    assert "give at least 6 characters" in texts[2]
    assert "'ffffff' matches 0 OK candidates" in texts[3]
    # Not blindly the highest score: the agent's choice stands, and the record says why.
    assert (result.final_candidate, result.final_score, result.reason) == (seed_id, SEED_SCORE, "seed is more robust")
    assert run.best()[1].score == -1.25


def test_cut_off_text_is_continued_and_every_attempt_is_debited(make_agent: Any) -> None:
    cut = ModelReply(({"type": "text", "text": "I will evaluate the se"},), StopReason.MAX_TOKENS)
    rest = say("ed now.", call("evaluate"))
    agent, run = make_agent([cut, rest, say("", call("finish", reason="done"))])
    agent.optimize()
    req = agent.models["agent"].requests[1]
    assert req.messages[-2] == {"role": "assistant", "content": [{"type": "text", "text": "I will evaluate the se"}]}
    assert _last_text(req) == CONTINUE_MESSAGE
    assert agent.messages[1]["content"][0] == {"type": "text", "text": "I will evaluate the seed now."}
    assert sorted(k[2] for k in ledger_map(run) if k[0] == 1 and k[1] is Unit.MODEL_CALLS) == [
        "agent:model_reply", "agent:model_reply.1"]
    assert kinds_by_step(run)[1] == ["snapshot", "model_reply", "model_reply.1"]


def test_cut_off_tool_calls_and_empty_replies_are_asked_again(make_agent: Any) -> None:
    cut_call = ModelReply(
        ({"type": "tool_use", "id": "t", "name": "evaluate", "input": {"co": 1}},), StopReason.MAX_TOKENS
    )
    script = [cut_call, say(""), say("", call("evaluate"), call("finish", reason="ok"))]
    agent, run = make_agent(script)
    agent.optimize()
    reqs = agent.models["agent"].requests
    assert _last_text(reqs[1]) == RETRY_CUT and _last_text(reqs[2]) == RETRY_EMPTY
    assert len(reqs[1].messages) == len(reqs[0].messages)  # the discarded reply is not in the conversation
    assert run.used()[Unit.MODEL_CALLS] == 3


def test_no_usable_reply_interrupts_the_run(make_agent: Any) -> None:
    agent, run = make_agent([say(""), say(""), say("")], max_reply_attempts=3)
    with pytest.raises(ModelError, match="no usable reply in 3 attempts"):
        agent.optimize()
    assert run.state == "interrupted" and run.used()[Unit.MODEL_CALLS] == 3


def test_turn_limit_gives_one_wrap_up_turn_with_only_finish(make_agent: Any) -> None:
    script = [say("", call("evaluate")), say("", call("evaluate", code=BETTER)),
              say("", call("evaluate", code=BEST), call("finish", reason="ran out of turns"))]
    agent, run = make_agent(script, max_turns=2)
    result = agent.optimize()
    last = agent.models["agent"].requests[-1]
    assert [t.name for t in last.tools] == ["finish"]
    assert "LIMIT REACHED: the turn limit (2) is reached" in _last_text(last)
    texts = [e.payload["text"] for e in run.events() if e.kind == "tool_result"]
    assert "no tool named 'evaluate' is available now; available: finish" in texts[2]
    assert (result.chosen_by, result.final_score, result.turns) == ("agent", -1.25, 3)


def test_harness_chooses_when_the_agent_does_not_finish(make_agent: Any) -> None:
    script = [say("", call("evaluate")), say("", call("evaluate", code=BETTER), call("evaluate", code=BEST)),
              say("I would rather keep going")]
    agent, run = make_agent(script, budget={"evaluations": 2})
    result = agent.optimize()
    texts = [e.payload["text"] for e in run.events() if e.kind == "tool_result"]
    assert "status: REFUSED" in texts[2] and "evaluation budget spent: 2/2 used" in texts[2]
    final = next(e.payload for e in run.events() if e.kind == "final")
    assert final["chosen_by"] == "harness" and final["stop_reason"] == "the evaluations budget is spent"
    assert result.final_candidate == candidate_sha256(BETTER) and result.final_score == -1.25
    assert "the agent did not call finish" in run.store.get_run(run.id).reason
    assert executed(run) == 2
    assert "LIMIT REACHED: the evaluations budget is spent" in _last_text(agent.models["agent"].requests[-1])


def test_hard_limits_stop_without_a_wrap_up_turn(make_agent: Any) -> None:
    agent, _ = make_agent([say("", call("evaluate")), say("", call("list_files"))], budget={"model_calls": 1})
    result = agent.optimize()
    assert len(agent.models["agent"].requests) == 1
    assert result.chosen_by == "harness" and "the model_calls budget is spent" in result.reason
    # a token cap below one call's worst case (prompt + max tokens) is reserved against: no call is made
    agent, _ = make_agent([say("", call("evaluate")), say("", call("list_files"))], budget={"tokens": 1})
    result = agent.optimize()
    assert len(agent.models["agent"].requests) == 0
    assert result.chosen_by == "harness" and "the tokens budget is spent" in result.reason


def test_compaction_at_the_threshold_keeps_three_messages(make_agent: Any) -> None:
    big = "x" * 6000  # ~1500 tokens of tool output push the context (1010 tokens, reported) past 2500

    def used(reply: ModelReply) -> ModelReply:
        return ModelReply(reply.content, reply.stop_reason, Usage(1000, 10))

    script = [
        used(say("", call("write_file", path="notes.md", content=big))),
        used(say("", call("read_file", path="notes.md"))),
        used(say("", call("evaluate"))),
        used(say("", call("finish", reason="done"))),
    ]
    agent, run = make_agent(
        script,
        compact_threshold_tokens=2500,
        summarizer=[say("SUMMARY: wrote notes, seed scored.")],
        lessons="# Lessons\n- keep notes\n",
    )
    agent.optimize()
    comp = [e for e in run.events() if e.kind == "compaction"]
    assert len(comp) == 1
    payload = comp[0].payload
    assert (
        payload["reason"].startswith("the context reached ~")
        and payload["summary"] == "SUMMARY: wrote notes, seed scored."
    )
    saved = json.loads((agent.root / payload["transcript"]).read_text())
    summ_req = agent.models["summarizer"].requests[0]
    assert summ_req.messages[:-1] == saved["messages"]  # the summarizer saw the whole transcript ...
    assert _last_text(summ_req) == SUMMARY_REQUEST  # ... and then the request for a summary
    after = agent.models["agent"].requests[2].messages
    assert [m["role"] for m in after] == ["user", "assistant", "user"]
    assert (
        after[0]["content"][0]["text"].startswith("## State snapshot")
        and "## lessons.md" not in after[0]["content"][0]["text"]
    )
    assert after[1]["content"][0]["text"].endswith("SUMMARY: wrote notes, seed scored.")
    assert after[2]["content"][0]["text"] == "## lessons.md\n# Lessons\n- keep notes\n\nContinue the work from here."
    assert (Unit.TOKENS in {k[1] for k in ledger_map(run) if k[2] == "summarizer:summary"})


def test_compact_tool_and_edit_code_use_their_own_models(make_agent: Any) -> None:
    editor = [say("```python\n" + BEST + "```")]
    script = [say("", call("edit_code", instruction="return [3, 3]")), say("", call("compact")),
              say("", call("evaluate"), call("finish", reason="optimum"))]
    agent, run = make_agent(script, editor=editor, summarizer=[say("S")])
    result = agent.optimize()
    edit = next(e.payload for e in run.events() if e.kind == "tool_result")
    assert edit["text"].startswith("candidate.py rewritten: 5 lines changed.")  # 4 lines out, 1 in
    assert "+    return [3.0, 3.0]" in edit["text"]
    assert "# Instruction\nreturn [3, 3]" in _last_text(agent.models["editor"].requests[0])
    notes = {k[2] for k in ledger_map(run) if k[1] is Unit.MODEL_CALLS}
    assert notes == {"agent:model_reply", "editor:edit_reply", "summarizer:summary"}
    assert ledger_map(run).get((1, Unit.EVALUATIONS, "evaluate")) is None  # an edit never costs an evaluation
    assert result.final_score == 0.0
    start = next(e.payload for e in run.events() if e.kind == "start")
    assert start["models"] == {"agent": "agent-model", "editor": "editor-model", "summarizer": "summary-model"}


class _Killed(BaseException):
    """Stands in for kill -9: nothing after it runs."""


def _script() -> list[Any]:
    return [
        say("", call("evaluate")),
        say("", call("edit_code", instruction="move towards 3")),
        say("", call("evaluate"), call("write_file", path="lessons.md", content="# Lessons\n- 3 is the target\n")),
        say("", call("compact")),
        say("", call("evaluate", code=BEST)),
        say("", call("finish", reason="optimum reached")),
    ]


def _editor() -> list[Any]:
    return [say("```python\n" + BETTER + "```")]


@pytest.mark.parametrize(
    "kill_at", ["model:2", "model:4", "model:5", "edit", "evaluate:after-record", "tool:write_file"]
)
def test_resume_after_a_kill_completes_without_spending_twice(make_agent: Any, tmp_path: Path, kill_at: str) -> None:
    reference, ref_run = make_agent(_script(), editor=_editor(), summarizer=[say("S")], root="reference")
    ref = reference.optimize()

    script, editor = _script(), _editor()
    where, _, arg = kill_at.partition(":")
    if where == "model":
        script.insert(int(arg), lambda req: (_ for _ in ()).throw(_Killed()))
    elif where == "edit":
        editor.insert(0, lambda req: (_ for _ in ()).throw(_Killed()))
    agent, run = make_agent(script, editor=editor, summarizer=[say("S")], budget={"evaluations": 10})
    if kill_at == "evaluate:after-record":
        inner = run.evaluate
        calls = {"n": 0}

        def evaluate_then_die(source: str, **kw: Any) -> Any:
            res = inner(source, **kw)
            calls["n"] += 1
            if calls["n"] == 2:
                raise _Killed()
            return res

        run.evaluate = evaluate_then_die  # type: ignore[method-assign]
    if kill_at == "tool:write_file":
        tools_write = agent.tools["write_file"]
        object.__setattr__(tools_write, "fn", lambda **kw: (_ for _ in ()).throw(_Killed()))
    with pytest.raises(_Killed):
        agent.optimize()
    if kill_at == "evaluate:after-record":
        run.evaluate = inner  # type: ignore[method-assign]
    spent_before = dict(ledger_map(run))
    executed_before = executed(run)
    replies_used = sum(1 for e in run.events() if e.kind.startswith("model_reply"))

    # Resume: the same run, a model that holds only the replies not yet recorded.
    remaining = [s for s in _script()][replies_used:]
    edits_used = sum(1 for e in run.events() if e.kind.startswith("edit_reply"))
    resumed, _ = make_agent(remaining, editor=_editor()[edits_used:], summarizer=[say("S")], run=run)
    result = resumed.optimize()

    assert (result.final_candidate, result.final_score, result.chosen_by) == (
        ref.final_candidate,
        ref.final_score,
        "agent",
    )
    assert kinds_by_step(run) == kinds_by_step(ref_run)  # every step exactly once, as in an uninterrupted run
    assert executed(run) == executed(ref_run) == 3  # no evaluation ran twice
    assert sorted(k for k in ledger_map(run) if k[1] is Unit.EVALUATIONS) == sorted(
        k for k in ledger_map(ref_run) if k[1] is Unit.EVALUATIONS)
    for key, amount in spent_before.items():  # what was debited before the kill stands, never twice
        assert ledger_map(run)[key] == amount
    assert executed_before <= executed(run)
    assert len(resumed.models["agent"].requests) == len(remaining)  # recorded replies were not asked again
    assert [r.score for r in resumed.history] == [r.score for r in reference.history]
    assert resumed.workspace.root.joinpath("lessons.md").read_text() == "# Lessons\n- 3 is the target\n"


def test_a_reply_journaled_before_the_driver_died_is_charged_once(make_agent: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver dies after journaling its 2nd reply, before debiting it: the takeover must not charge
    that call at its reservation (the replay debits what it actually cost: it would be paid twice)."""
    agent, run = make_agent(_script(), editor=_editor(), summarizer=[say("S")])
    settle, settled = Run.settle, {"calls": 0}

    def dies_before_the_second_debit(self: Run, token: Any, costs: Any, *, step: int, note: str) -> None:
        if token is not None and Unit.MODEL_CALLS in costs:
            settled["calls"] += 1
            if settled["calls"] == 2:
                raise _Killed()
        settle(self, token, costs, step=step, note=note)

    monkeypatch.setattr(Run, "settle", dies_before_the_second_debit)
    with pytest.raises(_Killed):
        agent.optimize()
    monkeypatch.setattr(Run, "settle", settle)
    run.close()
    assert run.store.reserved(run.id).get(Unit.MODEL_CALLS) == 1.0  # the journaled call's hold was left
    replies_used = sum(1 for e in run.events() if e.kind.startswith("model_reply"))
    edits_used = sum(1 for e in run.events() if e.kind.startswith("edit_reply"))
    taken = Run.open(run.store, run.id, executor=run.executor, resume=True, takeover=True)  # the old driver is dead
    resumed, _ = make_agent(_script()[replies_used:], editor=_editor()[edits_used:], summarizer=[say("S")],
                            run=taken)
    resumed.optimize()
    replies = [e for e in run.events() if e.kind.split(".")[0] in ("model_reply", "edit_reply", "summary")]
    ledger = run.store.ledger(run.id)
    assert not [e for e in ledger if e.note.startswith("charged at reservation")]
    assert sum(e.amount for e in ledger if e.unit is Unit.MODEL_CALLS) == len(replies)  # each reply paid once
    assert run.store.reserved(run.id) == {}


def test_an_answered_reply_whose_journal_write_fails_is_charged_at_its_reservation(
        make_agent: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The endpoint answered the 2nd call, then journaling the reply failed (a full disk) and the driver died of
    it: the call may be billed, so its hold stays and the takeover charges it at its reservation, once; the
    resumed run asks again (the reply was never journaled) and pays that call too."""
    from reasearch.errors import StoreError
    from reasearch.runs.journal import Journal

    agent, run = make_agent(_script(), editor=_editor(), summarizer=[say("S")])
    record, seen = Journal.record, {"replies": 0}

    def disk_full_at_the_second_reply(self: Journal, step: int, kind: str, payload: Any) -> Any:
        if kind.startswith("model_reply"):
            seen["replies"] += 1
            if seen["replies"] == 2:
                raise StoreError("database or disk is full")
        return record(self, step, kind, payload)

    monkeypatch.setattr(Journal, "record", disk_full_at_the_second_reply)
    with pytest.raises(StoreError, match="full"):
        agent.optimize()
    monkeypatch.setattr(Journal, "record", record)
    run.close()
    assert len(agent.models["agent"].requests) == 2  # both calls were answered
    assert run.store.reserved(run.id).get(Unit.MODEL_CALLS) == 1.0  # the unjournaled answer's hold was left
    taken = Run.open(run.store, run.id, executor=run.executor, resume=True, takeover=True)  # the old driver is dead
    ledger = run.store.ledger(run.id)
    assert sum(e.amount for e in ledger if e.unit is Unit.MODEL_CALLS and e.note.startswith("charged at reservation")
               ) == 1.0
    replies_used = sum(1 for e in run.events() if e.kind.startswith("model_reply"))
    edits_used = sum(1 for e in run.events() if e.kind.startswith("edit_reply"))
    resumed, _ = make_agent(_script()[replies_used:], editor=_editor()[edits_used:], summarizer=[say("S")],
                            run=taken)
    resumed.optimize()
    replies = [e for e in run.events() if e.kind.split(".")[0] in ("model_reply", "edit_reply", "summary")]
    paid = sum(e.amount for e in run.store.ledger(run.id) if e.unit is Unit.MODEL_CALLS)
    assert paid == len(replies) + 1  # every journaled reply once, and the answer the full disk lost once
    assert run.store.reserved(run.id) == {}


def test_resume_restores_active_time_and_turns(make_agent: Any, tmp_path: Path) -> None:
    t = {"now": 0.0}

    def clock() -> float:
        t["now"] += 10.0
        return t["now"]

    script = [say("", call("evaluate")), say("", call("get_status")), lambda req: (_ for _ in ()).throw(_Killed())]
    agent, run = make_agent(script, max_wall_s=1000.0)
    agent.clock.now = clock  # the clock the agent and its model calls hold
    agent.clock.restore(0.0)
    with pytest.raises(_Killed):
        agent.optimize()
    recorded = [e.payload["elapsed_s"] for e in run.events() if e.kind == "model_reply"]
    assert recorded == sorted(recorded) and recorded[-1] > 0
    resumed, _ = make_agent([say("", call("finish", reason="done"))], run=run, max_wall_s=1000.0)
    resumed.optimize()
    assert resumed.turn == 3
    last = [e.payload["elapsed_s"] for e in run.events() if e.kind == "model_reply"][-1]
    assert last >= recorded[-1]  # the clock resumes from the recorded active time, not from zero


def test_usage_reported_by_a_model_drives_the_threshold(make_agent: Any) -> None:
    huge = ModelReply(tuple(say("", call("get_status")).content), StopReason.TOOL_USE, Usage(200_000, 10))
    agent, run = make_agent([huge, say("", call("evaluate"), call("finish", reason="x"))], summarizer=[say("S")])
    agent.optimize()
    assert [e.kind for e in run.events()].count("compaction") == 1
    assert "reached ~200" in next(e.payload["reason"] for e in run.events() if e.kind == "compaction")


def test_no_helper_model_call_past_a_spent_dollar_cap(make_agent: Any) -> None:
    from reasearch.models import Price

    agent, run = make_agent([say("", call("evaluate"), call("edit_code", instruction="anything"))],
                            budget={"dollars": 0.01}, editor=[say("```python\n" + BEST + "```")])
    agent.models["agent"]._price = Price(1e4, 1e4)  # the first reply alone costs more than the cap
    result = agent.optimize()
    edit = [e.payload for e in run.events() if e.kind == "tool_result"][1]
    assert edit["is_error"] and "the dollars budget is spent: no further model call" in edit["text"]
    assert agent.models["editor"].requests == []  # the editor was never called
    assert result.chosen_by == "harness" and result.reason.startswith("the dollars budget is spent")
    assert result.final_score == SEED_SCORE


def test_repeated_evaluation_is_cached_and_free(make_agent: Any) -> None:
    agent, run = make_agent([say("", call("evaluate"), call("evaluate")), say("", call("finish", reason="x"))])
    agent.optimize()
    texts = [e.payload["text"] for e in run.events() if e.kind == "tool_result"]
    assert "[cached: cost nothing]" not in texts[0] and "[cached: cost nothing]" in texts[1]
    assert "not better than the best -18" in texts[1]
    assert run.used()[Unit.EVALUATIONS] == 1 and executed(run) == 1
    assert [r.cached for r in agent.history] == [False, True]
