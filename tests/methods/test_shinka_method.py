"""ShinkaEvolve's own loop as a `reasearch compare` method, against the real package (shinka-evolve 0.0.7).

ShinkaEvolve pins httpx and pillow against ours, so it runs in the Python of ``REASEARCH_SHINKA_PYTHON``
(``.ci/adapters.sh`` builds that venv and ``.ci/run`` exports it). The run's model is an OpenAI-compatible
scripted server behind the run's metering proxy: it proposes, in turn, a program that sleeps forever, one
that prints a fake score, and a valid variant (each reply holds both a SEARCH/REPLACE edit and the whole
program, so any of ShinkaEvolve's patch types applies it).
"""

from __future__ import annotations

import ast
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import reasearch
from reasearch.methods._driver import REPLY_EVENT
from reasearch.methods.shinka_loop import _EVALUATE, PYTHON_ENV, marked, shinka_python
from reasearch.models.messages import ModelReply
from reasearch.models.testing import FakeOpenAIServer, say
from reasearch.runs import Run, Unit, open_store

IN_CI = os.environ.get("CI", "").lower() == "true"
TASK = "circle_packing/n26-v1"
LIMIT_S = 3.0
SEED_LINE = "    radius = 0.5 * step * (1.0 - 1e-9)"
EDITS = [
    SEED_LINE + "\n    import time\n    while True:\n        time.sleep(1)",
    SEED_LINE + "\n    print('{\"combined_score\": 99.0, \"correct\": true}')\n    return [], []",
    "    radius = 0.45 * step",
]


def _need_shinka() -> str:
    from reasearch.errors import ConfigError

    try:
        return shinka_python()
    except ConfigError as exc:
        if IN_CI:
            pytest.fail(f"CI=true but no Python with shinka ({PYTHON_ENV}; .ci/run exports it): {exc}")
        pytest.skip(f"no Python with shinka-evolve: {exc}")


def _reply(n: int) -> str:
    seed = marked(reasearch.make(TASK).seed_program())
    edit = EDITS[n % len(EDITS)]
    whole = seed.replace(SEED_LINE, edit)
    return (f"<NAME>\nedit_{n}\n</NAME>\n<DESCRIPTION>\nscripted edit {n}\n</DESCRIPTION>\n<DIFF>\n"
            f"<<<<<<< SEARCH\n{SEED_LINE}\n=======\n{edit}\n>>>>>>> REPLACE\n</DIFF>\n\n"
            f"<CODE>\n```python\n{whole}```\n</CODE>\n")


@pytest.fixture()
def scripted() -> Iterator[tuple[str, list[str]]]:
    """An OpenAI-compatible server answering the scripted proposals; yields its URL and the replies it sent."""
    sent: list[str] = []

    def answer(body: dict[str, Any]) -> ModelReply:  # called under the server's lock
        text = _reply(len(sent))
        sent.append(text)
        return say(text)

    with FakeOpenAIServer(answer) as server:
        yield server.url, sent


def test_compare_runs_shinkaevolve_on_the_runs_budget_sandbox_and_ledger(
        tmp_path: Path, scripted: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    _need_shinka()
    from reasearch.cli import main

    url, sent = scripted
    store_dir = tmp_path / "runs"
    rc = main(["compare", TASK, "--methods", "shinka", "--budget", "6", "--model", "openai/scripted", "--base-url", url,
               "-p", f"time_limit_s={LIMIT_S}", "--quiet", "--store", str(store_dir), "--run-dir", str(store_dir),
               "--json", str(tmp_path / "c.json"), "-o", str(tmp_path / "c.html")])
    assert rc == 0, capsys.readouterr().err[-2000:]
    (data,) = json.loads((tmp_path / "c.json").read_text())["runs"]
    assert data["method"] == "shinka" and data["state"] == "finished" and data["caps"] == {"evaluations": 6.0}
    store = open_store(str(store_dir))
    run_id = data["run_id"]
    run = Run.open(store, run_id)
    task = reasearch.make(TASK, time_limit_s=LIMIT_S)
    evaluations = store.evaluations(run_id)
    # generation 0 (the seed) and five proposals: ShinkaEvolve's generation count is the budget, not one more
    assert len(evaluations) == 6 and store.usage(run_id)[Unit.EVALUATIONS] <= 6
    statuses: list[str] = []
    for ev in evaluations:
        source = run.candidate_source(ev.candidate_id)
        statuses.append(ev.result.status.value)
        if ev.result.status.value == "TIMEOUT":  # the sleeper: killed at the task's limit, no score
            assert "while True" in source and ev.result.score is None
            assert LIMIT_S <= ev.result.wall_s < LIMIT_S + 10
            continue
        expected = task.evaluate(source, seed=0)  # `reasearch eval` of the same program
        assert (ev.result.status, ev.result.score) == (expected.status, expected.score)
        if "99.0" in source:  # the fake score: printed, never read
            assert ev.result.status.value == "INVALID" and ev.result.score is None
    # the seed first; the sleeper, the fake and the valid variant each reached the sandbox; the run went on
    assert statuses[0] == "OK" and "TIMEOUT" in statuses and "INVALID" in statuses
    assert statuses.index("TIMEOUT") < len(statuses) - 1
    ok_scores = [ev.result.score for ev in evaluations if ev.result.ok]
    assert len(ok_scores) >= 2 and data["best_score"] == max(ok_scores)
    # ShinkaEvolve's model calls: each one the scripted server answered is journaled and charged once
    replies = store.events(run_id, kind=REPLY_EVENT)
    assert len(replies) == len(sent) == store.usage(run_id)[Unit.MODEL_CALLS] == 5
    for event, text in zip(replies, sent, strict=True):
        assert ModelReply.from_dict(event.payload["reply"]).text == text
    assert all(e.note.startswith("shinka:") for e in store.ledger(run_id) if e.unit is Unit.MODEL_CALLS)


def test_no_python_with_shinka_is_one_line_before_any_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from reasearch.cli import main

    store_dir = tmp_path / "runs"
    args = ["compare", TASK, "--methods", "agent,shinka", "--budget", "2", "--model", "demo", "--quiet",
            "--store", str(store_dir), "--run-dir", str(store_dir), "-o", str(tmp_path / "c.html")]
    monkeypatch.delenv(PYTHON_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "shinka", None)  # find_spec: None, as when this Python lacks it
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "shinka-evolve" in err[0] and f"export {PYTHON_ENV}=" in err[0]
    monkeypatch.setenv(PYTHON_ENV, sys.executable)  # a Python that runs but has no shinka
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not import shinka" in err[0] and "pip install 'shinka-evolve" in err[0]
    monkeypatch.setenv(PYTHON_ENV, str(tmp_path / "no-such-python"))
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not an executable Python" in err[0]
    assert not store_dir.exists() and not (tmp_path / "c.html").exists()  # nothing was created


def test_the_evaluate_script_shinka_runs_needs_only_the_standard_library() -> None:
    tree = ast.parse(_EVALUATE.format(url="http://127.0.0.1:1/reasearch/evaluate", token_env="T"))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported and imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)


@pytest.mark.timeout(60)  # without the stop, the fake loop asks forever
def test_a_refused_model_call_stops_the_loop(tmp_path: Path) -> None:
    """ShinkaEvolve's client retries a refused call for minutes: the proxy's first refusal stops its process."""
    from reasearch.methods._driver import MethodDriver
    from reasearch.methods._proxy import MeteringProxy
    from reasearch.methods.shinka_loop import _run, _Stopper
    from reasearch.models.demo import DemoModel

    run = Run.create(open_store(str(tmp_path / "store.sqlite")), task_id=TASK, budget={"evaluations": 3,
                                                                                        "model_calls": 1})
    stop = _Stopper(grace_s=0.5)
    proxy = MeteringProxy(MethodDriver(run, DemoModel(), method="shinka"), note="shinka", on_refused=stop.refuse)
    fake = tmp_path / "python"  # a "Python" whose loop keeps asking the model, as ShinkaEvolve's backoff does
    fake.write_text(f"""#!{sys.executable}
import json, os, time, urllib.error, urllib.request
body = json.dumps({{"messages": [{{"role": "user", "content": "x = 1.5"}}]}}).encode()
while True:
    request = urllib.request.Request({proxy.url + "/chat/completions"!r}, data=body, headers={{
        "Authorization": "Bearer " + os.environ["REASEARCH_PROXY_TOKEN"], "Content-Type": "application/json"}})
    try:
        urllib.request.urlopen(request, timeout=60).read()
    except urllib.error.HTTPError:
        pass
    time.sleep(0.05)
""")
    fake.chmod(0o755)
    procs: list[Any] = []
    try:
        proxy.serve(lambda: _run(str(fake), tmp_path, proxy.token, stop, procs))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert stop.refused.is_set() and proxy.calls == 1 and proxy.refused >= 1
    assert procs[0].returncode is not None  # killed, not left running
    assert run.used()[Unit.MODEL_CALLS] == 1 == len(run.events(kind=REPLY_EVENT))
    run.close()


def test_the_stop_waits_for_the_evaluation_still_to_come() -> None:
    """After a refusal ShinkaEvolve may still post the last paid proposal: the stop waits for a quiet endpoint."""
    from reasearch.methods.shinka_loop import _Stopper

    stop = _Stopper(grace_s=5.0)
    assert not stop.due()  # nothing refused
    stop.begin()
    stop.refuse()
    assert not stop.due()  # an evaluation is in flight
    stop.end()
    assert not stop.due()  # it has just ended: the grace starts again
    stop.last -= 5.0  # the clock, moved on by hand
    assert stop.due()
