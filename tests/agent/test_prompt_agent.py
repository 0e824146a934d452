"""A scripted agent optimizes a student's system prompt against a local fake student: validation
accuracy improves, the trusted side scores the final prompt on the sealed test split, and no tool
output (nor anything sent to the analyst model) ever holds a validation or test answer."""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reasearch.agent import start_run
from reasearch.evaluators.kinds import PromptOptions
from reasearch.evaluators.prompt.testing import FakeStudentServer
from reasearch.evaluators.result import Status
from reasearch.models.messages import ModelReply, ModelRequest
from reasearch.models.testing import ScriptedModel, call, say
from reasearch.runs import Unit

SEED_OK = "Be brief."  # no 'Answer:' format: the student's last line is not the answer
GOOD = "Think step by step. End with a line 'Answer: <answer>'."
BETTER = "Think step by step and double-check. End with a line 'Answer: <answer>'."


def _data(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """120 examples whose answers are unique random tokens (so a leak can be searched for exactly)."""
    path = tmp_path / "data.jsonl"
    answers = {}
    with path.open("w") as fh:
        for i in range(120):
            q = f"Question {i}: which code unlocks door {i}?"
            answers[q] = f"CODE{secrets.token_hex(6).upper()}"
            fh.write(json.dumps({"q": q, "a": answers[q]}) + "\n")
    return path, answers


@contextlib.contextmanager
def _removed(folder: Path) -> Iterator[None]:
    try:
        yield
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _hidden_answers(task: Any) -> set[str]:
    return {ex.answer for split in ("validation", "test") for ex in task.examples(split)}


def test_scripted_agent_improves_validation_and_leaks_nothing(tmp_path: Path) -> None:
    path, answers = _data(tmp_path)
    analyst_requests: list[ModelRequest] = []

    def analyst(request: ModelRequest) -> ModelReply:
        analyst_requests.append(request)
        return say("The wrong ones lack a final 'Answer:' line.")

    with FakeStudentServer(answers) as srv:
        script = [
            say("", call("get_dataset_info")),
            say("", call("get_next_minibatch", size=50)),
            say("", call("get_next_minibatch", size=50)),  # cycles through all of train
            say("", call("validate_candidate")),  # the seed prompt
            say("", call("call_student_model_batch", prompt=SEED_OK, example_ids=["train-0", "train-1"])),
            say("", call("analyze_with_model", instruction="why wrong?", example_ids=["train-0", "train-1"],
                                  prompt=SEED_OK)),
            analyst,  # the analyst's reply (editor role)
            say("", call("call_student_model_batch", prompt=GOOD, example_ids=["val-0", "val-1"])),  # refused
            say("", call("call_student_model_batch", prompt=GOOD, example_ids=["test-0"])),  # refused
            say("", call("analyze_with_model", instruction="x", example_ids=["val-3"])),  # refused
            say("", call("read_file", path=str(path))),  # outside the workspace: refused
            say("", call("validate_candidate", prompt=GOOD)),
            say("", call("validate_candidate", prompt=BETTER)),
            say("", call("validate_candidate", prompt=BETTER)),  # a repeat: free
            say("Done.", call("finish", reason="best validation accuracy")),
        ]
        agent = start_run("prompt/jsonl-v1", budget={"student_calls": 1000}, run_dir=tmp_path / "runs",
                          models={"agent": ScriptedModel(script)},
                          task_params=dict(path=str(path), input_field="q", answer_field="a", metric="exact",
                                           n_train=40, n_validation=40, student="openai/fake", base_url=srv.url))
        result = agent.optimize()
        hits_of_the_run = srv.paid_hits()
        task = agent.task
        run = agent.run

        # validation accuracy improved, and the agent chose the best prompt
        history = [(r.candidate, r.score, r.cached) for r in agent.history]
        scores = [s for _, s, _ in history]
        assert 0 < scores[0] < scores[1] < scores[2] == scores[3] and history[3][2] is True
        assert result.chosen_by == "agent" and run.candidate_source(result.final_candidate) == BETTER

        # the trusted side scored the final prompt on the sealed test split, once, separately
        tests = run.events(kind="test_result")
        assert len(tests) == 1
        test = tests[0].payload["result"]
        assert test["status"] == "OK" and test["metrics"]["split"] == "test" and test["metrics"]["n"] == 40
        assert test["score"] == task.evaluate(BETTER, options=PromptOptions("test")).score > scores[0]

        # no tool output holds a validation or test answer (or input); the refused calls cost nothing
        hidden = _hidden_answers(task)
        hidden_inputs = {ex.input for s in ("validation", "test") for ex in task.examples(s)}
        assert len(hidden) == 80
        results = run.events(kind="tool_result")
        assert len(results) == 14
        for event in results:
            blob = json.dumps(event.payload)
            assert not {a for a in hidden if a in blob}, event.payload["name"]
            assert not {q for q in hidden_inputs if q in blob}, event.payload["name"]
        for event in run.events(kind="snapshot"):
            assert not {a for a in hidden if a in json.dumps(event.payload)}
        errors = {e.step: e.payload["text"] for e in results if e.payload["is_error"]}
        assert sum("not train example ids" in t for t in errors.values()) == 3 and len(errors) == 4
        # ... while train answers are visible (the tools do show train data)
        train_blob = json.dumps([e.payload for e in results])
        assert sum(ex.answer in train_blob for ex in task.examples("train")) == 40

        # the analyst saw only train examples and was debited in tokens
        assert len(analyst_requests) == 1
        sent = json.dumps(analyst_requests[0].messages)
        assert not {a for a in hidden if a in sent} and "train-0" in sent
        notes = {e.note for e in run.store.ledger(run.id) if e.unit is Unit.TOKENS}
        assert any("analysis_reply" in n for n in notes)

        # budget: 40 (seed) + 2 train + 40 + 40 validations + 40 test; the repeat and the analysed ones free
        assert run.used()[Unit.STUDENT_CALLS] == 40 + 2 + 40 + 40 + 40
        assert hits_of_the_run == 162

        # no tool spent more student calls than it announced before it ran
        calls = {e.step: e.payload for e in run.events(kind="tool_call")}
        spent: dict[int, float] = {}
        for entry in run.store.ledger(run.id):
            if entry.unit is Unit.STUDENT_CALLS:
                spent[entry.step] = spent.get(entry.step, 0.0) + entry.amount
        bounds = {step: agent.domain.max_student_calls(c["name"], c["input"]) for step, c in calls.items()}
        assert all(spent.get(step, 0.0) <= bound for step, bound in bounds.items())
        assert [bounds[s] for s in sorted(bounds) if bounds[s]] == [40, 2, 2, 2, 1, 1, 40, 40, 40]
        assert sum(spent.get(s, 0.0) for s in calls) == 40 + 2 + 40 + 40  # the test pass is not a tool

        # the snapshot shows each tool's cost in student calls and the student-call budget
        snap = run.events(kind="snapshot")[-1].payload["text"]
        assert "validate_candidate <= 40" in snap and re.search(r"student_calls: \d+ left", snap)
        assert f"Current prompt: prompt.txt = candidate {result.final_candidate[:12]}" in snap


def test_the_prompt_toolset_replaces_the_program_tools(tmp_path: Path) -> None:
    path, answers = _data(tmp_path)
    with FakeStudentServer(answers) as srv:
        agent = start_run("prompt/jsonl-v1", budget={"student_calls": 10}, run_dir=tmp_path / "runs",
                          models={"agent": ScriptedModel([])},
                          task_params=dict(path=str(path), input_field="q", answer_field="a", student="openai/fake",
                                           base_url=srv.url, n_train=10, n_validation=10))
        names = set(agent.tools)
        assert {"get_dataset_info", "get_next_minibatch", "call_student_model_batch", "validate_candidate",
                "analyze_with_model", "finish", "read_file"} <= names
        assert not {"evaluate", "edit_code", "get_current_code"} & names
        assert "system prompt of a student model" in agent.system
        assert agent.candidate_file == "prompt.txt"
        assert agent.run.eval_unit is Unit.STUDENT_CALLS


def test_the_loop_stops_when_student_calls_are_spent(tmp_path: Path) -> None:
    path, answers = _data(tmp_path)
    with FakeStudentServer(answers) as srv:
        script = [say("", call("validate_candidate", prompt=GOOD)), say("", call("validate_candidate", prompt=BETTER)),
                  say("", call("finish", reason="the budget is spent"))]
        agent = start_run("prompt/jsonl-v1", budget={"student_calls": 15}, run_dir=tmp_path / "runs",
                          models={"agent": ScriptedModel(script)},
                          task_params=dict(path=str(path), input_field="q", answer_field="a", student="openai/fake",
                                           base_url=srv.url, n_train=10, n_validation=10, n_test=5))
        result = agent.optimize()
        statuses = [r.status for r in agent.history]
        assert statuses == ["OK", Status.REFUSED.value]  # the second validation did not fit: 5 calls refused
        assert agent.run.candidate_source(result.final_candidate) == GOOD
        last = agent.run.events(kind="snapshot")[-1].payload
        assert last["wrap_up"] == "the student_calls budget is spent"
        assert agent.run.used()[Unit.STUDENT_CALLS] == 15 + 5  # the test pass is debited, not capped
        assert srv.paid_hits() == 20


def test_agent_killed_mid_validation_resumes_without_paying_twice(tmp_path: Path) -> None:
    import os
    import signal
    import sqlite3
    import subprocess
    import sys
    import time

    from reasearch.cli import main
    from reasearch.runs import Run, RunState, open_store

    path, answers = _data(tmp_path)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([r.to_dict() for r in (say("", call("validate_candidate", prompt=GOOD)),
                                                        say("", call("finish", reason="validated")))]))
    run_dir = tmp_path / "runs"

    def stored_ok() -> int:
        try:
            with sqlite3.connect(f"file:{run_dir / 'store.sqlite'}?mode=ro", uri=True, timeout=5) as conn:
                return int(conn.execute("SELECT COUNT(*) FROM student_calls WHERE status = 'OK'").fetchone()[0])
        except sqlite3.OperationalError:
            return 0

    with FakeStudentServer(answers, latency_s=0.15) as srv:
        repo = Path(__file__).resolve().parents[2]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
        params = [f"path={path}", "input_field=q", "answer_field=a", "n_train=10", "n_validation=30", "n_test=10",
                  "concurrency=2"]
        proc = subprocess.Popen([sys.executable, "-m", "reasearch.cli", "optimize", "prompt/jsonl-v1", "--model",
                                 f"scripted/{script}", "--student", "openai/fake", "--student-base-url", srv.url,
                                 "--student-calls", "100", "--run-dir", str(run_dir), "--quiet",
                                 *[x for p in params for x in ("-p", p)]],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while stored_ok() < 6 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
        stored = stored_ok()
        assert 6 <= stored < 30
        time.sleep(0.5)  # calls in flight at the kill reach the server (and die with the driver)
        lost_in_flight = srv.paid_hits() - stored
        (record,) = open_store(run_dir).list_runs()
        assert record.state is RunState.RUNNING
        assert main(["resume", record.id, "--run-dir", str(run_dir), "--quiet"]) == 0
        run = Run.open(open_store(run_dir), record.id)
        final = run.store.get_run(run.id).final_candidate
        assert run.state is RunState.FINISHED and final is not None and run.candidate_source(final) == GOOD
        (evaluation,) = run.evaluations()
        assert evaluation.result.status.value == "OK" and evaluation.result.metrics["calls_cached"] == stored
        # validation once, then the sealed test pass, and each call in flight at the kill charged once at its
        # reservation (the server may have answered it: issue 40 item 3)
        charged = [e for e in run.store.ledger(run.id) if e.note.startswith("charged at reservation")]
        assert len(charged) <= 2 and all(e.unit is Unit.STUDENT_CALLS and e.amount == 1.0 for e in charged)
        assert run.used()[Unit.STUDENT_CALLS] == 30 + 10 + len(charged)
        # Only calls lost in flight at the kill may be asked again (answered, never stored); a stored answer never is.
        assert sum(n - 1 for n in srv.hits.values()) <= lost_in_flight <= 2
        assert len(run.events(kind="test_result")) == 1


def test_the_sandboxed_shell_cannot_read_the_data(tmp_path: Path) -> None:
    """The agent's bash/python_exec (nsjail) see neither the data file nor the folders around it."""
    import tempfile

    from reasearch.agent import AgentConfig
    from tests.engine.conftest import needs_mode

    needs_mode("nsjail")
    path, answers = _data(tmp_path)
    run_dir = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="prompt-agent-"))
    run_dir.chmod(0o755)
    with FakeStudentServer(answers) as srv, _removed(run_dir):
        script = [say("", call("bash", command=f"cat {path}; ls {path.parent}")),
                  say("", call("python_exec", code=f"print(open({str(path)!r}).read())")),
                  say("", call("validate_candidate")), say("", call("finish", reason="the seed prompt"))]
        agent = start_run("prompt/jsonl-v1", budget={"student_calls": 10}, run_dir=run_dir,
                          config=AgentConfig(sandbox_mode="nsjail"), models={"agent": ScriptedModel(script)},
                          task_params=dict(path=str(path), input_field="q", answer_field="a", student="openai/fake",
                                           base_url=srv.url, n_train=10, n_validation=10))
        agent.optimize()
        results = agent.run.events(kind="tool_result")
        assert [e.payload["name"] for e in results] == ["bash", "python_exec", "validate_candidate", "finish"]
        blob = json.dumps([e.payload for e in results])
        assert "No such file or directory" in blob
        assert not any(a in blob for a in answers.values())
