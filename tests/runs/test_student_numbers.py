"""Hostile numbers from a student (issue 36 item 3): a 401-digit answer, a usage of ``1e400``, ``NaN``,
``10**12``, text or junk. Every answered call is stored and debited once, to the ``student_tokens`` unit
(never the agent's ``tokens``), with its usage clamped to what the request could have used; an unreadable
answer scores as no answer; nothing raises and no split is sent twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reasearch.cli import main
from reasearch.evaluators.prompt import StudentRequest, StudentSpec, build_student
from reasearch.evaluators.prompt.metrics import MAX_ANSWER_DIGITS, apply_answer_rule, number_value
from reasearch.evaluators.prompt.testing import (
    GOOD_PROMPT,
    FakeStudentServer,
    gsm8k_answer_key,
    write_jsonl_sample,
    write_synthetic_gsm8k,
)
from reasearch.evaluators.result import Status
from reasearch.runs import Budget, Run, Unit, open_store
from reasearch.runs.prompt_splits import PromptSplits
from reasearch.usage import PROMPT_OVERHEAD_TOKENS, reported_tokens

HUGE = "1" * 401  # a 401-digit integer: float() of it overflows
N = 12
MAX_TOKENS = 64

# (usage JSON the student sends, what one call may be debited at most, at least)
HOSTILE_USAGE = {
    "1e400": '{"prompt_tokens": 1e400, "completion_tokens": 1e400}',
    "nan": '{"prompt_tokens": NaN, "completion_tokens": NaN}',
    "minus_inf": '{"prompt_tokens": -1e400, "completion_tokens": -Infinity}',
    "10**12": '{"prompt_tokens": 1000000000000, "completion_tokens": 1000000000000}',
    "401_digits": f'{{"prompt_tokens": {HUGE}, "completion_tokens": {HUGE}}}',
    "text": '{"prompt_tokens": "many", "completion_tokens": "lots"}',
    "nested": '{"prompt_tokens": [[[1]]], "completion_tokens": {"n": {"n": 1}}}',
    "not_an_object": '"usage"',
    "bools": '{"prompt_tokens": true, "completion_tokens": false}',
}


@pytest.fixture(scope="module")
def gsm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_gsm8k(tmp_path_factory.mktemp("gsm8k"), n_train=40, n_test=10)


def _run(tmp_path: Path, gsm: Path, srv: FakeStudentServer, budget: dict[str, float] | None = None) -> Run:
    params = dict(student="openai/fake", base_url=srv.url, data_dir=str(gsm), n_train=N, n_validation=N,
                  concurrency=4, backoff_s=0.01, max_tokens=MAX_TOKENS)
    return Run.create(open_store(tmp_path / "runs"), task_id="gsm8k/v1", task_params=params,
                      budget=budget if budget is not None else {"student_calls": 100, "tokens": 10_000})


def _most_per_call(run: Run) -> int:
    """What one validation call of GOOD_PROMPT can use at most: one token per byte sent, a template, max_tokens."""
    task = run.task
    return max(sum(r.token_bounds()) for r in task.requests(GOOD_PROMPT, task.examples("validation")))


# ----------------------------------------------------------------------------------------------- (a) answers
@pytest.mark.parametrize("reply", [f'{{"final_answer": {HUGE}}}', f'{{"final_answer": -{HUGE}}}',
                                   '{"final_answer": 1e400}', '{"final_answer": NaN}', '{"final_answer": -Infinity}',
                                   '{"final_answer": [[[[3]]]]}', '{"final_answer": {"a": 3}}'])
def test_an_unreadable_json_answer_is_no_answer(reply: str) -> None:
    assert apply_answer_rule("json:final_answer", reply, "3") == (0.0, "")


@pytest.mark.parametrize("text", [HUGE, "1e999999999", "NaN"])
def test_an_unbounded_number_in_text_is_compared_as_text(text: str) -> None:
    assert apply_answer_rule("json:final_answer", f'{{"final_answer": "{text}"}}', "3") == (0.0, text)


def test_numbers_are_answers_only_when_bounded() -> None:
    assert number_value("9" * MAX_ANSWER_DIGITS) == int("9" * MAX_ANSWER_DIGITS)
    assert number_value("9" * (MAX_ANSWER_DIGITS + 1)) is None and number_value("1e999999999") is None
    assert apply_answer_rule("after-####", "#### " + HUGE, HUGE) == (0.0, "")
    big = "123456789012345678901234567890"  # over 28 digits: compared and written without rounding
    assert apply_answer_rule("json:final_answer", f'{{"final_answer": {big}}}', big) == (1.0, big)
    assert apply_answer_rule("json:final_answer", '{"final_answer": 2.50}', "2.5") == (1.0, "2.5")


def test_eval_of_a_401_digit_answer_scores_no_answer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_jsonl_sample(tmp_path / "data.jsonl", n=20)
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Answer with a JSON object holding final_answer.")
    with FakeStudentServer({}, reply_text=f'The result:\n{{"final_answer": {HUGE}}}') as srv:
        code = main(["eval", "prompt/jsonl-v1", str(prompt), "--student", "openai/fake", "--base-url", srv.url,
                     "--json", "-p", f"path={data}", "-p", "input_field=question", "-p", "answer_field=label",
                     "-p", "answer=json:final_answer", "-p", "n_train=5", "-p", "n_validation=10"])
        requests = srv.requests
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "OverflowError" not in out + err
    doc = json.loads(out)
    assert code == 0 and doc["status"] == "OK" and doc["score"] == 0.0
    assert doc["metrics"]["no_answer"] == 10 and doc["metrics"]["calls_paid"] == 10 and requests == 10


def test_a_run_stores_and_debits_every_call_of_unreadable_answers(tmp_path: Path, gsm: Path) -> None:
    with FakeStudentServer(gsm8k_answer_key(gsm), reply_text=f"#### {HUGE}") as srv:
        run = _run(tmp_path, gsm, srv)
        splits = PromptSplits(run)
        _, res = splits.validate(GOOD_PROMPT, step=1)
        out = splits.run_train(GOOD_PROMPT, ["train-0", "train-1", "train-2"], step=2)
        assert res.status is Status.OK and res.score == 0.0 and res.metrics["no_answer"] == N
        assert [o.kind for o in out] == ["no_answer"] * 3
        assert srv.requests == N + 3 and run.used()[Unit.STUDENT_CALLS] == N + 3
        assert [st for _, _, st in run.store.student_calls(run.id)] == ["OK"] * (N + 3)
        assert run.store.get_evaluation(run.id, 1) is not None  # the evaluation is recorded


def test_a_body_that_is_not_json_scores_as_no_answer_and_is_paid_once(tmp_path: Path, gsm: Path) -> None:
    """An answered call whose body cannot be read (here: not JSON at all) is stored, debited and judged no answer:
    the split is scored, not failed, and a repeat sends nothing (before: CRASH, the split unscored, paid again)."""
    with FakeStudentServer(gsm8k_answer_key(gsm), usage_json="{") as srv:  # '{' breaks every body's JSON
        run = _run(tmp_path, gsm, srv)
        splits = PromptSplits(run)
        _, res = splits.validate(GOOD_PROMPT, step=1)
        assert res.status is Status.OK and res.score == 0.0 and res.metrics["no_answer"] == N, res.feedback
        assert srv.requests == N and run.used()[Unit.STUDENT_CALLS] == N
        assert [st for _, _, st in run.store.student_calls(run.id)] == ["OK"] * N
        _, again = splits.validate(GOOD_PROMPT, step=2)
        assert again.status is Status.OK and srv.requests == N  # stored: nothing paid twice


# ------------------------------------------------------------------------------------------------ (b, c) usage
@pytest.mark.parametrize("usage", sorted(HOSTILE_USAGE))
def test_hostile_usage_is_stored_clamped_and_debited_to_student_tokens(usage: str, tmp_path: Path,
                                                                       gsm: Path) -> None:
    with FakeStudentServer(gsm8k_answer_key(gsm), usage_json=HOSTILE_USAGE[usage]) as srv:
        run = _run(tmp_path, gsm, srv)
        splits = PromptSplits(run)
        _, res = splits.validate(GOOD_PROMPT, step=1)
        assert res.status is Status.OK and res.score is not None and res.metrics["calls_paid"] == N
        assert srv.requests == N  # each call sent once: nothing raised, nothing re-sent
        used = run.used()
        assert used[Unit.STUDENT_CALLS] == N
        assert used.get(Unit.TOKENS, 0.0) == 0.0  # the agent's model-token budget is untouched
        assert run.remaining()[Unit.TOKENS] == 10_000
        assert 0 <= used.get(Unit.STUDENT_TOKENS, 0.0) <= N * _most_per_call(run)
        assert used.get(Unit.STUDENT_TOKENS, 0.0) == res.metrics["input_tokens"] + res.metrics["output_tokens"]
        _, again = splits.validate(GOOD_PROMPT, step=2)  # stored: served free, nothing sent
        assert again.cached and srv.requests == N and run.used()[Unit.STUDENT_CALLS] == N


def test_huge_usage_is_clamped_to_the_request_and_max_tokens(tmp_path: Path, gsm: Path) -> None:
    with FakeStudentServer(gsm8k_answer_key(gsm), usage_json=HOSTILE_USAGE["10**12"]) as srv:
        run = _run(tmp_path, gsm, srv)
        _, res = PromptSplits(run).validate(GOOD_PROMPT, step=1)
    examples = run.task.examples("validation")
    sent = sum(len(GOOD_PROMPT.encode()) + len(ex.input.encode()) + PROMPT_OVERHEAD_TOKENS for ex in examples)
    assert res.metrics["input_tokens"] == sent and res.metrics["output_tokens"] == N * MAX_TOKENS
    assert run.used()[Unit.STUDENT_TOKENS] == sent + N * MAX_TOKENS


def test_student_tokens_have_their_own_cap_and_honest_usage_leaves_the_agent_budget(tmp_path: Path,
                                                                                   gsm: Path) -> None:
    with FakeStudentServer(gsm8k_answer_key(gsm)) as srv:  # honest usage
        run = _run(tmp_path, gsm, srv, budget={"student_calls": 100, "tokens": 10_000, "student_tokens": 1})
        splits = PromptSplits(run)
        out = splits.run_train(GOOD_PROMPT, ["train-0"], step=1)
        assert out[0].status == "OK" and run.used()[Unit.STUDENT_TOKENS] > 1
        assert run.used().get(Unit.TOKENS, 0.0) == 0.0
        _, res = splits.validate(GOOD_PROMPT, step=2)  # the student-token cap is spent: refused, not made
        assert res.status is Status.REFUSED and "student-token budget spent" in res.feedback
        assert srv.requests == 1
    assert Budget.from_dict({"student_tokens": 5}).cap(Unit.STUDENT_TOKENS) == 5


@pytest.mark.parametrize("usage", sorted(HOSTILE_USAGE))
def test_the_anthropic_student_clamps_usage_too(usage: str, gsm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("anthropic")
    raw = HOSTILE_USAGE[usage].replace("prompt_tokens", "input_tokens").replace("completion_tokens", "output_tokens")
    monkeypatch.setenv("FAKE_KEY", "k")
    with FakeStudentServer(gsm8k_answer_key(gsm), usage_json=raw) as srv:
        client = build_student(StudentSpec("anthropic", "fake", base_url=srv.url.removesuffix("/v1"),
                                           api_key_env="FAKE_KEY", retries=0))
        request = StudentRequest("anthropic/fake", GOOD_PROMPT, "Problem 1: what?", max_tokens=MAX_TOKENS)
        reply = client.complete(request)
    bound_in, bound_out = request.token_bounds()
    assert reply.ok and reply.text and srv.requests == 1, reply.error
    assert 0 <= reply.input_tokens <= bound_in and 0 <= reply.output_tokens <= bound_out


def test_reported_tokens_never_raises_and_stays_in_bounds() -> None:
    for raw in (None, 5, 5.5, -3, float("inf"), float("-inf"), float("nan"), 10**500, "7", "x", [1], {}, True):
        assert 0 <= reported_tokens(raw, 100) <= 100
    assert reported_tokens(None, 100) == 0 and reported_tokens(42, 100) == 42 and reported_tokens("7", 100) == 7
    assert reported_tokens(10**500, 100) == 100 and reported_tokens(float("nan"), 100) == 100


def test_a_reply_that_breaks_an_answer_rule_is_no_answer_never_an_exception(monkeypatch: pytest.MonkeyPatch,
                                                                            tmp_path: Path) -> None:
    """Whatever a rule meets in a hostile reply (an overflow, a decimal trap, a recursion), judging goes on."""
    from reasearch.evaluators.prompt import task as task_module
    from reasearch.evaluators.prompt._data import Example
    from reasearch.evaluators.prompt._students import StudentReply
    from reasearch.evaluators.registry import make

    task = make("prompt/jsonl-v1", path=str(write_jsonl_sample(tmp_path / "d.jsonl")), answer="json:final_answer")
    for exc in (OverflowError("int too large to convert to float"), ArithmeticError("decimal"), RecursionError()):
        def boom(*args: object, _exc: Exception = exc, **kwargs: object) -> tuple[float, str]:
            raise _exc
        monkeypatch.setattr(task_module, "apply_answer_rule", boom)
        examples = [Example("validation-0", "q", "3"), Example("validation-1", "q2", "4")]
        judged = task.judge(examples, [StudentReply(Status.OK, "x"), StudentReply(Status.OK, "y")])
        assert [(j.kind, j.value, j.prediction) for j in judged] == [("no_answer", 0.0, "")] * 2
