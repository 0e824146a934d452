"""The report without a browser: what it reads from the store, the lineage layout, the drawing registry,
the escaping of JSON inside a script tag, and the ``reasearch report`` command."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from report_runs import ReportRuns

from reasearch.cli import main
from reasearch.errors import ConfigError
from reasearch.evaluators.result import EvalResult, Status
from reasearch.reports import DrawContext, draw_solution, drawing_for, generic_drawing, load_run, register_drawing
from reasearch.reports._figures import tree_layout
from reasearch.reports._page import script_json
from reasearch.reports.drawings import _DRAWINGS
from reasearch.runs.store import Store


def test_view_matches_the_store(runs: tuple[Store, ReportRuns]) -> None:
    store, rr = runs
    view = load_run(store, rr.ids["circle_packing"])
    evals = store.evaluations(view.record.id)
    assert [p.step for p in view.points] == [e.step for e in evals]
    assert [p.status for p in view.points] == ["OK", "OK", "CRASH", "OK"]
    assert view.best is not None and view.best.step == evals[1].step  # the first to reach the best score
    # Dollars on the x axis are what the ledger holds up to each evaluation's step, and only grow.
    ledger = store.ledger(view.record.id)
    for p in view.points:
        assert p.dollars == pytest.approx(
            sum(e.amount for e in ledger if e.unit.value == "dollars" and e.step <= p.step)
        )
    assert [p.dollars for p in view.points] == sorted(p.dollars for p in view.points) and view.points[-1].dollars > 0
    assert view.models == {"agent": "scripted-sonnet", "editor": "scripted-sonnet", "summarizer": "scripted-sonnet"}
    assert [v.origin for v in view.lessons] == [
        "start (template)",
        "write_file by the agent",
        "write_file by the agent",
    ]


def test_the_payload_counts_what_the_page_draws(runs: tuple[Store, ReportRuns]) -> None:
    from reasearch.reports import report_payload

    store, rr = runs
    for family, run_id in rr.ids.items():
        data = report_payload(load_run(store, run_id))
        points = sum(len(t["x"]) for t in data["figures"]["fig-evals"]["data"] if t["mode"] == "markers")
        assert points == rr.evaluations[family]
        nodes = [t for t in data["figures"]["fig-tree"]["data"] if t["mode"] == "markers"]
        assert len(nodes) == 1 and len(nodes[0]["x"]) == len(data["candidates"]) == rr.candidates[family]
        json.dumps(data, allow_nan=False)  # plain JSON


def test_tree_layout_places_every_node_even_with_cycles_and_long_chains() -> None:
    depth, y = tree_layout(["a", "b", "c", "d"], [None, "a", "a", "b"])
    assert depth == [0, 1, 1, 2] and y[1] == y[3] and y[0] == (y[1] + y[2]) / 2
    # A parent cycle (impossible through the Run API, but the store is data) and an unknown parent.
    depth, y = tree_layout(["a", "b", "c"], ["b", "a", "zzz"])
    assert len(depth) == len(y) == 3
    n = 5000  # a chain deeper than Python's recursion limit
    depth, _ = tree_layout([str(i) for i in range(n)], [None] + [str(i) for i in range(n - 1)])
    assert depth[-1] == n - 1


def test_script_json_cannot_close_its_script_tag() -> None:
    payload = {"s": "</script><script>alert(1)</script><!-- \u2028 & >", "n": float("nan")}
    text = script_json(payload)
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"s": payload["s"], "n": None}


def _ok(solution: Any, metrics: dict[str, Any] | None = None) -> EvalResult:
    return EvalResult(status=Status.OK, score=1.0, normalized_score=None, metrics=metrics or {}, feedback="",
                      wall_s=0.0, cpu_s=0.0, solution=solution)


def test_registry_plugs_in_a_family_and_falls_back() -> None:
    ctx = DrawContext("nanogpt_like/speedrun-v1", {}, _ok({}, {"train_loss": [4.0, 3.1, 2.5, 2.2],
                                                                "accuracy": {"train": 0.9, "val": 0.7}, "steps": 4}))
    assert drawing_for(ctx.task_id) is generic_drawing
    html = draw_solution(ctx)
    assert 'data-family="generic"' in html and html.count("<polyline") == 1 and html.count('class="bar"') == 2
    register_drawing("nanogpt_like", lambda c: "<svg class='loss'></svg>")
    try:
        assert 'data-family="nanogpt_like"' in draw_solution(ctx) and "class='loss'" in draw_solution(ctx)
        with pytest.raises(ConfigError, match="already has a drawing"):
            register_drawing("nanogpt_like", generic_drawing)
        with pytest.raises(ConfigError, match="task family"):
            register_drawing("a/b", generic_drawing)
    finally:
        _DRAWINGS.pop("nanogpt_like", None)


@pytest.mark.parametrize("task_id, solution", [
    ("circle_packing/n26-v1", {"centers": [[0.5, 0.5]], "radii": [0.1, 0.2]}),  # mismatched
    ("circle_packing/n26-v1", {"centers": "<script>", "radii": None}),
    ("heilbronn/n11-v1", {"points": [[float("nan"), 0.0]] * 11}),
    ("txn_scheduling/v1", {"schedules": [["x"]]}),
    ("arc_agi_2/67a3c6ac-v1", {"attempts": "<img src=x onerror=alert(1)>"}),
])
def test_a_drawing_that_meets_bad_data_falls_back_and_escapes(task_id: str, solution: Any) -> None:
    html = draw_solution(DrawContext(task_id, {}, _ok(solution, {"note": "<img src=x onerror=alert(1)>"})))
    assert "<img" not in html and "<script" not in html
    assert 'data-family="generic"' in html or 'data-family="arc_agi_2"' in html
    assert re.search(r"drawing failed|train pair", html)


def test_cli_report_and_compare(runs: tuple[Store, ReportRuns], report_dir: Path, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    _, rr = runs
    out = tmp_path / "r.html"
    assert main(["report", rr.ids["txn_scheduling"][:-2], "--run-dir", str(report_dir), "-o", str(out)]) == 0
    text = out.read_text()
    assert (
        text.startswith("<!doctype html>") and "connect-src 'none'" in text and 'data-family="txn_scheduling"' in text
    )
    assert "opens offline" in capsys.readouterr().err
    cmp = tmp_path / "c.html"
    assert main(["report", "--compare", rr.ids["heilbronn"], rr.ids["generic"], "--run-dir", str(report_dir),
                 "-o", str(cmp)]) == 0
    assert cmp.read_text().count("<tr class='run'>") == 2
    fleet = tmp_path / "fleet.html"  # every run of a task family, and one more by id
    assert main(["report", "--compare", "--task", "arc_agi_2/*", rr.ids["generic"], "--run-dir", str(report_dir),
                 "-o", str(fleet)]) == 0
    assert fleet.read_text().count("<tr class='run'>") == 3
    assert main(["report", "--compare", "--task", "nope/*", "--run-dir", str(report_dir)]) == 2
    assert main(["report", "--task", "arc_agi_2/*", "--run-dir", str(report_dir)]) == 2
    assert main(["report", rr.ids["heilbronn"], rr.ids["generic"], "--run-dir", str(report_dir)]) == 2
    assert "--compare" in capsys.readouterr().err
    assert main(["report", "nosuchrun", "--run-dir", str(report_dir)]) == 2
    assert main(["report", "x", "--run-dir", str(tmp_path / "missing")]) == 2
    assert not (tmp_path / "missing").exists()  # a reader never creates a store


def test_oversized_sources_and_feedback_are_cut_and_say_so(tmp_path: Path) -> None:
    from reasearch.evaluators.testing import ToyTask
    from reasearch.reports import build_report, report_payload
    from reasearch.runs import Run, open_store

    with open_store(tmp_path) as store:
        run = Run.create(store, task=ToyTask(dim=2), budget={"evaluations": 5})
        huge = "# " + "x" * 3_000_000 + "\ndef run():\n    return [0.0, 0.0]\n"
        cid = run.add_candidate(huge, note="n" * 50_000)
        data = report_payload(load_run(store, run.id))
        cand = next(c for c in data["candidates"] if c["id"] == cid)
        assert len(cand["source"]) < 250_000 and "more characters not shown" in cand["source"]
        assert len(cand["note"]) < 3_000
        assert len(build_report(store, run.id)) < 6_000_000  # plotly.js (~4.8 MB) + the cut data


def test_arc_set_results_draw_one_square_per_task() -> None:
    tasks = {f"t{i:03d}": {"status": "OK" if i % 3 else "CRASH", "score": (i % 4) / 3 if i % 3 else None}
             for i in range(45)}
    html = draw_solution(DrawContext("arc_agi_2/eval-v1", {}, _ok(None, {"tasks": tasks, "phase": "train"})))
    assert 'data-family="arc_agi_2"' in html and html.count('class="arc-task"') == 45


def test_unknown_runs_and_streams_are_404(runs: tuple[Store, ReportRuns]) -> None:
    from starlette.testclient import TestClient

    from reasearch.reports.serve import create_app

    store, _ = runs
    client = TestClient(create_app(store), base_url="http://127.0.0.1")
    for path in ("/run/nope/events", "/run/nope/data.json", "/run/nope/report.html", "/run/2026/data.json"):
        assert client.get(path).status_code == 404, path  # "2026" is an ambiguous prefix: no guess
