"""The HTML report in a real browser (headless Debian chromium via Playwright): it opens offline with
no console error, shows one point per evaluation and one tree node per candidate, draws the best
solution of every task family, and nothing a candidate or a model wrote runs as markup or script."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from report_runs import HOSTILE_NOTE, ReportRuns, save_shot

from reasearch.reports import build_compare, write_report
from reasearch.runs.store import Store

# family -> (CSS selector inside the solution figure, expected count; None: at least one)
PICTURES: dict[str, list[tuple[str, int | None]]] = {
    "circle_packing": [("svg.packing circle.c", 26), ("svg.packing line.tight", 10)],
    "heilbronn": [("svg.heilbronn circle.pt", 11), ("svg.heilbronn polygon.smallest", 1)],
    "txn_scheduling": [("svg.gantt", 3), ("svg.gantt rect.txn", 300)],
    "eplb": [("svg.eplb-gpu rect.bar", 64)],
    "arc_agi_2": [("svg.arc", 9), ("svg.arc g.wrong", 0)],  # attempt 2 is missing: 3 pairs x 3 grids
    "arc_agi_2_wrong": [("svg.arc", 12), ("svg.arc g.wrong", None)],
    "generic": [("svg.chart polyline", 1)],
    "empty": [],
}
FIGURE_FAMILY = {"generic": "generic", "arc_agi_2_wrong": "arc_agi_2", "empty": "none"}


def open_report(browser: Any, path: Path) -> tuple[Any, list[str], list[str]]:
    """The page, its console errors and every network request it tried (all are refused)."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on(
        "console", lambda m: errors.append(f"console.{m.type}: {m.text}") if m.type in ("error", "warning") else None
    )
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))

    def refuse(route: Any) -> None:
        requests.append(route.request.url)
        route.abort()

    page.route("http*://**/*", refuse)
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    return page, errors, requests


@pytest.mark.parametrize("family", sorted(PICTURES))
def test_report_opens_offline_with_every_point_node_and_picture(
    family: str, runs: tuple[Store, ReportRuns], browser: Any, tmp_path: Path, screenshots: Path
) -> None:
    store, rr = runs
    run_id = rr.ids[family]
    path = write_report(store, run_id, tmp_path / f"{family}.html")
    page, errors, requests = open_report(browser, path)
    try:
        assert errors == [] and requests == []
        assert (rr.evaluations[family] > 0) == (family != "empty")
        assert page.locator("#fig-evals .point").count() == rr.evaluations[family]
        assert page.locator("#fig-dollars .point").count() == rr.evaluations[family]
        assert page.locator("#fig-wall .point").count() == rr.evaluations[family]
        assert page.locator("#fig-tree .point").count() == rr.candidates[family]
        assert page.locator("body").get_attribute("data-evaluations") == str(rr.evaluations[family])
        figure = page.locator("figure.solution")
        assert figure.get_attribute("data-family") == FIGURE_FAMILY.get(family, family)
        for selector, count in PICTURES[family]:
            found = figure.locator(selector).count()
            assert found == count if count is not None else found > 0, (selector, found)
        assert "the drawing failed" not in figure.inner_text()
        save_shot(screenshots, f"solution-{family}.png", lambda p: page.locator("#solution").screenshot(path=str(p)),
                  docs=family not in ("arc_agi_2", "empty"))  # docs/: one picture per task type
    finally:
        page.close()


def test_agent_run_report_has_transcript_lessons_compaction_and_clickable_tree(
        runs: tuple[Store, ReportRuns], browser: Any, tmp_path: Path, screenshots: Path) -> None:
    store, rr = runs
    run_id = rr.ids["circle_packing"]
    path = write_report(store, run_id, tmp_path / "agent.html")
    page, errors, requests = open_report(browser, path)
    try:
        assert errors == [] and requests == []
        # One folded block per agent turn, each tool call folded inside with its input and result.
        assert page.locator("#sec-transcript details.turn").count() == rr.turns["circle_packing"] == 12
        tools = page.locator("#sec-transcript details.tool")
        assert tools.count() == len(store.events(run_id, kind="tool_result"))
        assert page.locator("#sec-transcript details.tool.error").count() == 0
        assert page.locator("#sec-transcript .event.final").count() == 1
        assert page.locator("#sec-compactions details.compaction").count() == 1
        # lessons.md: template, then two versions written by the agent (the compaction read an equal one).
        lessons = page.locator("#sec-lessons details.lessons")
        assert lessons.count() == 3
        assert "raising in run() is a CRASH" in lessons.nth(2).inner_text()
        # The summary: dollars were debited (a priced scripted model), models are named.
        summary = page.locator("#sec-summary").inner_text()
        assert "dollars" in summary and "scripted-sonnet" in summary and "finished" in summary
        assert "dollars spent" in (page.locator("#fig-dollars .xtitle").text_content() or "")
        save_shot(screenshots, "report-overview.png", lambda p: page.screenshot(path=str(p)))
        # Clicking a tree node shows that candidate's source and feedback.
        candidates = store.candidates(run_id)
        page.locator("#fig-tree").scroll_into_view_if_needed()
        for i, node in enumerate(page.locator("#fig-tree .point").all()):
            # (the page's CSP forbids eval, so wait_for_function cannot be used: poll from here; a click
            # that lands while Plotly is still busy under load is repeated: clicking a node again is harmless,
            # so a missed click is retried after 1 s instead of waiting out 5 s, with the same 15 s in all)
            for _attempt in range(15):
                box = node.bounding_box()
                assert box is not None
                x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
                page.mouse.move(x, y)
                page.mouse.click(x, y)
                deadline = time.monotonic() + 1
                while (shown := page.locator("#cand-panel").get_attribute("data-candidate")) != candidates[i].id:
                    if time.monotonic() > deadline:
                        break
                    page.wait_for_timeout(50)
                if shown == candidates[i].id:
                    break
            assert shown == candidates[i].id, f"clicking node {i} did not show candidate {candidates[i].id[:12]}"
            assert page.locator("#cand-panel").is_visible()
            assert page.locator("#cand-source").inner_text().strip() == candidates[i].source.strip()
        assert len(candidates) == 3
        save_shot(screenshots, "report-lineage.png", lambda p: page.locator("#lineage").screenshot(path=str(p)))
        page.locator("#sec-transcript details.turn").nth(3).evaluate("d => d.open = true")
        save_shot(screenshots, "report-transcript.png", lambda p: page.locator("#transcript").screenshot(path=str(p)))
    finally:
        page.close()


def test_hostile_notes_and_sources_stay_text(runs: tuple[Store, ReportRuns], browser: Any, tmp_path: Path) -> None:
    store, rr = runs
    run_id = rr.ids["heilbronn"]
    assert any(c.note == HOSTILE_NOTE for c in store.candidates(run_id))
    assert any("</script>" in c.source for c in store.candidates(run_id))
    path = write_report(store, run_id, tmp_path / "hostile.html")
    text = path.read_text()
    assert "</script><script>window.__pwned" not in text and "<img src=x" not in text
    page, errors, _ = open_report(browser, path)
    try:
        assert errors == []
        assert page.evaluate("window.__pwned === undefined")
        assert page.locator("img").count() == 0
        # The note and the source come back as the exact text (shown, not interpreted).
        data = page.evaluate("JSON.parse(document.getElementById('report-data').textContent)")
        assert HOSTILE_NOTE in [c["note"] for c in data["candidates"]]
        assert any("</script><script>window.__pwned = 3</script>" in c["source"] for c in data["candidates"])
        page.evaluate("window.reasearchReport.showCandidate(1)")
        assert "window.__pwned = 3" in page.locator("#cand-source").inner_text()
        assert page.evaluate("window.__pwned === undefined")
    finally:
        page.close()


def test_compare_overlays_curves_and_tabulates(runs: tuple[Store, ReportRuns], browser: Any, tmp_path: Path,
                                               screenshots: Path) -> None:
    store, rr = runs
    ids = [rr.ids["circle_packing"], rr.ids["heilbronn"], rr.ids["generic"]]
    path = tmp_path / "compare.html"
    path.write_text(build_compare(store, ids))
    page, errors, requests = open_report(browser, path)
    try:
        assert errors == [] and requests == []
        assert page.locator("#compare-table tr.run").count() == 3
        # One line per run in each figure; different tasks: normalized scores (the toy task has none).
        assert page.locator("#fig-compare-evals .scatterlayer .trace").count() == 3
        assert "normalized" in (page.locator("#fig-compare-evals .ytitle").text_content() or "")
        save_shot(screenshots, "compare.png", lambda p: page.screenshot(path=str(p), full_page=True))
    finally:
        page.close()
