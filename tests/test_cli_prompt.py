"""``reasearch eval`` / ``optimize`` / ``test`` on prompt tasks, through the real command and a local fake student."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch.cli import main
from reasearch.evaluators.base import candidate_sha256
from reasearch.evaluators.prompt.testing import (
    BETTER_PROMPT,
    GOOD_PROMPT,
    FakeStudentServer,
    gsm8k_answer_key,
    write_synthetic_gsm8k,
)
from reasearch.models.testing import call, say
from reasearch.runs import Run, RunState, Unit, open_store


@pytest.fixture(scope="module")
def gsm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_gsm8k(tmp_path_factory.mktemp("gsm8k"), n_train=100, n_test=25)


@pytest.fixture()
def server(gsm: Path) -> Iterator[FakeStudentServer]:
    with FakeStudentServer(gsm8k_answer_key(gsm)) as srv:
        yield srv


def _params(gsm: Path) -> list[str]:
    return ["-p", f"data_dir={gsm}", "-p", "n_train=30", "-p", "n_validation=30"]


def test_eval_scores_a_prompt_on_validation_aggregate_only(tmp_path: Path, gsm: Path, server: FakeStudentServer,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(BETTER_PROMPT)
    code = main(["eval", "gsm8k/v1", str(prompt), "--student", "openai/fake", "--base-url", server.url, "--json",
                 *_params(gsm)])
    out = capsys.readouterr().out
    assert code == 0
    doc = json.loads(out)
    assert doc["status"] == "OK" and doc["metrics"]["n"] == 30 and doc["metrics"]["split"] == "validation"
    assert 0.5 < doc["score"] < 1 and doc["solution"] is None
    assert "Problem" not in out and "####" not in out  # no input or output of any validation example
    assert server.requests == 30
    # the table form
    assert main(["eval", "gsm8k/v1", str(prompt), "--student", "openai/fake", "--base-url", server.url,
                 *_params(gsm)]) == 0
    assert "accuracy" in capsys.readouterr().out


def test_eval_input_errors_are_one_line_exit_2(tmp_path: Path, gsm: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(GOOD_PROMPT)
    assert main(["eval", "gsm8k/v1", str(prompt), *_params(gsm)]) == 2
    assert "needs a student model" in capsys.readouterr().err
    assert main(["eval", "circle_packing/n26-v1", str(prompt), "--student", "openai/x"]) == 2
    assert "for prompt tasks" in capsys.readouterr().err
    empty = tmp_path / "empty.txt"
    empty.write_text("   ")
    with FakeStudentServer({}) as srv:
        assert (
            main(["eval", "gsm8k/v1", str(empty), "--student", "openai/x", "--base-url", srv.url, *_params(gsm)]) == 1
        )
        assert srv.requests == 0
    assert "INVALID" in capsys.readouterr().out


def test_optimize_then_test(tmp_path: Path, gsm: Path, server: FakeStudentServer,
                            capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "script.json"
    replies = [say("", call("validate_candidate")), say("", call("validate_candidate", prompt=GOOD_PROMPT)),
               say("", call("validate_candidate", prompt=BETTER_PROMPT)),
               say("", call("finish", reason="best on validation"))]
    script.write_text(json.dumps([r.to_dict() for r in replies]))
    run_dir = tmp_path / "runs"
    code = main(["optimize", "gsm8k/v1", "--model", f"scripted/{script}", "--student", "openai/fake",
                 "--student-base-url", server.url, "--student-calls", "200", "--student-tokens", "10000000",
                 "--run-dir", str(run_dir), "--quiet", *_params(gsm)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "test split (sealed, scored by the harness)" in err
    assert re.search(r"tokens of a 10,000,000 cap, [\d,]+ student tokens of a 10,000,000 cap, \$", err), err
    (record,) = open_store(run_dir).list_runs()
    run = Run.open(open_store(run_dir), record.id)
    assert record.state is RunState.FINISHED and record.final_candidate == candidate_sha256(BETTER_PROMPT)
    assert run.budget.cap(Unit.STUDENT_CALLS) == 200 and run.budget.cap(Unit.EVALUATIONS) is None
    assert run.used()[Unit.STUDENT_CALLS] == 3 * 30 + 25
    # the student's tokens have their own unit and cap; the agent's --max-tokens counts its model alone
    assert run.budget.cap(Unit.STUDENT_TOKENS) == 10_000_000 and run.used()[Unit.STUDENT_TOKENS] > 0
    student_notes = {e.note for e in run.store.ledger(run.id) if e.unit is Unit.STUDENT_TOKENS}
    assert student_notes and not student_notes & {e.note for e in run.store.ledger(run.id) if e.unit is Unit.TOKENS}
    hits = server.paid_hits()
    assert main(["test", record.id[:16], "--run-dir", str(run_dir), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["split"] == "test" and doc["result"]["metrics"]["n"] == 25 and doc["result"]["cached"] is True
    assert doc["candidate"] == record.final_candidate and server.paid_hits() == hits  # the repeat cost nothing
    first = run.events(kind="test_result")[0].payload["result"]
    assert doc["result"]["score"] == first["score"]
    # a replay re-runs the recorded replies through the tools (live student calls in a fresh store): no divergence
    assert main(["replay", record.id, "--run-dir", str(run_dir), "--into", str(tmp_path / "replay"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["divergences"] == [] and report["evaluations_compared"] == 3


def test_test_refuses_a_program_run_and_a_missing_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", "nope", "--run-dir", str(tmp_path / "none")]) == 2
    assert "no run store" in capsys.readouterr().err
    store = open_store(tmp_path / "runs")
    run = Run.create(store, task_id="heilbronn/n11-v1", budget={"evaluations": 1})
    assert main(["test", run.id, "--run-dir", str(tmp_path / "runs")]) == 2
    assert "not a prompt task" in capsys.readouterr().err


def test_student_tokens_is_for_prompt_tasks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["optimize", "circle_packing/n26-v1", "--model", "demo", "--student-tokens", "5",
                 "--run-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2 and "--student-tokens is for prompt tasks" in err and err.count("\n") == 1
    assert not (tmp_path / "runs").exists() or not open_store(tmp_path / "runs").list_runs()
