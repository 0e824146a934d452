"""``reasearch optimize`` / ``resume`` / ``replay`` through the real command (scripted models, real sandbox)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reasearch.agent.testing import call, say
from reasearch.cli import main
from reasearch.runs import Run, RunState, Unit, open_store
from reasearch.evaluators.base import candidate_sha256

IMPROVED = '''import numpy as np
from reasearch.native.lp import optimal_radii


def run():
    rows = (5, 5, 6, 5, 5)
    centers = np.array([((c + 0.5) / n, (r + 0.5) / 5) for r, n in enumerate(rows) for c in range(n)])
    return centers, optimal_radii(centers)
'''


def test_no_api_key_is_one_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    assert main(["optimize", "circle_packing/n26-v1", "--run-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "export ANTHROPIC_API_KEY=" in err and "--base-url" in err
    assert open_store(tmp_path).list_runs() == []  # nothing was started


def test_unknown_task_is_exit_2_with_a_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["optimize", "circle_packing/n26-v2", "--run-dir", str(tmp_path)]) == 2
    assert "Did you mean 'circle_packing/n26-v1'" in capsys.readouterr().err


def test_optimize_resume_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "script.json"
    replies = [say("", call("evaluate")), say("", call("write_file", path="candidate.py", content=IMPROVED)),
               say("", call("evaluate")),
               say("", call("finish", reason="rows beat the grid", candidate_id=candidate_sha256(IMPROVED)[:10]))]
    script.write_text(json.dumps([r.to_dict() for r in replies]))
    lessons = tmp_path / "old-lessons.md"
    lessons.write_text("# Lessons\n- from an earlier run: LP radii help\n")
    run_dir = tmp_path / "runs"
    code = main(["optimize", "circle_packing/n26-v1", "--model", f"scripted/{script}", "--budget", "3",
                 "--run-dir", str(run_dir), "--lessons", str(lessons)])
    out = capsys.readouterr()
    assert code == 0, out.err
    (record,) = open_store(run_dir).list_runs()
    run = Run.open(open_store(run_dir), record.id)
    assert record.state is RunState.FINISHED and record.final_candidate == candidate_sha256(IMPROVED)
    assert run.budget.cap(Unit.EVALUATIONS) == 3 and run.used()[Unit.EVALUATIONS] == 2
    assert run.config["agent"]["models"]["agent"] == {
        "provider": "scripted", "name": str(script), "base_url": None, "max_tokens": 8192, "temperature": None,
        "price_in": None, "price_out": None, "api_key_env": "", "attempts": 6}
    assert (run_dir / record.id / "workspace" / "lessons.md").read_text() == lessons.read_text()
    assert f"run {record.id}: finished" in out.err and "chosen by agent" in out.err

    assert main(["resume", record.id[:10], "--run-dir", str(run_dir)]) == 0
    assert "already finished" in capsys.readouterr().err

    assert main(["replay", record.id, "--run-dir", str(run_dir), "--into", str(tmp_path / "replay"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["divergences"] == [] and report["evaluations_compared"] == 2


def test_help_lists_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["optimize", "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for option in ("--model", "--budget", "--run-dir", "--lessons", "--base-url", "--max-dollars"):
        assert option in text


def test_optimize_against_a_local_messages_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from reasearch.agent.testing import FakeAnthropicServer

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-from-env")
    replies = [say("", call("evaluate")), say("", call("finish", reason="the seed is all I had"))]
    with FakeAnthropicServer(replies) as server:
        code = main(["optimize", "heilbronn/n11-v1", "--model", "claude-haiku-4-5", "--base-url", server.url,
                     "--budget", "2", "--max-dollars", "1", "--run-dir", str(tmp_path)])
    assert code == 0, capsys.readouterr().err
    assert [h["authorization"] for h in server.headers] == ["Bearer sk-from-env"] * 2
    (record,) = open_store(tmp_path).list_runs()
    run = Run.open(open_store(tmp_path), record.id)
    assert run.config["agent"]["models"]["agent"]["name"] == "claude-haiku-4-5"
    assert run.used()[Unit.EVALUATIONS] == 1 and run.used()[Unit.MODEL_CALLS] == 2
    assert record.final_candidate == candidate_sha256(run.task.seed_program())


def test_a_dollar_cap_needs_known_prices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["optimize", "heilbronn/n11-v1", "--model", "openai/qwen", "--base-url", "http://127.0.0.1:9/v1",
            "--max-dollars", "1", "--run-dir", str(tmp_path)]
    assert main(args) == 2
    assert "no price is known for the agent model 'qwen'" in capsys.readouterr().err
    assert open_store(tmp_path).list_runs() == []  # checked before the run was created


def test_a_failing_model_interrupts_the_run_and_says_how_to_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from reasearch.agent.testing import FakeAnthropicServer

    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    with FakeAnthropicServer([], fail_first=[400]) as server:
        code = main(["optimize", "heilbronn/n11-v1", "--model", "claude-haiku-4-5", "--base-url", server.url,
                     "--run-dir", str(tmp_path), "--quiet"])
    assert code == 3  # interrupted, resumable (documented in the help's epilog)
    (record,) = open_store(tmp_path).list_runs()
    assert record.state is RunState.INTERRUPTED and "Anthropic API error 400" in record.reason
    err = capsys.readouterr().err
    (line,) = [ln for ln in err.splitlines() if "interrupted" in ln]
    assert "Anthropic API error 400" in line and f"reasearch resume {record.id} --run-dir {tmp_path}" in line
