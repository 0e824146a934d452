"""A steered run's report: each intervention is marked on the score-against-evaluations curve and in the
transcript, and the Interventions section states the best score before it, the best within the next
evaluations and the unsteered twin's figures, all computed from the store (hostile text stays text)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from report_runs import save_shot

from reasearch.cli import main
from reasearch.engine.testing import StaticRunner
from reasearch.evaluators.testing import ToyTask
from reasearch.reports import load_run, report_payload, write_report
from reasearch.reports._model import STEER_WINDOW
from reasearch.runs import LocalExecutor, Run, open_store
from reasearch.runs.journal import Journal
from reasearch.runs.steering import Steering, fork, submit
from reasearch.runs.store import Store

HOSTILE = "<script>document.title='pwned'</script><img src=x onerror=alert(1)> go bigger"


def _src(v: float) -> str:
    return f"def run():\n    return [{float(v)!r}, {float(v)!r}]\n"


def _steered(tmp_path: Path) -> tuple[Store, str, str]:
    """A run forked with a twin: both evaluate four candidates; the fork gets a hint (and a ban) after two."""
    store = open_store(tmp_path / "runs")
    ex = LocalExecutor(1, pool=StaticRunner())
    src = Run.create(store, task=ToyTask(dim=2), budget={"evaluations": 3}, config={"driver": "agent"}, executor=ex)
    src.evaluate(_src(0.5), step=1)
    start = store.candidates(src.id)[0].id
    src.finish()
    new = fork(store, src.id, start, {"evaluations": 6}, twin=True)
    twin = f"{new}-twin"
    for rid, values in ((new, [0.5, 1.0, 2.0, 1.5]), (twin, [0.5, 1.0, 1.2, 1.1])):
        run = Run(store, store.get_run(rid), executor=ex)
        steering = Steering(run, Journal(run))
        for step, v in enumerate(values, start=1):
            if step == 3 and rid == new:
                submit(store, rid, "hint", {"text": HOSTILE}, who="alice <b>")
                submit(store, rid, "ban", {"text": "no zeros"}, who="alice")
                steering.at(step)
            run.evaluate(_src(v), step=step)
        run.close()
    return store, new, twin


def _best(scores: list[float]) -> float:
    return max(scores)


def test_the_report_marks_each_intervention_and_states_what_followed(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    store, new, twin = _steered(tmp_path)
    view = load_run(store, new)
    scores = [float(ev.result.score) for ev in store.evaluations(new) if ev.result.score is not None]
    twin_scores = [float(ev.result.score) for ev in store.evaluations(twin) if ev.result.score is not None]
    hint, ban = view.interventions
    assert (hint.intervention.verb, ban.intervention.verb) == ("hint", "ban")
    assert hint.evaluations_before == 2 and hint.score_before == _best(scores[:2])
    assert hint.best_after == _best(scores[2:2 + STEER_WINDOW]) and hint.evaluations_after == 2
    assert (hint.twin_run, hint.twin_before, hint.twin_after) == (twin, _best(twin_scores[:2]), _best(twin_scores[2:]))
    payload = report_payload(view)
    fig = payload["figures"]["fig-evals"]
    marks = [t for t in fig["data"] if t.get("meta", {}).get("kind") == "interventions"]
    assert len(marks) == 1 and marks[0]["x"] == [2.5]  # both were applied between evaluations 2 and 3
    assert [s["x0"] for s in fig["layout"]["shapes"]] == [2.5]
    assert any(a["text"] == "#1 hint, #2 ban" for a in fig["layout"]["annotations"])
    section = payload["sections"]["steering"]
    assert "<script>" not in section and "&lt;script&gt;" in section and "alice &lt;b&gt;" in section
    assert f"{_best(twin_scores[2:]):.10g}"[:6] in section and new + "-twin" in section
    transcript = payload["sections"]["transcript"]
    assert "a person steered at step 3" in transcript and "<img" not in transcript
    # `reasearch steer RUN list` prints the same numbers
    assert main(["steer", new, "list", "--run-dir", str(tmp_path / "runs"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["effect"]["score_before"] == hint.score_before and rows[0]["effect"]["twin_after"] == hint.twin_after
    # and `reasearch show` states them too
    assert main(["show", new, "--run-dir", str(tmp_path / "runs")]) == 0
    shown = capsys.readouterr().out
    assert "interventions: 2" in shown and f"unsteered twin {twin}" in shown and "best of the next 2" in shown


def test_the_marks_show_in_a_real_browser(tmp_path: Path, browser: Any, screenshots: Path) -> None:
    store, new, _ = _steered(tmp_path)
    path = write_report(store, new, tmp_path / "steered.html")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route("http*://**/*", lambda route: route.abort())
    try:
        page.goto(path.as_uri())
        page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        assert errors == [] and page.title() != "pwned"
        assert page.locator("#fig-evals .shapelayer path").count() >= 1  # the dashed line
        assert page.locator("#fig-evals .annotation-text", has_text="#1 hint, #2 ban").count() == 1
        assert page.locator("#sec-steering tr.steer").count() == 2
        assert page.locator("#sec-steering img").count() == 0
        save_shot(screenshots, "report-interventions.png",
                  lambda p: page.locator("section#curves").screenshot(path=str(p)))
        save_shot(screenshots, "report-interventions-table.png",
                  lambda p: page.locator("section#steering").screenshot(path=str(p)))
    finally:
        page.close()
