"""``reasearch optimize`` / ``resume`` / ``replay`` through the real command (scripted models, real sandbox)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reasearch.cli import main
from reasearch.evaluators.base import candidate_sha256
from reasearch.models.testing import call, say
from reasearch.runs import Run, RunState, Unit, open_store

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
    from reasearch.models.testing import FakeAnthropicServer

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
    from reasearch.models.testing import FakeAnthropicServer

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


# ---------------------------------------------------------------- a misbehaving endpoint, through the command
@pytest.mark.parametrize("provider", ["anthropic", "openai"])
@pytest.mark.parametrize("kind", ["truncated", "wrong_shape", "html"])
def test_a_misbehaving_endpoint_interrupts_the_run_without_a_traceback(
    tmp_path: Path, provider: str, kind: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One kind per provider goes through a real ``python -m reasearch.cli`` process (what a user's shell
    sees); the other kinds call the same ``main`` in this process (the client's handling of each bad body)."""
    import os
    import subprocess
    import sys

    sys.path.insert(0, str(Path(__file__).parent / "agent"))
    from misbehaving import always

    with always(kind) as server:
        model, url = (
            ("claude-haiku-4-5", server.url) if provider == "anthropic" else ("openai/qwen", server.url + "/v1")
        )
        args = ["optimize", "heilbronn/n11-v1", "--model", model, "--base-url", url, "--retries", "2",
                "--run-dir", str(tmp_path)]
        if kind == "truncated":
            env = {**os.environ, "ANTHROPIC_API_KEY": "sk-test"}
            env.pop("ANTHROPIC_BASE_URL", None)
            done = subprocess.run([sys.executable, "-m", "reasearch.cli", *args], capture_output=True, text=True,
                                  env=env, timeout=300)
            code, out, err = done.returncode, done.stdout, done.stderr
        else:
            from reasearch.models.base import RetryPolicy

            pauses: list[int] = []  # the backoff is recorded, not slept: the policy's decision is what is checked
            monkeypatch.setattr(RetryPolicy, "delay",
                                lambda self, attempt, retry_after=None: pauses.append(attempt) or 0.0)
            monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
            monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
            code = main(args)
            out, err = capsys.readouterr()
            assert pauses == [0]  # one pause, between the two attempts
    assert code == 3, err
    assert "Traceback" not in err and "Traceback" not in out
    assert server.requests == 2  # retried under the policy (--retries 2), then given up
    (record,) = open_store(tmp_path).list_runs()
    assert record.state is RunState.INTERRUPTED and "is not a" in record.reason
    (line,) = [ln for ln in err.splitlines() if ln.startswith("reasearch: interrupted")]
    assert f"`reasearch resume {record.id} --run-dir {tmp_path}` continues it" in line


# ---------------------------------------------------------------- resume: endpoints and model options
def test_resume_records_model_options_and_refuses_a_silent_endpoint_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from reasearch.models.testing import FakeAnthropicServer

    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    with FakeAnthropicServer([say("", call("evaluate"))]) as first:  # then "script used up": HTTP 500
        monkeypatch.setenv("ANTHROPIC_BASE_URL", first.url)  # the endpoint comes from the environment
        code = main(["optimize", "heilbronn/n11-v1", "--model", "claude-haiku-4-5", "--retries", "1",
                     "--run-dir", str(tmp_path), "--quiet"])
    assert code == 3
    (record,) = open_store(tmp_path).list_runs()
    run = Run.open(open_store(tmp_path), record.id)
    start = next(e.payload for e in run.events() if e.kind == "start")
    assert start["endpoints"]["agent"] == first.url
    capsys.readouterr()

    from reasearch.models.messages import ModelReply, Usage

    finish = say("", call("finish", reason="seed"))
    with FakeAnthropicServer([ModelReply(finish.content, finish.stop_reason, Usage(1000, 100))]) as second:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", second.url)
        assert main(["resume", record.id, "--run-dir", str(tmp_path), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert f"sent its agent model to {first.url}; this resume would send it to {second.url}" in err
        assert f"--base-url {second.url} to switch on purpose" in err and err.count("\n") == 1
        assert second.requests == []  # refused before any call
        assert open_store(tmp_path).get_run(record.id).state is RunState.INTERRUPTED

        code = main(["resume", record.id, "--run-dir", str(tmp_path), "--quiet", "--base-url", second.url,
                     "--model", "claude-sonnet-4-6", "--price-in", "1", "--price-out", "2"])
        assert code == 0, capsys.readouterr().err
    assert [b["model"] for b in second.requests] == ["claude-sonnet-4-6"]
    run = Run.open(open_store(tmp_path), record.id)
    (change,) = [e for e in run.events() if e.kind == "models"]
    assert change.payload["endpoints"]["agent"] == second.url
    assert change.payload["previous_endpoints"]["agent"] == first.url
    agent_spec = change.payload["models"]["agent"]
    assert (agent_spec["name"], agent_spec["base_url"], agent_spec["price_in"], agent_spec["price_out"]) == (
        "claude-sonnet-4-6", second.url, 1.0, 2.0)
    assert run.used()[Unit.DOLLARS] == pytest.approx((1000 * 1.0 + 100 * 2.0) / 1e6)  # the new prices applied


@pytest.mark.parametrize("command", ["resume", "replay"])
def test_resume_and_replay_refuse_a_mistyped_run_dir(tmp_path: Path, command: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    wrong = tmp_path / "runz"
    assert main([command, "20261201-000000-abcdef01", "--run-dir", str(wrong)]) == 2
    assert f"no run store at {wrong / 'store.sqlite'}" in capsys.readouterr().err
    assert not wrong.exists()  # nothing was created there


@pytest.mark.parametrize("flags", [["--budget", "0"], ["--max-dollars", "0"], ["--max-tokens", "0"]])
def test_a_budget_that_allows_nothing_is_refused_before_any_model_call(
        tmp_path: Path, flags: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from reasearch.models.testing import FakeAnthropicServer

    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    with FakeAnthropicServer([say("", call("finish", reason="x"))]) as server:
        code = main(["optimize", "heilbronn/n11-v1", "--model", "claude-haiku-4-5", "--base-url", server.url,
                     "--run-dir", str(tmp_path), *flags])
    assert code == 2 and server.requests == []
    assert "allows nothing" in capsys.readouterr().err
    assert not (tmp_path / "store.sqlite").exists() or open_store(tmp_path).list_runs() == []


# ---------------------------------------------------------------- replay: command output is information
def test_replay_reports_command_output_as_information_and_file_results_as_divergence(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def run_with(replies: list, name: str) -> str:
        script = tmp_path / f"{name}.json"
        script.write_text(json.dumps([r.to_dict() for r in replies]))
        run_dir = tmp_path / name
        assert main(["optimize", "circle_packing/n26-v1", "--model", f"scripted/{script}", "--budget", "2",
                     "--run-dir", str(run_dir), "--sandbox", "process", "--quiet"]) == 0, capsys.readouterr().err
        (record,) = open_store(run_dir).list_runs()
        capsys.readouterr()
        return record.id

    noisy = [
        say("", call("bash", command="date +%N")),
        say("", call("evaluate")),
        say("", call("finish", reason="seed")),
    ]
    rid = run_with(noisy, "noisy")
    assert main(["replay", rid, "--run-dir", str(tmp_path / "noisy"), "--into", str(tmp_path / "r1"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["divergences"] == [] and report["evaluations_compared"] == 1
    assert [d["what"] for d in report["differences"]] == ["tool_result bash"]
    assert main(["replay", rid, "--run-dir", str(tmp_path / "noisy"), "--into", str(tmp_path / "r2"), "--json",
                 "--strict"]) == 1
    strict = json.loads(capsys.readouterr().out)
    assert [d["what"] for d in strict["divergences"]] == ["tool_result bash"]

    # The command's output lands in a file the agent reads back: a file-tool result must match exactly.
    leaky = [say("", call("bash", command="date +%N > stamp.txt")), say("", call("read_file", path="stamp.txt")),
             say("", call("evaluate")), say("", call("finish", reason="seed"))]
    rid = run_with(leaky, "leaky")
    assert main(["replay", rid, "--run-dir", str(tmp_path / "leaky"), "--into", str(tmp_path / "r3"), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [d["what"] for d in report["divergences"]] == ["tool_result read_file"]


# ---------------------------------------------------------------- what a person sees at the end
def test_the_end_of_a_run_writes_the_final_candidate_its_picture_and_a_summary(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "script.json"
    replies = [say("", call("write_file", path="candidate.py", content=IMPROVED)), say("", call("evaluate")),
               say("", call("write_file", path="candidate.py", content="def run():\n    return 1/0\n")),
               say("", call("finish", reason="rows", candidate_id=candidate_sha256(IMPROVED)[:10]))]
    script.write_text(json.dumps([r.to_dict() for r in replies]))
    run_dir = tmp_path / "runs"
    assert main(["optimize", "circle_packing/n26-v1", "--model", f"scripted/{script}", "--budget", "3",
                 "--run-dir", str(run_dir)]) == 0
    err = capsys.readouterr().err
    (record,) = open_store(run_dir).list_runs()
    ws = run_dir / record.id / "workspace"
    assert (ws / "best_candidate.py").read_text() == IMPROVED
    assert (ws / "best_candidate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "evaluation 1: OK score 2.5 (normalized 0.9484) - new best" in err  # a plain line: stderr is no TTY
    assert "score 2.5 = 0.9484 of the best known 2.63598308492 (chosen by agent)" in err
    assert (
        "spent: 1 evaluations of 3, 4 model calls," in err
        and "tokens of a 10,000,000 cap, $0.0000," in err
        and "active wall time" in err
    )
    assert f"final candidate: {ws / 'best_candidate.py'}" in err and f"picture: {ws / 'best_candidate.png'}" in err
    for cmd in ("show", "replay", "resume"):
        assert f"reasearch {cmd} {record.id} --run-dir {run_dir}" in err
    assert "━" not in err and "┃" not in err  # no repainted table in a log


# ---------------------------------------------------------------- cheap editor first, from the command line
def test_editor_model_with_a_fallback_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def script(name: str, replies: list) -> str:
        path = tmp_path / name
        path.write_text(json.dumps([r.to_dict() for r in replies]))
        return f"scripted/{path}"

    agent = script(
        "agent.json",
        [
            say("", call("edit_code", instruction="rows of 5, 5, 6, 5, 5")),
            say("", call("evaluate")),
            say("", call("finish", reason="rows")),
        ],
    )
    cheap = script("cheap.json", [say("```python\ndef run(:\n```")])
    strong = script("strong.json", [say(f"```python\n{IMPROVED}```")])
    run_dir = tmp_path / "runs"
    assert main(["optimize", "circle_packing/n26-v1", "--model", agent, "--editor-model", f"{cheap},{strong}",
                 "--budget", "2", "--run-dir", str(run_dir), "--sandbox", "process"]) == 0
    err = capsys.readouterr().err
    (record,) = open_store(run_dir).list_runs()
    run = Run.open(open_store(run_dir), record.id)
    assert run.config["agent"]["fallbacks"]["editor"]["name"] == strong.split("/", 1)[1]
    assert [e.payload["model"] for e in run.events() if e.kind.startswith("edit_reply")] == [
        "scripted:cheap.json", "scripted:strong.json"]
    assert "editor: scripted:cheap.json failed (the code does not compile" in err
    assert record.final_candidate == candidate_sha256(IMPROVED)
    assert main(["replay", record.id, "--run-dir", str(run_dir), "--into", str(tmp_path / "replay"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"]


# ---------------------------------------------------------------- a lessons library
def test_lessons_collect_builds_a_library_that_loads_with_lessons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "runs"

    def optimize(task: str, replies: list, *extra: str) -> str:
        script = tmp_path / f"s{len(list(tmp_path.glob('s*.json')))}.json"
        script.write_text(json.dumps([r.to_dict() for r in replies]))
        main(["optimize", task, "--model", f"scripted/{script}", "--budget", "3", "--run-dir", str(run_dir),
              "--quiet", *extra])
        capsys.readouterr()
        return max(open_store(run_dir).list_runs(), key=lambda r: r.created_at).id

    def lessons(*items: str) -> dict:
        return call("write_file", path="lessons.md", content="# Lessons\n" + "".join(f"- {i}\n" for i in items))

    first = optimize("circle_packing/n26-v1", [
        say("", call("evaluate")), say("", lessons("The seed grid is weak.")),
        say("", call("write_file", path="candidate.py", content=IMPROVED)), say("", call("evaluate")),
        say("", lessons("The seed grid is weak.", "Rows of 5, 5, 6, 5, 5 with LP radii reach 2.5")),
        say("", call("finish", reason="rows"))])
    second = optimize("circle_packing/n26-v1", [
        say("", call("evaluate")), say("", lessons("the seed grid is weak", "Random starts went nowhere")),
        say("", call("finish", reason="seed"))])
    optimize("heilbronn/n11-v1", [say("", lessons("Another task's lesson")), say("", call("evaluate")),
                                  say("", call("finish", reason="seed"))])
    optimize("circle_packing/n26-v1", [say("", lessons("An unfinished run's lesson"))])  # runs out of script

    library = tmp_path / "library.md"
    assert main(["lessons", "collect", "circle_packing/", "--run-dir", str(run_dir), "-o", str(library)]) == 0
    text = library.read_text()
    items = [ln for ln in text.splitlines() if ln.startswith("- ")]
    assert len(items) == 3  # deduplicated; other tasks and unfinished runs left out
    assert items[0].startswith(f"- Rows of 5, 5, 6, 5, 5 with LP radii reach 2.5 _(run {first} on "
                               "circle_packing/n26-v1, step ")
    assert "gain +0.333333335" in items[0]  # 2.5 over the seed's 2.1666666645 when it was written
    weak = next(i for i in items if "seed grid is weak" in i.lower())
    assert "gain +0," in weak and "also in 1 other runs" in weak
    assert any(i.startswith(f"- Random starts went nowhere _(run {second} on") for i in items)
    assert "Another task" not in text and "unfinished" not in text

    third = optimize("circle_packing/n26-v1", [say("", call("evaluate")), say("", call("finish", reason="seed"))],
                     "--lessons", str(library))
    assert (run_dir / third / "workspace" / "lessons.md").read_text() == text  # loadable as is
    assert main(["lessons", "collect", "circle_packing/", "--run-dir", str(run_dir)]) == 0
    again = capsys.readouterr().out
    assert third not in again and again.count("- ") == text.count("- ")  # a preloaded library is not credited again
    assert main(["lessons", "collect", "nothing/", "--run-dir", str(run_dir)]) == 1


# ---------------------------------------------------------------- --store and --executor
@pytest.mark.ray
def test_optimize_into_a_given_store_on_the_ray_executor(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         local_ray: Any) -> None:
    """The run lands in --store (not --run-dir's store); Ray (the session's node, already initialized)
    evaluates and the scores equal the local run's."""
    script = tmp_path / "script.json"
    replies = [say("", call("evaluate")), say("", call("evaluate", code=IMPROVED)), say("", call("finish", reason="x"))]
    script.write_text(json.dumps([r.to_dict() for r in replies]))
    scores = {}
    for executor in ("local", "ray"):
        store = tmp_path / f"{executor}.sqlite"
        assert main(["optimize", "circle_packing/n26-v1", "--model", f"scripted/{script}", "--budget", "3",
                     "--run-dir", str(tmp_path / "runs"), "--store", f"sqlite:///{store}", "--executor", executor,
                     "--quiet", "--sandbox", "process"]) == 0, capsys.readouterr().err
        (record,) = open_store(store).list_runs()
        scores[executor] = [e.result.score for e in open_store(store).evaluations(record.id)]
    assert not (tmp_path / "runs" / "store.sqlite").exists()  # nothing went to the default store
    assert scores["ray"] == scores["local"] and len(scores["local"]) == 2
    assert main(["optimize", "circle_packing/n26-v1", "--model", f"scripted/{script}", "--executor", "mpi",
                 "--run-dir", str(tmp_path / "x")]) == 2
    assert "--executor is local, ray or ray=ADDRESS" in capsys.readouterr().err


@pytest.mark.parametrize(("model", "hint"), [("demoo", "Did you mean 'demo'?"), ("gpt5", "openai/NAME")])
def test_an_unknown_model_name_is_named_with_the_choices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str], model: str,
                                                         hint: str) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)  # not the missing key: the name is what is wrong
    assert main(["optimize", "circle_packing/n26-v1", "--model", model, "--run-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"reasearch: error: unknown model {model!r}: give demo"), err
    assert hint in err and "API key" not in err
    assert open_store(tmp_path).list_runs() == []
