"""The end-of-run summary's active wall time is the report's (issue 27 item 8): one definition
(``runs.run.active_seconds``, the run's driver sessions) and one format, whatever the clocks say."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from agent_helpers import toy_source

from reasearch.agent.console import summary_lines
from reasearch.models.testing import call, say
from reasearch.reports._model import load_run
from reasearch.reports._sections import summary_html


def test_the_summary_and_the_report_give_the_same_active_time(
        make_agent: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    wall = [1_000_000.0]

    def tick() -> float:  # the wall clock moves 40 s each time anything reads it: a slow run
        wall[0] += 40.0
        return wall[0]

    monkeypatch.setattr(time, "time", tick)
    agent, run = make_agent([say("", call("evaluate", code=toy_source([3.0, 3.0]))),
                             say("", call("finish", reason="done"))])
    result = agent.optimize()
    summary = "\n".join(summary_lines(agent, result, tmp_path / "runs", agent.final_files))
    shown = re.search(r", ([^,]+) active wall time", summary)
    assert shown is not None, summary
    report = re.search(r"<th>wall time</th><td>([^<(]+) active", summary_html(load_run(run.store, run.id)))
    assert report is not None and report.group(1) == shown.group(1), (shown.group(1), report)
    assert shown.group(1) != "0.0 s"
