"""``reasearch compare`` end to end: the agent and evolve x two seeds through the CLI on a real program
task with the offline demo model, then the HTML comparison opened in headless chromium (curves
present, one row per method, equal budgets stated, the agent's tool mix, nothing fetched, no console
error)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_report_browser import open_report

from reasearch.cli import main

TASK = "heilbronn/n11-v1"


def test_compare_two_methods_two_seeds_through_the_cli(browser: Any, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    html, data_path = tmp_path / "compare.html", tmp_path / "compare.json"
    rc = main(["compare", TASK, "--methods", "agent,evolve", "--seeds", "0-1", "--budget", "5",
               "--model", "demo", "--store", str(tmp_path / "runs"), "--run-dir", str(tmp_path / "runs"),
               "--json", str(data_path), "-o", str(html), "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "agent" in out and "evolve" in out and "ranked at equal spend" in out
    data = json.loads(data_path.read_text())
    assert {(r["method"], r["seed"]) for r in data["runs"]} == {("agent", 0), ("agent", 1), ("evolve", 0),
                                                                 ("evolve", 1)}
    assert all(r["used"]["evaluations"] == 5 and r["state"] == "finished" for r in data["runs"])
    (task,) = data["tasks"]
    assert task["ranked"] and all(r.get("rank") in (1, 2) for r in task["table"])
    page, errors, requests = open_report(browser, html)
    try:
        assert errors == [] and requests == []
        rows = page.locator("table.final-table tr.method-row")
        assert rows.count() == 2
        assert sorted(rows.nth(i).get_attribute("data-method") for i in range(2)) == ["agent", "evolve"]
        assert page.locator("tr.published").count() == 1 and page.locator("p.budget-ok").count() == 1
        for fig in ("budget", "dollars", "wall"):
            # one median line per method, drawn by plotly (its traces are SVG paths)
            assert page.locator(f"#fig-heilbronn-n11-v1-{fig} .scatterlayer .trace").count() == 6
        assert page.locator("table.spend-table tr.run-row").count() == 4
        assert page.locator("table.tool-mix th", has_text="evaluate").count() == 1  # where the agent spent its turns
    finally:
        page.close()
