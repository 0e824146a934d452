"""The dashboard as a workbench (read only): the index grouped by task, fleet and method with normalized scores,
sparklines, spend and validated filters; the run page's running experiments, lessons file and steering slot; the
fleet page (the comparison `reasearch compare` writes). Hostile strings (a task id, lessons, an experiment's
description, a method name) reach every page as text, and in a real browser nothing of theirs runs."""

from __future__ import annotations

import html
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from report_runs import save_shot
from starlette.testclient import TestClient
from test_serve import TOKEN, LiveServer

from reasearch.evaluators.testing import ToyTask, toy_candidate
from reasearch.fleets.compare import compare_spec, run_compare
from reasearch.reports import load_run
from reasearch.reports.serve import create_app
from reasearch.reports.workbench import MAX_FILTER_CHARS, IndexQuery, parse_query, run_extra_sections
from reasearch.runs import Run, open_store
from reasearch.runs.executor import LocalExecutor
from reasearch.runs.store import RunRecord, RunState

FLEET = "wb-fleet"
HOSTILE = '</pre></script><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
HOSTILE_TASK = "evil<script>window.__pwned = 3</script>/v1"
HOSTILE_RUN = "hostile-run-1"


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory, executor: LocalExecutor) -> Iterator[tuple[Path, dict[str, Any]]]:
    """A store with a two-method comparison fleet (demo model), a toy run outside any fleet, and a run whose
    task id, method, lessons and running experiment were written by an attacker."""
    d = tmp_path_factory.mktemp("workbench")
    spec = compare_spec(["circle_packing/n26-v1"], ["agent", "evolve"], seeds=[0], budget=3, model="demo",
                        parallelism=1)
    report = run_compare(spec, store=str(d), run_dir=str(d), fleet_id=FLEET)
    with open_store(d) as store:
        toy = Run.create(store, task=ToyTask(dim=3), budget={"evaluations": 20}, executor=executor)
        toy.evaluate(toy_candidate([0, 0, 0]), step=0, note="zeros")
        toy.evaluate(toy_candidate([9, 9, 9]), step=1, note="worse")  # not a new best: the sparkline stays flat
        toy.evaluate(toy_candidate([1, 1, 1]), step=2, note="ones")
        now = time.time()
        store.create_run(RunRecord(id=HOSTILE_RUN, task_id=HOSTILE_TASK, task_params={}, seed=0,
                                   config={"driver": "method", "method": HOSTILE}, budget={"evaluations": 5},
                                   state=RunState.RUNNING, created_at=now, updated_at=now))
        store.log_event(HOSTILE_RUN, 0, "start", {"lessons_text": "# Lessons\n" + HOSTILE})
        store.log_event(HOSTILE_RUN, 1, "experiment_start", {"description": HOSTILE, "time_budget_s": 60})
        store.log_event(HOSTILE_RUN, 2, "experiment_start", {"description": "an ended one", "time_budget_s": 60})
        store.log_event(HOSTILE_RUN, 2, "experiment", {"description": "an ended one", "status": "OK"})
        members = {m.member.method: m for m in report.members}
        yield d, {"toy": toy.id, "agent": members["agent"].run_id, "evolve": members["evolve"].run_id,
                  "normalized": {k: m.normalized for k, m in members.items()}}


def _client(d: Path, store: Any) -> TestClient:
    return TestClient(create_app(store), base_url="http://127.0.0.1")


def _groups(page: str) -> list[str]:
    return re.findall(r"<section class='group' data-group='\w+' data-key='([^']*)'>", page)


def _rows(page: str) -> set[str]:
    return set(re.findall(r"<tr class='run' data-run-id='([^']*)'>", page))


def test_index_groups_runs_by_task_fleet_and_method(bench: tuple[Path, dict[str, Any]]) -> None:
    d, ids = bench
    with open_store(d) as store:
        client = _client(d, store)
        by_task = client.get("/").text
        tasks = sorted(["circle_packing/n26-v1", store.get_run(ids["toy"]).task_id, HOSTILE_TASK])
        assert _groups(by_task) == [html.escape(t) for t in tasks]
        assert _rows(by_task) == {ids["toy"], ids["agent"], ids["evolve"], HOSTILE_RUN}
        by_fleet = client.get("/?group=fleet").text
        assert _groups(by_fleet) == ["(no fleet)", FLEET]
        assert f"href='fleet/{FLEET}'" in by_fleet  # the fleet's comparison page is one click away
        by_method = client.get("/?group=method").text
        assert "agent" in _groups(by_method) and "evolve" in _groups(by_method)
        data = {r["id"]: r for r in client.get("/runs.json?group=method").json()["runs"]}
        assert data[ids["evolve"]]["fleet"] == FLEET and data[ids["evolve"]]["method"] == "evolve"
        assert data[ids["toy"]]["fleet"] == "" and data[ids["toy"]]["method"] == "agent"
        # Normalized by the task's best known, as the fleet's own table normalizes its members.
        for method in ("agent", "evolve"):
            assert data[ids[method]]["normalized"] == pytest.approx(ids["normalized"][method])
            row = by_task[by_task.index(f"data-run-id='{ids[method]}'"):]
            assert f"<td class='normalized'>{ids['normalized'][method]:.4f}</td>" in row[:row.index("</tr>")]


def test_each_scored_run_has_a_sparkline_of_its_best_so_far(bench: tuple[Path, dict[str, Any]]) -> None:
    d, ids = bench
    with open_store(d) as store:
        page = _client(d, store).get("/").text
        toy_evals = store.evaluations(ids["toy"])
    row = page[page.index(f"data-run-id='{ids['toy']}'"):]
    row = row[:row.index("</tr>")]
    svg = re.search(r"<svg class='sparkline' data-points='(\d+)'.*?points='([^']*)'", row)
    assert svg is not None and int(svg.group(1)) == len(toy_evals) == 3
    ys = [float(p.split(",")[1]) for p in svg.group(2).split()]
    best = [max(e.result.score for e in toy_evals[:k + 1]) for k in range(3)]  # ToyTask maximizes
    assert best[0] == best[1] < best[2] and ys[0] == ys[1] > ys[2]  # flat, then up (SVG y grows downwards)
    hostile = page[page.index(f"data-run-id='{HOSTILE_RUN}'"):]
    assert "no score yet" in hostile[:hostile.index("</tr>")]


def test_filters_select_runs_and_bad_filters_are_one_line_400s(bench: tuple[Path, dict[str, Any]]) -> None:
    d, ids = bench
    with open_store(d) as store:
        client = _client(d, store)
        assert _rows(client.get("/?method=evolve").text) == {ids["evolve"]}
        assert _rows(client.get(f"/?fleet={FLEET}&group=method").text) == {ids["agent"], ids["evolve"]}
        assert _rows(client.get("/?task=circle_packing/*").text) == {ids["agent"], ids["evolve"]}
        assert _rows(client.get("/?state=running").text) >= {HOSTILE_RUN}
        assert ids["agent"] not in _rows(client.get("/?state=running").text)
        assert _rows(client.get("/runs.json?method=evolve").json()["html"]) == {ids["evolve"]}
        assert "no run matches" in client.get("/?fleet=nosuchfleet").text
        for query, message in [(f"task={'*' * 60_000}", f"at most {MAX_FILTER_CHARS}"),
                               ("state=<script>", "state must be one of"), ("group=seed", "group must be one of"),
                               ("nope=1", "unknown parameter"), ("method=a&method=b", "given twice"),
                               (f"{'k' * 5000}=1", "unknown parameter"), ("state=a%0Ab", "state must be one of"),
                               ("&".join(f"token={i}" for i in range(40)), "too many")]:
            for path in ("/", "/runs.json"):
                r = client.get(f"{path}?{query}")
                assert r.status_code == 400 and r.headers["content-type"].startswith("text/plain"), (query, path)
                assert message in r.text and "\n" not in r.text and "<script>" not in r.text.replace(
                    "'<script>'", "")
        # A filter value is data: a task id full of pattern characters matches itself, not other tasks.
        assert parse_query([("task", "a[b]*")]) == IndexQuery(task="a[b]*")


def test_hostile_strings_are_text_on_every_page(bench: tuple[Path, dict[str, Any]]) -> None:
    d, ids = bench
    with open_store(d) as store:
        client = _client(d, store)
        for path in ("/", "/?group=method", "/runs.json", f"/run/{HOSTILE_RUN}", f"/run/{HOSTILE_RUN}/data.json"):
            text = client.get(path).text
            assert "<script>window.__pwned" not in text and "<img src=x" not in text, path
            shown = ("&lt;script&gt;window.__pwned", "\\u0026lt;script\\u0026gt;window.__pwned",  # HTML, in JSON
                     "\\u003cscript\\u003ewindow.__pwned")  # data in JSON (no raw "<" at all)
            assert any(s in text for s in shown), path  # it is there, as text
        r = client.get("/run/%3Cscript%3Ealert(1)%3C%2Fscript%3E")
        assert r.status_code == 404 and r.headers["content-type"].startswith("text/plain")


def test_run_page_shows_running_experiments_the_lessons_file_and_an_empty_steering_slot(
        bench: tuple[Path, dict[str, Any]]) -> None:
    d, ids = bench
    with open_store(d) as store:
        client = _client(d, store)
        page = client.get(f"/run/{HOSTILE_RUN}").text
        live = client.get(f"/run/{HOSTILE_RUN}/data.json").json()["sections"]
        agent_page = client.get(f"/run/{ids['agent']}").text
        lessons = [e for e in store.events(ids["agent"]) if e.kind == "tool_call"
                   and (e.payload.get("input") or {}).get("path") == "lessons.md"]
    experiments = live["experiments"]
    assert "1 running, 1 ended" in experiments and experiments.count("<tr class='experiment'>") == 1
    assert "&lt;/script&gt;&lt;script&gt;window.__pwned" in experiments and "an ended one" not in experiments
    assert "<pre class='lessons-file'># Lessons\n&lt;/pre&gt;&lt;/script&gt;" in live["lessons-file"]
    steering = page[page.index('<section id="steer-panel">'):]
    steering = steering[:steering.index("</section>")]
    assert "data-slot='steering'" in steering and "read only" in steering
    assert not re.search(r"<(form|button|input|textarea)", steering)  # nothing here writes
    with open_store(d) as store:  # a page that carries the steering panel itself leaves the slot out
        view = load_run(store, HOSTILE_RUN)
    assert [s[0] for s in run_extra_sections(view, steering_slot=False)] == ["experiments", "lessons-file"]
    assert [s[0] for s in run_extra_sections(view)][-1] == "steer-panel"
    # The agent's run: its lessons file as it last wrote it, and no experiment (not a training task).
    assert lessons and "no experiment started" in agent_page
    last = lessons[-1].payload["input"]["content"]
    assert last.split("\n")[0] in agent_page[agent_page.index("<pre class='lessons-file'>"):]


def test_fleet_page_is_the_comparison_report_and_the_access_rules_hold(bench: tuple[Path, dict[str, Any]]) -> None:
    d, ids = bench
    with open_store(d) as store:
        client = _client(d, store)
        page = client.get(f"/fleet/{FLEET}")
        assert page.status_code == 200
        methods = re.findall(r"<tr class='method-row' data-method='([^']*)'>", page.text)
        assert sorted(methods) == ["agent", "evolve"]
        assert "final-table" in page.text and f"reasearch compare {FLEET}" in page.text
        assert 'src="../static/plotly.min.js"' in page.text
        assert client.get("/fleet/no-such-fleet").status_code == 404
        assert client.post(f"/fleet/{FLEET}").status_code == 405  # read only
        assert client.get("/", headers={"Host": "evil.example"}).status_code == 400  # DNS rebinding
        guarded = TestClient(create_app(store, token=TOKEN), base_url="http://dashboard.example")
        for path in ("/", f"/fleet/{FLEET}", "/?group=fleet", f"/run/{HOSTILE_RUN}"):
            assert guarded.get(path).status_code == 401, path
        assert guarded.get(f"/fleet/{FLEET}", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_workbench_in_a_browser_groups_sparklines_and_run_page(bench: tuple[Path, dict[str, Any]], browser: Any,
                                                               screenshots: Path) -> None:
    d, ids = bench
    with open_store(d) as reader, LiveServer(create_app(reader, poll_interval_s=0.2)) as url:
        page = browser.new_page(viewport={"width": 1400, "height": 700})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            page.goto(f"{url}/?group=method")
            assert page.locator("section.group").count() == 3  # agent (2 runs), evolve, the hostile method
            assert page.locator("section.group[data-key='agent'] tr.run").count() == 2
            spark = page.locator(f"tr.run[data-run-id='{ids['evolve']}'] svg.sparkline")
            assert spark.count() == 1 and spark.bounding_box()["width"] > 50  # drawn, not just present
            assert page.locator(f"tr.run[data-run-id='{ids['evolve']}'] svg.sparkline polyline").count() == 1
            save_shot(screenshots, "workbench-index.png", lambda p: page.screenshot(path=str(p)))
            page.locator("a.filter-link", has_text="evolve").first.click()
            page.wait_for_url(re.compile(r"method=evolve"))
            assert page.locator("tr.run").count() == 1
            page.goto(f"{url}/run/{HOSTILE_RUN}")
            page.wait_for_selector("body[data-ready='1']", timeout=60_000)
            assert page.locator("#sec-experiments tr.experiment").count() == 1
            assert "window.__pwned" in page.locator("pre.lessons-file").inner_text()  # shown as text
            assert page.locator("section#steer-panel [data-slot='steering']").count() == 1
            page.goto(f"{url}/run/{ids['agent']}")
            page.wait_for_selector("body[data-ready='1']", timeout=60_000)
            assert page.locator("#fig-evals .point").count() == 3
            assert page.evaluate("window.__pwned === undefined") and errors == []
        finally:
            page.close()
