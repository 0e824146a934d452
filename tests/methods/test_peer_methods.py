"""The published packages as methods: OpenEvolve's and GEPA's own loops on a run, metered by the run.

OpenEvolve (0.4.0) runs in its own process; its model is the run's metering proxy and its evaluator posts
each program to the run, so its evaluations are the run's (sandbox, budget, store) and its model calls are
in the run's ledger. GEPA (0.1.4) runs on a gsm8k/v1 run with the fake student; its reflection model is
the run's. Both fast and offline (``--model demo``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import reasearch
from reasearch.methods import start_method
from reasearch.methods._driver import REPLY_EVENT, MethodDriver
from reasearch.methods._proxy import MeteringProxy
from reasearch.models import ModelSpec
from reasearch.models.demo import DemoModel
from reasearch.runs import Run, Unit, open_store

IN_CI = os.environ.get("CI", "").lower() == "true"
TASK = "circle_packing/n26-v1"
DEMO = ModelSpec.parse("demo")


def _need(package: str) -> None:
    if importlib.util.find_spec(package) is None:
        if IN_CI:
            pytest.fail(f"CI=true but {package} is not installed (it is in the test extra)")
        pytest.skip(f"{package} not installed (pip install 'reasearch[{package}]')")


def _scores_match_eval(store: Any, run_id: str) -> list[float]:
    """Every evaluation the run stored has the score `reasearch eval` gives its source; returns the OK scores."""
    run = Run.open(store, run_id)
    task = reasearch.make(TASK)
    scores = []
    for ev in store.evaluations(run_id):
        if ev.result.status.value == "REFUSED":
            continue
        expected = task.evaluate(run.candidate_source(ev.candidate_id), seed=0)
        assert (ev.result.status, ev.result.score) == (expected.status, expected.score)
        if expected.ok:
            scores.append(float(expected.score))
    return scores


def test_compare_runs_openevolve_beside_the_agent_on_the_same_budget(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    _need("openevolve")
    from reasearch.cli import main

    store_dir = tmp_path / "runs"
    rc = main(["compare", TASK, "--methods", "agent,openevolve", "--seeds", "0", "--budget", "6", "--model", "demo",
               "--quiet", "--store", str(store_dir), "--run-dir", str(store_dir), "--json", str(tmp_path / "c.json"),
               "-o", str(tmp_path / "c.html")])
    assert rc == 0, capsys.readouterr().err[-2000:]
    data = json.loads((tmp_path / "c.json").read_text())
    runs = {r["method"]: r for r in data["runs"]}
    assert set(runs) == {"agent", "openevolve"} and all(r["state"] == "finished" for r in runs.values())
    assert runs["agent"]["caps"] == runs["openevolve"]["caps"] == {"evaluations": 6.0}
    assert data["tasks"][0]["ranked"]
    oe = runs["openevolve"]
    assert 1 <= oe["used"]["evaluations"] <= 6
    store = open_store(str(store_dir))
    scores = _scores_match_eval(store, oe["run_id"])
    assert scores and oe["best_score"] == max(scores)
    replies = store.events(oe["run_id"], kind=REPLY_EVENT)  # OpenEvolve's model calls, journaled and charged
    assert replies and oe["used"]["model_calls"] == len(replies)
    assert all(e.note.startswith("openevolve:") for e in store.ledger(oe["run_id"]) if e.unit is Unit.MODEL_CALLS)


def test_openevolve_spends_the_run_budget_exactly_and_stops(tmp_path: Path) -> None:
    _need("openevolve")
    store = open_store(str(tmp_path / "runs"))
    runner = start_method("openevolve", TASK, budget={"evaluations": 4}, store=store, model_spec=DEMO,
                          config={"diff_based_evolution": False})  # whole programs: the demo model's reply form
    result = runner.optimize()
    used = store.usage(result.run_id)
    assert used[Unit.EVALUATIONS] == 4  # the initial program and three children, not one more
    scores = _scores_match_eval(store, result.run_id)  # failures too: the same status as `reasearch eval`
    assert scores and result.final_score == max(scores)
    assert used[Unit.MODEL_CALLS] == len(store.events(result.run_id, kind=REPLY_EVENT)) >= 3


def test_openevolve_with_four_workers_spends_the_budget_exactly(tmp_path: Path) -> None:
    """OpenEvolve's 4 worker processes call the proxy at once: the budget still holds to the unit, and each
    model call is paid and journaled once, at a step of its own. (Not every iteration evaluates: OpenEvolve
    skips a rewrite identical to its parent, which the demo model sometimes returns.)"""
    _need("openevolve")
    store = open_store(str(tmp_path / "runs"))
    runner = start_method("openevolve", TASK, budget={"evaluations": 9}, store=store, model_spec=DEMO,
                          config={"diff_based_evolution": False, "parallel_evaluations": 4})
    result = runner.optimize()
    used = store.usage(result.run_id)
    paid = [e for e in store.evaluations(result.run_id) if e.result.status.value != "REFUSED" and not e.result.cached]
    assert 2 <= used[Unit.EVALUATIONS] == len(paid) <= 9  # the initial program and children, never more
    scores = _scores_match_eval(store, result.run_id)
    assert scores and result.final_score == max(scores)
    replies = store.events(result.run_id, kind=REPLY_EVENT)
    assert used[Unit.MODEL_CALLS] == len(replies) == len({e.step for e in replies}) >= 8  # one step each


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "4", 1000])
def test_openevolve_parallel_evaluations_must_be_a_sane_count(bad: Any) -> None:
    _need("openevolve")
    from reasearch.errors import ConfigError
    from reasearch.methods.peers import OpenEvolveConfig

    with pytest.raises(ConfigError, match="parallel_evaluations is a whole number"):
        OpenEvolveConfig(parallel_evaluations=bad)


@pytest.fixture()
def driver(tmp_path: Path) -> Iterator[MethodDriver]:
    run = Run.create(open_store(str(tmp_path / "store.sqlite")), task_id=TASK,
                     budget={"evaluations": 3, "model_calls": 1})
    yield MethodDriver(run, DemoModel(), method="openevolve")
    run.close()


def _post(url: str, body: dict[str, Any], token: str | None) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, json.dumps(body).encode(), headers), timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_proxy_meters_each_call_refuses_past_the_cap_and_wants_its_token(driver: MethodDriver) -> None:
    proxy = MeteringProxy(driver, note="openevolve")
    chat = {"messages": [{"role": "system", "content": "Improve it."},
                         {"role": "user", "content": "```python\nx = 1.5\n```"}]}
    url = proxy.url + "/chat/completions"

    def peer() -> list[tuple[int, dict[str, Any]]]:
        return [_post(url, chat, None), _post(url, chat, "wrong-token"), _post(url, chat, proxy.token),
                _post(url, chat, proxy.token)]

    (no_token, wrong, first, second) = proxy.serve(peer)
    assert no_token[0] == wrong[0] == 401
    assert first[0] == 200 and "```python" in first[1]["choices"][0]["message"]["content"]
    assert second[0] == 400 and second[1]["error"]["type"] == "budget_exhausted"  # the model-call cap is 1
    run = driver.run
    assert run.used()[Unit.MODEL_CALLS] == 1 and len(run.events(kind=REPLY_EVENT)) == 1
    recorded = run.events(kind=REPLY_EVENT)[0].payload["reply"]
    assert "x = " in json.dumps(recorded)  # journaled: the reply the peer got is the one stored
    assert first[1]["usage"]["total_tokens"] == run.used()[Unit.TOKENS] > 0  # the peer sees what was charged


# ---------------------------------------------------------------- gepa
@pytest.fixture(scope="module")
def gsm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from reasearch.evaluators.prompt.testing import write_synthetic_gsm8k

    return write_synthetic_gsm8k(tmp_path_factory.mktemp("gsm8k"), n_train=60, n_test=20)


def test_gepa_method_runs_gepa_on_the_runs_ledger(tmp_path: Path, gsm: Path) -> None:
    _need("gepa")
    from reasearch.evaluators.prompt.testing import FakeStudentServer, gsm8k_answer_key

    with FakeStudentServer(gsm8k_answer_key(gsm)) as server:
        params = {"student": "openai/fake", "base_url": server.url, "data_dir": str(gsm), "n_train": 12,
                  "n_validation": 12, "backoff_s": 0.01}
        store = open_store(str(tmp_path / "runs"))
        runner = start_method("gepa", "gsm8k/v1", budget={"student_calls": 40}, store=store, model_spec=DEMO,
                              task_params=params)
        result = runner.optimize()
        run_id = result.run_id
        ledger = store.ledger(run_id)
        optimizer = sum(e.amount for e in ledger if e.unit is Unit.STUDENT_CALLS and not e.note.startswith("test:"))
        paid = sum(e.amount for e in ledger if e.unit is Unit.STUDENT_CALLS and not e.note.startswith("shared:"))
        assert 0 < optimizer <= 40 and paid == server.paid_hits()  # each call made is charged once; repeats free
        replies = store.events(run_id, kind=REPLY_EVENT)  # GEPA's reflection calls, on the run's model and ledger
        assert replies and store.usage(run_id)[Unit.MODEL_CALLS] == len(replies)
        assert store.get_run(run_id).state.value == "finished" and result.final_candidate is not None
        final = Run.open(store, run_id).candidate_source(result.final_candidate)
        assert result.final_score == pytest.approx(reasearch.make("gsm8k/v1", **params).evaluate(final).score)


def test_a_missing_package_is_one_install_line_before_any_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from reasearch.cli import main

    monkeypatch.setitem(sys.modules, "openevolve", None)  # find_spec: None, as when it is not installed
    store_dir = tmp_path / "runs"
    rc = main(["compare", TASK, "--methods", "agent,openevolve", "--budget", "2", "--model", "demo", "--quiet",
               "--store", str(store_dir), "--run-dir", str(store_dir), "-o", str(tmp_path / "c.html")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "pip install 'reasearch[openevolve]'" in err[0]
    assert not store_dir.exists() and not (tmp_path / "c.html").exists()  # nothing was created


def test_a_peer_on_the_wrong_kind_of_task_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _need("gepa")
    from reasearch.cli import main

    store_dir = tmp_path / "runs"
    assert (
        main(["compare", TASK, "--methods", "agent,gepa", "--model", "demo", "--quiet", "--store", str(store_dir)]) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gepa optimizes prompt tasks only" in err[0] and not store_dir.exists()


class _FailsOnce(DemoModel):
    """The demo model whose second call fails as an outage does (after the client's retries)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def complete(self, request: Any) -> Any:
        from reasearch.errors import ModelError

        self.calls += 1
        if self.calls == 2:
            raise ModelError("demo outage")
        return super().complete(request)


def test_an_interrupted_openevolve_run_resumes_without_paying_twice(tmp_path: Path) -> None:
    _need("openevolve")
    from reasearch.errors import ModelError
    from reasearch.methods import open_method

    store = open_store(str(tmp_path / "runs"))
    runner = start_method("openevolve", TASK, budget={"evaluations": 4}, store=store, model_spec=DEMO,
                          model=_FailsOnce(), config={"diff_based_evolution": False})
    with pytest.raises(ModelError):
        runner.optimize()
    run_id = runner.run.id
    assert store.get_run(run_id).state.value == "interrupted"
    before = len(store.events(run_id, kind=REPLY_EVENT))
    evaluated = store.usage(run_id)[Unit.EVALUATIONS]
    assert before == 1 and 1 <= evaluated < 4  # the seed and the first call's child; the second call failed
    result = open_method(run_id, store=store, model=DemoModel(), takeover=True).optimize()
    used = store.usage(run_id)
    assert store.get_run(run_id).state.value == "finished" and used[Unit.EVALUATIONS] == 4
    assert used[Unit.MODEL_CALLS] == len(store.events(run_id, kind=REPLY_EVENT)) > before  # each paid once
    assert result.final_score == max(_scores_match_eval(store, run_id))


def test_compare_runs_gepa_beside_the_agent_on_gsm8k(tmp_path: Path, gsm: Path) -> None:
    _need("gepa")
    from reasearch.cli import main
    from reasearch.evaluators.prompt.testing import FakeStudentServer, gsm8k_answer_key

    store_dir = tmp_path / "runs"
    with FakeStudentServer(gsm8k_answer_key(gsm)) as server:
        rc = main(["compare", "gsm8k/v1", "--methods", "agent,gepa", "--budget", "40", "--model", "demo", "--quiet",
                   "--store", str(store_dir), "--run-dir", str(store_dir), "--json", str(tmp_path / "c.json"),
                   "-o", str(tmp_path / "c.html"), "--student", "openai/fake", "--student-base-url", server.url,
                   "-p", f"data_dir={gsm}", "-p", "n_train=12", "-p", "n_validation=12"])
    assert rc == 0
    runs = {r["method"]: r for r in json.loads((tmp_path / "c.json").read_text())["runs"]}
    assert runs["agent"]["caps"] == runs["gepa"]["caps"] == {"student_calls": 40.0}
    gepa_run = runs["gepa"]
    assert gepa_run["state"] == "finished" and 0 < gepa_run["used"]["student_calls"] <= 40
    assert gepa_run["best_score"] is not None and gepa_run["test_score"] is not None  # final prompt, sealed test pass
    replies = open_store(str(store_dir)).events(gepa_run["run_id"], kind=REPLY_EVENT)
    assert replies and gepa_run["used"]["model_calls"] == len(replies)  # GEPA's reflection calls, metered


def test_openevolve_stops_when_the_model_budget_is_spent(tmp_path: Path) -> None:
    _need("openevolve")
    store = open_store(str(tmp_path / "runs"))
    runner = start_method("openevolve", TASK, budget={"evaluations": 6, "model_calls": 2}, store=store,
                          model_spec=DEMO, config={"diff_based_evolution": False})
    result = runner.optimize()
    used = store.usage(result.run_id)
    assert store.get_run(result.run_id).state.value == "finished"
    assert used[Unit.MODEL_CALLS] == 2 == len(store.events(result.run_id, kind=REPLY_EVENT))  # refused calls: not made
    evs = store.evaluations(result.run_id)  # the seed and the two proposals; the refused iterations proposed nothing
    assert len(evs) == 3 and used[Unit.EVALUATIONS] == sum(not ev.result.cached for ev in evs)  # a repeat is free
    assert "model_calls budget is spent" in result.reason


def test_a_peers_program_is_read_refused_or_evaluated_by_one_rule(tmp_path: Path) -> None:
    """The rule openevolve and shinka share for the program their evaluator hands back: a file that is not
    a readable program is INVALID and the budget is not even asked; a spent budget refuses it unevaluated;
    else the run evaluates it (one evaluation, its step recorded)."""
    from reasearch.engine.testing import StaticRunner
    from reasearch.evaluators.testing import ToyTask
    from reasearch.methods._peer_common import evaluate_program
    from reasearch.runs.testing import memory_run

    run = memory_run(ToyTask(dim=2), {"evaluations": 5}, runner=StaticRunner())
    driver = MethodDriver(run, DemoModel(), method="peer")
    asked: list[str] = []
    evaluated: list[int] = []

    def spent_when(reason: str | None) -> Any:
        def spent() -> str | None:
            asked.append("spent?")
            return reason
        return spent

    (tmp_path / "latin1.py").write_bytes(b"def run():\n    return [1.0, 2.0]  # \xe9\n")
    for path in (tmp_path / "missing.py", tmp_path / "latin1.py", tmp_path):
        result = evaluate_program(driver, str(path), note="peer", spent=spent_when(None), evaluated=evaluated)
        assert result.status.value == "INVALID"
    assert asked == [] and evaluated == [] and run.store.evaluations(run.id) == []
    good = tmp_path / "good.py"
    good.write_text("def run():\n    return [1.0, 2.0]\n")
    result = evaluate_program(driver, str(good), note="peer", spent=spent_when("the evaluations budget is spent"),
                              evaluated=evaluated)
    assert result.status.value == "REFUSED" and result.feedback == "not evaluated: the evaluations budget is spent"
    assert asked == ["spent?"] and evaluated == [] and run.store.evaluations(run.id) == []
    result = evaluate_program(driver, str(good), note="peer", spent=spent_when(None), evaluated=evaluated)
    assert result.ok and evaluated == [driver.step] and len(run.store.evaluations(run.id)) == 1


def test_openevolve_with_its_default_diffs_spends_the_whole_budget(tmp_path: Path) -> None:
    """Issue 39 item 1: OpenEvolve's default (diff-based) loop spent 1 of 6 evaluations with the demo model (its
    replies held no usable diff and max_iterations was budget - 1); now the demo answers a diff prompt with
    SEARCH/REPLACE edits and an iteration that spends nothing does not use up the budget's iterations."""
    _need("openevolve")
    store = open_store(str(tmp_path / "runs"))
    runner = start_method("openevolve", TASK, budget={"evaluations": 6}, store=store, model_spec=DEMO, seed=1)
    result = runner.optimize()
    assert store.usage(result.run_id)[Unit.EVALUATIONS] == 6, result.reason
    assert result.reason == "the evaluations budget is spent"
    scores = _scores_match_eval(store, result.run_id)
    assert len(scores) >= 4 and result.final_score == max(scores)  # the demo's edits mostly stay valid


class _EveryOtherReplyUseless:
    """The demo model, but every other reply holds no usable edit (an iteration that spends nothing)."""

    name = "demo"

    def __init__(self) -> None:
        self.demo, self.calls = DemoModel(seed=1), 0

    def complete(self, request: Any) -> Any:
        from reasearch.models.messages import ModelReply, StopReason, Usage

        self.calls += 1
        if self.calls % 2 == 0:
            return ModelReply(({"type": "text", "text": "No change comes to mind."},), StopReason.END_TURN,
                              Usage(input_tokens=10, output_tokens=5), 0.0, "demo")
        return self.demo.complete(request)


def test_openevolve_iterations_that_spend_nothing_do_not_eat_the_budget(tmp_path: Path) -> None:
    """Issue 39 item 1: with max_iterations = budget - 1, replies with no usable diff left the run under its cap
    (here: 3 of 6); now the loop goes on until the budget is spent (or its stall allowance is used up)."""
    _need("openevolve")
    store = open_store(str(tmp_path / "runs"))
    runner = start_method("openevolve", TASK, budget={"evaluations": 6}, store=store, model_spec=DEMO, seed=1,
                          model=_EveryOtherReplyUseless())
    result = runner.optimize()
    assert store.usage(result.run_id)[Unit.EVALUATIONS] == 6, result.reason
    assert result.reason == "the evaluations budget is spent"


class _Reflector:
    """A reflection model whose every proposal is new and better instructed (so GEPA accepts and validates some)."""

    name = "reflector"

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, request: Any) -> Any:
        from reasearch.models.messages import ModelReply, StopReason, Usage

        self.calls += 1
        text = ("```\nThink step by step. Double-check your arithmetic before you answer. End your reply with a "
                f"line '#### <answer>' holding only the final answer. (variant {self.calls})\n```")
        return ModelReply(({"type": "text", "text": text},), StopReason.END_TURN,
                          Usage(input_tokens=10, output_tokens=30), 0.0, self.name)


def test_gepa_s_intermediate_validations_are_run_evaluations_on_the_curve(tmp_path: Path, gsm: Path) -> None:
    """Issue 39 item 2: GEPA's curve was one point (only its final candidate became a run evaluation); every full
    validation it makes is now a run evaluation at the spend it happened, and costs nothing more."""
    _need("gepa")
    from reasearch.evaluators.prompt.testing import FakeStudentServer, gsm8k_answer_key
    from reasearch.fleets.compare import _run_data
    from reasearch.fleets.fleet import FleetMember

    with FakeStudentServer(gsm8k_answer_key(gsm)) as server:
        params = {"student": "openai/fake", "base_url": server.url, "data_dir": str(gsm), "n_train": 12,
                  "n_validation": 6, "backoff_s": 0.01}
        store = open_store(str(tmp_path / "runs"))
        runner = start_method("gepa", "gsm8k/v1", budget={"student_calls": 120}, store=store, model_spec=DEMO,
                              task_params=params, model=_Reflector())
        result = runner.optimize()
        paid = sum(e.amount for e in store.ledger(result.run_id)
                   if e.unit is Unit.STUDENT_CALLS and not e.note.startswith("shared:"))
        assert paid == server.paid_hits()  # the run's validations repeated GEPA's calls: nothing paid twice
    data = _run_data(store, FleetMember(0, "gsm8k/v1", 0, "demo", method="gepa"), result.run_id)
    evs = store.evaluations(result.run_id)  # the seed's validation, at least one proposal's, and GEPA's best
    assert len(evs) >= 3 and len({ev.candidate_id for ev in evs}) >= 2
    spends = [p["spent"] for p in data["points"]]
    assert spends[0] < spends[-1] and spends == sorted(spends)  # points along the spend, not one at the end
    assert spends[0] == 6  # the seed's validation: one call per validation example, where it happened


def test_the_demo_answers_gepa_s_reflection_with_an_edit_of_its_current_instructions(tmp_path: Path,
                                                                                      gsm: Path) -> None:
    """Issue 39 item 3: GEPA's reflection prompt holds its instructions in an untagged fence, so the demo answered
    every reflection with the same fixed instruction (repeats, free: GEPA stalled with validation 0.0 after 50 of
    120 calls). Now it edits the current instructions, as it edits the agent's prompt, and GEPA improves."""
    _need("gepa")
    from reasearch.evaluators.prompt.testing import FakeStudentServer, gsm8k_answer_key

    with FakeStudentServer(gsm8k_answer_key(gsm)) as server:
        params = {"student": "openai/fake", "base_url": server.url, "data_dir": str(gsm), "n_train": 12,
                  "n_validation": 6, "backoff_s": 0.01}
        store = open_store(str(tmp_path / "runs"))
        result = start_method("gepa", "gsm8k/v1", budget={"student_calls": 120}, store=store, model_spec=DEMO,
                              task_params=params).optimize()
    scores = [ev.result.score for ev in store.evaluations(result.run_id)]
    assert scores[0] is not None and result.final_score is not None
    assert result.final_score > scores[0], scores  # a better prompt than the seed, found by GEPA with the demo
