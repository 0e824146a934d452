"""A new user's first hour (issue 27): each test drives the ``reasearch`` command as a user does.

Model endpoints are local fakes (:class:`FakeOpenAIServer`, :class:`FakeAnthropicServer`): nothing
leaves the machine, and every run is deterministic.
"""

from __future__ import annotations

import json
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reasearch.cli import main
from reasearch.models.messages import ModelReply
from reasearch.models.testing import FakeAnthropicServer, FakeOpenAIServer, call, say
from reasearch.runs import open_store


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """Under /var/tmp: the sandbox uid must reach the workspaces."""
    d = Path(tempfile.mkdtemp(prefix="reasearch-first-hour-", dir="/var/tmp"))
    d.chmod(0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _evaluate_then_finish(messages: list[Any]) -> ModelReply:
    """First turn: evaluate the seed; then finish (decided from the conversation, so stateless)."""
    if not any(m.get("role") == "assistant" for m in messages):
        return say("Baseline first.", call("evaluate"))
    return say("Done.", call("finish", reason="the seed is the best scored"))


# ---------------------------------------------------------------- item 1: the README's fleet command
# The README's fleet example, verbatim but for the local endpoint (its optional [...] parts left out).
README_FLEET = ("reasearch fleet run --task circle_packing/n26-v1 --task heilbronn/n11-v1 --seeds 0-4 "
                "--model claude-sonnet-4-6 --model openai/qwen2.5-coder --base-url http://127.0.0.1:11434/v1 "
                "--budget 50 --fleet-dollars 20 --parallelism 4")


def test_the_readmes_fleet_command_runs_against_local_endpoints(run_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with FakeOpenAIServer(lambda body: _evaluate_then_finish(body["messages"])) as oa, \
            FakeAnthropicServer([lambda body: _evaluate_then_finish(body["messages"])] * 40) as an:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", an.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
        argv = shlex.split(README_FLEET.replace("http://127.0.0.1:11434/v1", oa.url))[1:]
        code = main([*argv, "--run-dir", str(run_dir), "--json", "--quiet"])
        out = capsys.readouterr()
        assert code == 0, out.err
        data = json.loads(out.out)
        assert len(data["members"]) == 20 and {m["state"] for m in data["members"]} == {"finished"}
        assert len(oa.requests) == 20 and {r["model"] for r in oa.requests} == {"qwen2.5-coder"}
        assert len(an.requests) == 20 and {r["model"] for r in an.requests} == {"claude-sonnet-4-6"}


def test_a_fleet_specs_base_url_reaches_its_openai_members(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeOpenAIServer(lambda body: _evaluate_then_finish(body["messages"])) as oa:
        spec = run_dir / "fleet.toml"
        spec.write_text(f'tasks = ["circle_packing/n26-v1"]\nmodels = ["openai/qwen"]\nbase_url = "{oa.url}"\n'
                        'budget = {evaluations = 3}\n')
        assert main(["fleet", "run", "--spec", str(spec), "--run-dir", str(run_dir), "--json", "--quiet"]) == 0
        assert json.loads(capsys.readouterr().out)["members"][0]["state"] == "finished"
        assert len(oa.requests) == 2


# ---------------------------------------------------------------- item 2: wrong values, one line each
@pytest.mark.parametrize("task_id, param, words", [
    ("circle_packing/n26-v1", "n=abc", ["parameter n ", "an integer >= 2", "'abc'"]),
    ("circle_packing/n26-v1", "n=1", ["parameter n ", "an integer >= 2", "not 1"]),
    ("circle_packing/n26-v1", "foo=1", ["no parameter 'foo'", "n, time_limit_s, memory_mb"]),
    ("nanogpt/v2", "time_budget_s=abc", ["parameter time_budget_s ", "a number > 0", "'abc'"]),
    ("nanogpt/v2", "time_budget_s=-5", ["parameter time_budget_s ", "a number > 0", "not -5"]),
    ("nanogpt/v2", "slot=tpu", ["parameter slot ", "one of 'auto', 'gpu', 'cpu'"]),
])
@pytest.mark.parametrize("command", ["optimize", "eval", "seed"])
def test_a_wrong_parameter_is_one_line_exit_2_and_nothing_is_created(
        task_id: str, param: str, words: list[str], command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cand.py").write_text("def run():\n    return 1\n")
    argv = {"optimize": ["optimize", task_id, "--model", "demo", "--run-dir", "runs"],
            "eval": ["eval", task_id, "cand.py"], "seed": ["seed", task_id, "-o", "out"]}[command]
    assert main([*argv, "-p", param]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("reasearch: error: "), err
    assert all(w in err for w in words), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cand.py"]  # no runs/, no out


def test_tasks_params_lists_names_types_defaults_ranges_and_meaning(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "nanogpt/v2", "--params", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["time_budget_s"] == {"name": "time_budget_s", "type": "a number", "required": False, "default": 300.0,
                                     "range": "> 0", "meaning": rows["time_budget_s"]["meaning"]}
    assert rows["time_budget_s"]["meaning"].startswith("training seconds of one experiment")
    assert rows["eval_tokens"]["range"] == ">= 256 and <= 4194304"
    assert main(["tasks", "circle_packing/n26-v1", "--params"]) == 0
    out = capsys.readouterr().out
    assert "time_limit_s" in out and "number of circles" in out
    assert main(["tasks", "--params"]) == 2


def test_every_registered_task_declares_each_parameter_with_a_meaning_and_a_valid_default() -> None:
    """A parameter declared without a meaning (a TaskParams field's metadata, or a line in Args:) fails here."""
    from reasearch.evaluators.params import describe_params
    from reasearch.evaluators.registry import list_tasks, registered_entry

    seen = set()
    for task_id in list_tasks(include_families=True, expand=False):
        entry, _ = registered_entry(task_id)
        cls = entry.load()
        if cls in seen:
            continue
        seen.add(cls)
        assert not hasattr(cls, "PARAM_RANGES"), cls  # ranges are declared once, in a TaskParams dataclass
        for p in describe_params(cls):
            assert p.meaning, f"{cls.__name__}.{p.name} has no line in its Args: docstring"
            if not p.required and p.default is not None:
                assert p.accepts(p.default) and (p.range is None or p.range.ok(p.default)), (cls, p)
    assert len(seen) >= 8


def test_tasks_json_into_a_closed_pipe_is_quiet() -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, "-m", "reasearch.cli", "tasks", "--all", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"["
    proc.stdout.close()  # what `| head -1` does
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert proc.wait(timeout=60) == 141 and "Traceback" not in err and err == "", err


# ---------------------------------------------------------------- item 3: --model demo, offline
def _run_ids(run_dir: Path) -> list[str]:
    if not (run_dir / "store.sqlite").exists():
        return []
    with open_store(run_dir) as store:
        return [r.id for r in store.list_runs()]


def test_optimize_with_the_demo_model_improves_on_the_seed_offline(run_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")  # nothing may be called
    argv = ["optimize", "circle_packing/n26-v1", "--model", "demo", "--budget", "12", "--run-dir", str(run_dir),
            "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().err
    from reasearch.runs import Run

    with open_store(run_dir) as store:
        (rec,) = store.list_runs()
        run = Run.open(store, rec.id)
        seed = make_seed_score()
        best = run.best()
        assert best is not None and best[1].score > seed * 1.1  # rows + LP radii: 2.5 vs the grid's 2.1667
        tools = [e.payload["name"] for e in run.events(kind="tool_call")]
    assert tools[:2] == ["read_file", "get_current_code"] and tools[-1] == "finish"
    assert tools.count("evaluate") == 12 and "chosen by agent" in out
    # deterministic: a second run makes the same decisions and scores
    assert main(argv) == 0
    with open_store(run_dir) as store:
        runs = [Run.open(store, r.id) for r in store.list_runs()]
        scores = [[e.result.score for e in r.evaluations()] for r in runs]
    assert scores[0] == scores[1]


def make_seed_score() -> float:
    from reasearch.evaluators import make

    score = make("circle_packing/n26-v1").spec.seed_score
    assert score is not None
    return score


@pytest.mark.parametrize("task_id", ["heilbronn/n11-v1", "txn_scheduling/v1"])
def test_the_demo_model_plays_other_program_tasks(
    task_id: str, run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the seed, then one program of the demo model's own: enough to show it plays the task to a finish
    assert main(["optimize", task_id, "--model", "demo", "--budget", "2", "--run-dir", str(run_dir), "--quiet"]) == 0
    assert "chosen by agent" in capsys.readouterr().err
    from reasearch.runs import Run

    with open_store(run_dir) as store:
        (rec,) = store.list_runs()
        evaluations = Run.open(store, rec.id).evaluations()
    assert len({e.candidate_id for e in evaluations}) == 2 and all(e.result.status.value == "OK" for e in evaluations)


def test_the_demo_model_plays_gsm8k_with_a_local_toy_student(run_dir: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from reasearch.evaluators.prompt.testing import (
        FakeStudentServer,
        gsm8k_answer_key,
        write_synthetic_gsm8k,
    )

    gsm = write_synthetic_gsm8k(tmp_path / "gsm8k", n_train=60, n_test=10)
    with FakeStudentServer(gsm8k_answer_key(gsm)) as student:
        assert main(["optimize", "gsm8k/v1", "--model", "demo", "--student", "openai/toy", "--student-base-url",
                     student.url, "--student-calls", "150", "-p", f"data_dir={gsm}", "-p", "n_train=20", "-p",
                     "n_validation=20", "--run-dir", str(run_dir), "--quiet"]) == 0
    from reasearch.runs import Run

    with open_store(run_dir) as store:
        (rec,) = store.list_runs()
        scores = [e.result.score for e in Run.open(store, rec.id).evaluations() if e.result.score is not None]
    assert len(scores) >= 3 and max(scores) > scores[0]  # an instruction from the list helped the toy student


def test_demo_no_tools_contract_mutates_the_last_fenced_block() -> None:
    import ast

    from reasearch.models import DemoModel
    from reasearch.models.demo import INSTRUCTIONS
    from reasearch.models.messages import ModelRequest

    program = "import math\n\nA = 0.25\n\n\ndef run():\n    return [A * 2.0, math.pi, -1.5e-3]\n"
    ask = f"Improve this.\n```python\nX = 1.0\n```\nand this one:\n```python\n{program}```\n"
    req = ModelRequest("", [{"role": "user", "content": [{"type": "text", "text": ask}]}])
    model = DemoModel()
    reply = model.complete(req)
    assert reply.tool_calls == [] and reply.text.count("```") == 2 and reply.text.startswith("```python\n")
    new = reply.text.split("\n", 1)[1].rsplit("```", 1)[0]
    ast.parse(new)
    assert new != program and "def run():" in new and "import math" in new and "X = 1.0" not in new
    assert model.complete(req).text == reply.text  # seeded by the request: deterministic
    text_req = ModelRequest("", [{"role": "user", "content": "a prompt:\n```text\nSolve it.\n```"}])
    out = model.complete(text_req).text
    body = out.split("\n", 1)[1].rsplit("```", 1)[0]
    assert out.startswith("```text\n") and body.startswith("Solve it.") and any(i in body for i in INSTRUCTIONS)
    bare = model.complete(ModelRequest("", [{"role": "user", "content": "no block"}])).text
    assert bare == f"```text\n{INSTRUCTIONS[0]}\n```"
    hostile = "```python\ndef f(:\n    return 1.5\n```"  # does not parse: comes back unchanged
    assert "def f(:" in model.complete(ModelRequest("", [{"role": "user", "content": hostile}])).text


@pytest.mark.parametrize("script, words", [
    ([{"foo": 1}], ["reply 1 of 1", "unknown key 'foo'"]),
    ([{"content": [{"type": "text", "text": "hi"}]}, {"content": "evaluate"}], ["reply 2 of 2", "'content'"]),
    ([{"content": [{"type": "tool_use", "name": "evaluate", "id": "a", "input": [1]}]}], ["block 1", "input"]),
    ([{"content": [{"type": "text", "text": "x"}], "stop_reason": "done"}], ["unknown stop_reason 'done'"]),
    ([], ["non-empty JSON list"]),
    ({"foo": []}, ["non-empty JSON list"]),
])
def test_a_bad_scripted_reply_file_is_one_line_naming_the_entry(script: Any, words: list[str], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.json").write_text(json.dumps(script))
    assert main(["optimize", "circle_packing/n26-v1", "--model", "scripted/s.json", "--run-dir", "runs"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and all(w in err for w in words) and "docs/demo-and-scripted-models.md" in err, err
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------- item 7: a model that never calls a tool
def test_a_model_that_never_calls_a_tool_is_warned_then_stopped(run_dir: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with FakeOpenAIServer(lambda body: say("I think the answer is to make the circles bigger.")) as oa:
        code = main(["optimize", "circle_packing/n26-v1", "--model", "openai/chatty", "--base-url", oa.url,
                     "--run-dir", str(run_dir), "--quiet"])
        err = capsys.readouterr().err
        assert len(oa.requests) == 5  # the default limit, not 200 turns
        last_user = [m for m in oa.requests[-1]["messages"] if m["role"] == "user"][-1]["content"]
        assert "WARNING: 4 replies in a row called no tool" in last_user
        assert not any("WARNING" in str(m) for r in oa.requests[:-1] for m in r["messages"][-1:])
    assert code == 1  # nothing scored
    assert "5 turns in a row without calling a tool" in err
    assert "tokens of a 10,000,000 cap" in err  # the default token cap, stated
    assert "report: reasearch report " in err


def test_the_no_tool_limit_and_the_token_cap_are_flags(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeOpenAIServer(lambda body: say("thinking")) as oa:
        main(["optimize", "circle_packing/n26-v1", "--model", "openai/chatty", "--base-url", oa.url, "--run-dir",
              str(run_dir), "--quiet", "--max-turns-without-tools", "2", "--max-tokens", "5000"])
        assert len(oa.requests) == 2
    assert "tokens of a 5,000 cap" in capsys.readouterr().err


# ---------------------------------------------------------------- item 6: a down endpoint, runs delete/prune
def test_a_down_endpoint_fails_at_once_and_creates_no_run(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["optimize", "circle_packing/n26-v1", "--model", "openai/q", "--base-url",
                 f"http://127.0.0.1:{port}/v1", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not answer (connection refused)" in err and "no run was created" in err
    assert _run_ids(run_dir) == []
    assert main(["fleet", "run", "--task", "circle_packing/n26-v1", "--model", "openai/q", "--base-url",
                 f"http://127.0.0.1:{port}/v1", "--run-dir", str(run_dir)]) == 2
    assert "connection refused" in capsys.readouterr().err and _run_ids(run_dir) == []


def test_a_missing_client_library_fails_before_a_run(run_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "anthropic", None)  # as if not installed
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    assert main(["optimize", "circle_packing/n26-v1", "--model", "claude-sonnet-4-6", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "needs the 'anthropic' package, which is not installed: pip install" in err and err.count("\n") == 1
    assert _run_ids(run_dir) == []


def test_each_retry_is_announced(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeOpenAIServer(lambda body: _evaluate_then_finish(body["messages"]), fail_first=[503, 429]) as oa:
        assert main(["optimize", "circle_packing/n26-v1", "--model", "openai/q", "--base-url", oa.url,
                     "--run-dir", str(run_dir), "--quiet", "--budget", "2"]) == 0
    err = capsys.readouterr().err
    assert "model endpoint: HTTP 503, retry 2/6 in 0 s" in err and "model endpoint: HTTP 429, retry 3/6 in 0 s" in err


def test_a_refused_connection_retry_names_its_cause() -> None:
    import socket

    from reasearch.errors import ModelError
    from reasearch.models import ModelSpec, OpenAICompatibleModel, RetryPolicy
    from reasearch.models.messages import ModelRequest

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    lines: list[str] = []
    sleeps: list[float] = []
    model = OpenAICompatibleModel(ModelSpec(provider="openai", name="q", base_url=f"http://127.0.0.1:{port}/v1"),
                                  retry=RetryPolicy(max_attempts=3, sleep=sleeps.append, notify=lines.append))
    with pytest.raises(ModelError):
        model.complete(ModelRequest("s", [{"role": "user", "content": "hi"}]))
    assert [ln.split(" in ")[0] for ln in lines] == ["model endpoint: connection refused, retry 2/3",
                                                     "model endpoint: connection refused, retry 3/3"]
    assert len(sleeps) == 2


def _demo_run(run_dir: Path, budget: str = "2") -> str:
    assert main(["optimize", "circle_packing/n26-v1", "--model", "demo", "--budget", budget, "--run-dir",
                 str(run_dir), "--quiet"]) == 0
    return _run_ids(run_dir)[-1]


def test_runs_delete_and_prune_remove_runs_but_never_a_live_one(run_dir: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from reasearch.runs import Budget, Run

    full = _demo_run(run_dir)
    with open_store(run_dir) as store:  # an empty run, as a failed start leaves one
        dead = Run.create(store, task_id="circle_packing/n26-v1", budget=Budget.from_dict({"evaluations": 1}))
        dead.close()  # its driver stopped
        empty = dead.id
        live = Run.create(store, task_id="circle_packing/n26-v1", budget=Budget.from_dict({"evaluations": 1}))
        live.resume()  # this process drives it: a live heartbeat
        (run_dir / empty).mkdir()
        try:
            d = ["--run-dir", str(run_dir)]
            assert main(["runs", "delete", full, *d]) == 2  # it holds evaluations
            assert "holds 2 evaluations; pass --force" in capsys.readouterr().err
            assert main(["runs", "delete", live.id, *d]) == 2
            assert "held by a live driver" in capsys.readouterr().err
            assert main(["runs", "prune", "--empty", *d]) == 0
            assert f"deleted run {empty}" in capsys.readouterr().err
            assert sorted(_run_ids(run_dir)) == sorted([full, live.id]) and not (run_dir / empty).exists()
            assert main(["runs", *d, "delete", full[:-3], "--force"]) == 0
            assert _run_ids(run_dir) == [live.id] and not (run_dir / full).exists()
            assert main(["runs", "delete", "nope", *d]) == 2
        finally:
            live.close()


# ---------------------------------------------------------------- item 10: the smaller ones
def _demo_fleet(run_dir: Path, fleet_id: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["fleet", "run", "--task", "circle_packing/n26-v1", "--model", "demo", "--budget", "2", "--id",
                 fleet_id, "--run-dir", str(run_dir), "--quiet"]) == 0
    return capsys.readouterr().out


def test_fleet_show_takes_a_prefix_and_a_finished_fleet_prints_no_resume_line(
        run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _demo_fleet(run_dir, "fleet-demo-abc123", capsys)
    assert "fleet fleet-demo-abc123" in out and "resume with" not in out
    assert main(["fleet", "show", "fleet-demo-a", "--run-dir", str(run_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fleet_id"] == "fleet-demo-abc123"
    _demo_fleet(run_dir, "fleet-demo-abd456", capsys)
    assert main(["fleet", "show", "fleet-demo-ab", "--run-dir", str(run_dir)]) == 2
    assert "ambiguous (2 fleets)" in capsys.readouterr().err
    assert main(["fleet", "show", "nope", "--run-dir", str(run_dir)]) == 2


@pytest.mark.parametrize("argv", [["serve"], ["mcp", "circle_packing/n26-v1", "--http"]])
def test_a_busy_port_is_one_line_and_creates_no_run(argv: list[str], run_dir: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    _demo_run(run_dir)  # a store to serve
    capsys.readouterr()
    before = _run_ids(run_dir)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main([*argv, "--port", str(port), "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"port {port} on 127.0.0.1 is already in use" in err, err
    assert _run_ids(run_dir) == before


def test_eval_of_a_folder_for_a_file_task_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cand").mkdir()
    assert main(["eval", "circle_packing/n26-v1", str(tmp_path / "cand")]) == 2
    err = capsys.readouterr().err
    assert "is a folder, but a candidate of circle_packing/n26-v1 is one Python file" in err


def test_report_into_a_missing_folder_names_the_folder(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = _demo_run(run_dir)
    capsys.readouterr()
    assert main(["report", run_id, "--run-dir", str(run_dir), "-o", "/missing/dir/x.html"]) == 2
    err = capsys.readouterr().err
    assert "the folder /missing/dir does not exist" in err and err.count("\n") == 1


def test_ctrl_c_prints_one_line(run_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    from reasearch.models.demo import DemoModel

    real = DemoModel.complete
    calls = []

    def interrupted(self: DemoModel, request: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, request)

    monkeypatch.setattr(DemoModel, "complete", interrupted)
    assert main(["optimize", "circle_packing/n26-v1", "--model", "demo", "--run-dir", str(run_dir), "--quiet"]) == 130
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("reasearch:")]
    assert len(lines) == 1 and "interrupted by the user; the run is saved" in lines[0], lines


def test_seed_of_a_training_task_leaves_no_git_home(tmp_path: Path) -> None:
    assert main(["seed", "nanogpt/v2", "-o", str(tmp_path / "ng")]) == 0
    assert sorted(p.name for p in (tmp_path / "ng").iterdir()) == [".git", "model.py", "train.py"]


def test_lessons_collect_keeps_the_worked_and_failed_categories(run_dir: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    lessons = ("# Lessons\n\n## What worked\n\n- rows of 5,5,6,5,5 with LP radii\n\n## What failed (and why)\n\n"
               "- a hex grid: circles too small at the walls\n\n## What to try next\n\n- move the middle row\n")
    replies = [say("", call("evaluate")), say("", call("write_file", path="lessons.md", content=lessons)),
               say("", call("finish", reason="done"))]
    script = run_dir / "s.json"
    script.write_text(json.dumps([r.to_dict() for r in replies]))
    assert main(["optimize", "circle_packing/n26-v1", "--model", f"scripted/{script}", "--run-dir", str(run_dir),
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["lessons", "collect", "circle_packing/", "--run-dir", str(run_dir)]) == 0
    text = capsys.readouterr().out
    worked, failed, nxt = (text.index(h) for h in ("## What worked", "## What failed (and why)", "## What to try next"))
    assert worked < text.index("rows of 5,5,6,5,5") < failed < text.index("a hex grid") < nxt < text.index("middle row")


def test_sandbox_clean_removes_unused_runtime_folders_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    import os
    import subprocess
    import time

    base = tmp_path / "rt"
    base.mkdir()
    monkeypatch.setenv("REASEARCH_RUNTIME_DIR", str(base))
    from reasearch.engine._runtime import runtime_root

    root = runtime_root()
    old = time.time() - 7200
    made = {}
    for name in ("reasearch-runtime-unused", "reasearch-code-used", "reasearch-code-fresh", "data"):
        (root / name / "lib").mkdir(parents=True)
        (root / name / "lib" / "f.py").write_text("x = 1\n" * 1000)
        made[name] = root / name
        if name != "reasearch-code-fresh":
            os.utime(root / name, (old, old))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    (root / "reasearch-code-link").symlink_to(outside)
    user = subprocess.Popen(["sleep", "60"], env={**os.environ, "PYTHONHOME": str(made["reasearch-code-used"])})
    try:
        assert main(["sandbox", "clean", "--dry-run"]) == 0
        assert "would remove: " + str(made["reasearch-runtime-unused"]) in capsys.readouterr().err
        assert made["reasearch-runtime-unused"].exists()
        assert main(["sandbox", "clean"]) == 0
        err = capsys.readouterr().err
    finally:
        user.kill()
        user.wait()
    assert not made["reasearch-runtime-unused"].exists() and "1 of 3 runtime folders removed" in err
    assert made["reasearch-code-used"].exists() and made["reasearch-code-fresh"].exists() and made["data"].exists()
    assert (outside / "keep.txt").read_text() == "mine"


def test_report_without_an_id_reports_the_latest_run(run_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(run_dir.parent)
    assert main(["report", "--run-dir", str(run_dir)]) == 2  # no store yet: one line
    assert "no run store at" in capsys.readouterr().err
    _demo_run(run_dir)
    latest = _demo_run(run_dir, budget="3")
    capsys.readouterr()
    out = run_dir / "r.html"
    assert main(["report", "--run-dir", str(run_dir), "-o", str(out)]) == 0
    assert f"the latest run, {latest}" in capsys.readouterr().err and latest in out.read_text()


def test_the_lineage_follows_the_program_a_written_file_builds_on(run_dir: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from reasearch.evaluators import make

    seed = make("circle_packing/n26-v1").seed_program()
    rows = seed.replace("radius = 0.5 * step * (1.0 - 1e-9)", "radius = 0.5 * step * (1.0 - 1e-6)")
    other = ("import numpy as np\n\n\ndef run():\n    k = np.arange(26)\n"
             "    c = np.stack([(k % 6 + 0.5) / 6, (k // 6 + 0.5) / 6], axis=1)\n    return c, np.full(26, 1 / 13)\n")
    again = seed.replace("radius = 0.5 * step * (1.0 - 1e-9)", "radius = 0.5 * step * (1.0 - 1e-7)")
    replies = [say("", call("evaluate")), say("", call("evaluate", code=other)),
               say("", call("evaluate", code=rows)), say("", call("evaluate", code=again)),
               say("", call("finish", reason="done"))]
    script = run_dir / "s.json"
    script.write_text(json.dumps([r.to_dict() for r in replies]))
    assert main(["optimize", "circle_packing/n26-v1", "--model", f"scripted/{script}", "--run-dir", str(run_dir),
                 "--quiet"]) == 0
    from reasearch.evaluators.base import candidate_sha256

    with open_store(run_dir) as store:
        (rec,) = store.list_runs()
        parents = {c.id: c.parent for c in store.candidates(rec.id)}
    s, o, r, a = (candidate_sha256(x) for x in (seed, other, rows, again))
    assert parents[s] is None and parents[o] is None  # `other` shares 29% of the seed's lines: a new root
    assert parents[r] == s  # written after `other`, but built on the seed: not a chain
    assert parents[a] == r  # closest to `rows` (one literal apart), the later of two equally close


def test_lessons_collect_after_demo_runs_finds_the_demos_lessons(run_dir: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    run_id = _demo_run(run_dir, budget="3")
    capsys.readouterr()
    out = run_dir / "library.md"
    assert main(["lessons", "collect", "circle_packing/", "--run-dir", str(run_dir), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "wrote 0 lessons" not in err and "from 1 finished runs" in err
    text = out.read_text()
    worked, failed = text.index("## What worked"), text.index("## What failed (and why)")
    assert worked < text.index("set a new best") < failed  # what the run measured, under its category
    assert failed < text.index("did not beat the best") and run_id in text


def test_optimize_of_a_prompt_task_checks_its_data_and_student_before_making_a_run(
        run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    from reasearch.evaluators.prompt.testing import write_synthetic_gsm8k

    with socket.socket() as s:  # a port nothing listens on once this closes
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    gsm = write_synthetic_gsm8k(tmp_path / "gsm8k", n_train=20, n_test=5)
    base = ["optimize", "gsm8k/v1", "--model", "demo", "--student", "openai/toy", "--student-base-url", dead,
            "--run-dir", str(run_dir), "--quiet"]
    assert main([*base, "-p", f"data_dir={tmp_path / 'missing'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "data not found" in err and "run " not in err.split("error:")[0]
    assert _run_ids(run_dir) == []
    assert main([*base, "-p", f"data_dir={gsm}", "-p", "n_train=10", "-p", "n_validation=5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"student openai/toy's endpoint {dead} does not answer" in err, err
    assert "--student-base-url" in err and _run_ids(run_dir) == []


def test_the_readme_python_snippet_runs_in_an_empty_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    import re

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", readme, re.S)
    assert snippet is not None
    monkeypatch.chdir(tmp_path)  # nothing there: the snippet may open only what it makes itself
    exec(compile(snippet.group(1), "README.md", "exec"), {})  # noqa: S102 (our own README)
    status, score = capsys.readouterr().out.split()[:2]
    assert status.endswith("OK") and float(score) > 0
