"""``reasearch compare`` through ``main()`` (issue 39 items 4 and 6): a member that raises ends ``failed`` with
its reason while the others finish, the report is written and names it, and a resume with ``--id`` retries
only it; with stdout and stderr not a terminal, one line per member is printed as it ends."""

from __future__ import annotations

import io
import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from reasearch.cli import main
from reasearch.methods import METHODS
from reasearch.runs import RunState, Unit, open_store

TASK = "heilbronn/n11-v1"
# What a hostile reply could make a method raise: markup must reach the page as text, and a terminal
# control sequence (clear screen) must reach stderr and the store escaped.
CRASH = "unreadable student reply <b id='x'>42</b>\x1b[2J"


def _args(tmp_path: Path, *extra: str) -> list[str]:
    store = str(tmp_path / "runs")
    return ["compare", TASK, "--methods", "evolve,best-of-n", "--budget", "3", "--model", "demo", "--parallelism",
            "1", "--store", store, "--run-dir", store, "-o", str(tmp_path / "c.html"), "--json",
            str(tmp_path / "c.json"), *extra]


def test_a_member_that_raises_fails_alone_and_a_resume_retries_only_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    calls = {"evolve": 0, "best-of-n": 0}
    real = {m: METHODS[m] for m in calls}

    def counted(method: str) -> Any:
        def loop(driver: Any, config: Any) -> str:
            calls[method] += 1
            if method == "best-of-n" and calls[method] == 1:  # one evaluation recorded, then the crash
                driver.evaluate(driver.task.seed_program(), parent=None, note="seed")
                raise ValueError(CRASH)
            return real[method][1](driver, config)
        return (real[method][0], loop)

    for m in calls:
        monkeypatch.setitem(METHODS, m, counted(m))
    rc = main(_args(tmp_path, "--id", "cmp-crash", "--quiet"))
    err = capsys.readouterr().err
    assert rc == 1, err[-2000:]
    assert calls == {"evolve": 1, "best-of-n": 1}
    data = json.loads((tmp_path / "c.json").read_text())
    states = {r["method"]: (r["state"], r["reason"]) for r in data["runs"]}
    assert states["evolve"] == ("finished", states["evolve"][1])
    state, reason = states["best-of-n"]
    assert state == "failed" and reason.startswith("crashed: ValueError: unreadable student reply <b id='x'>42</b>")
    assert "\x1b" not in reason and "\\x1b[2J" in reason and "\x1b" not in err
    (task,) = data["tasks"]
    assert not task["ranked"] and "did not finish" in task["budget_check"]["why"]
    assert [(r["method"], r["state"]) for r in data["not_finished"]] == [("best-of-n", "failed")]
    page = (tmp_path / "c.html").read_text()
    assert "id='not-finished'" in page and "unreadable student reply" in page
    assert "<b id='x'>" not in page and "&lt;b id=" in page  # the reason is text, never markup
    assert "not finished: member 1 cmp-crash-m001 (best-of-n" in err and "--id cmp-crash" in err
    with open_store(str(tmp_path / "runs")) as s:
        evolve_before = [e.step for e in s.evaluations("cmp-crash-m000")]
        assert s.get_run("cmp-crash-m001").state is RunState.FAILED and len(s.evaluations("cmp-crash-m001")) == 1

    rc = main(_args(tmp_path, "--id", "cmp-crash", "--quiet"))
    err = capsys.readouterr().err
    assert rc == 0, err[-2000:]
    assert calls == {"evolve": 1, "best-of-n": 2}  # the finished member was only read
    data = json.loads((tmp_path / "c.json").read_text())
    assert {r["method"]: r["state"] for r in data["runs"]} == {"evolve": "finished", "best-of-n": "finished"}
    assert data["not_finished"] == [] and data["tasks"][0]["ranked"]
    with open_store(str(tmp_path / "runs")) as s:
        assert [e.step for e in s.evaluations("cmp-crash-m000")] == evolve_before
        assert s.usage("cmp-crash-m001")[Unit.EVALUATIONS] == 3  # the recorded evaluation was not paid twice
    assert "id='not-finished'" not in (tmp_path / "c.html").read_text()


class _Watched(io.StringIO):
    """stderr that is not a terminal and tells when a line naming member 0 arrives."""

    def __init__(self) -> None:
        super().__init__()
        self.first_ended = threading.Event()

    def write(self, s: str) -> int:
        n = super().write(s)
        if "member 0 " in self.getvalue():
            self.first_ended.set()
        return n


def test_compare_piped_prints_a_line_per_member_as_it_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    err = _Watched()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    seen_before_second: list[bool] = []
    real = METHODS["best-of-n"]

    def second(driver: Any, config: Any) -> str:  # the second member (parallelism 1) starts after the first ended
        seen_before_second.append(err.first_ended.wait(120))  # an event, not a clock: fails only if never printed
        return real[1](driver, config)

    monkeypatch.setitem(METHODS, "best-of-n", (real[0], second))
    assert main(_args(tmp_path, "--id", "cmp-pipe")) == 0, err.getvalue()[-2000:]
    lines = [ln for ln in err.getvalue().splitlines() if ln.startswith("member ")]
    assert [ln.split()[:3] for ln in lines] == [["member", "0", "cmp-pipe-m000:"], ["member", "1", "cmp-pipe-m001:"]]
    assert all(" finished best " in ln and "(3 evaluations)" in ln for ln in lines), lines
    assert seen_before_second == [True]


def test_an_agent_member_that_cannot_start_fails_alone_and_stops_driving(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's constructor raises after its run was created: the member ends failed with the reason,
    its run has no live driver left (no heartbeat beating for nobody), and the evolve member finishes."""
    from reasearch.fleets.compare import compare_spec, run_compare

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("workspace unusable")

    monkeypatch.setattr("reasearch.agent.launch.Agent", broken)
    spec = compare_spec([TASK], ["agent", "evolve"], seeds=[0], budget=2, model="demo", parallelism=1)
    store = str(tmp_path / "runs")
    report = run_compare(spec, store=store, run_dir=store, fleet_id="cmp-start")
    by_method = {m.member.method: m for m in report.members}
    assert by_method["evolve"].state == "finished"
    agent = by_method["agent"]
    assert agent.state == "failed" and agent.reason.startswith("crashed: RuntimeError: workspace unusable (at ")
    with open_store(store) as s:
        drivers = s.drivers(agent.run_id)
        assert drivers and all(d.stopped for d in drivers)
