"""The CLI shows the engine's waits: one line on stderr per notice, for as long as the wait lasts."""

from __future__ import annotations

import argparse

import pytest

from reasearch import cli
from reasearch.engine import waits


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_the_cli_prints_every_wait_on_stderr(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    def fake_command(args: object) -> int:
        ticker = waits.WaitTicker("a cpu slot", holder=lambda: "pid 4242 (run abc)", every_s=0, clock=_Clock())
        for _ in range(3):
            ticker.tick()
        return 0

    parser = cli.build_parser(["tasks"])
    monkeypatch.setattr(parser, "parse_args", lambda argv: argparse.Namespace(func=fake_command))
    monkeypatch.setattr(cli, "build_parser", lambda argv: parser)
    assert cli.main(["tasks"]) == 0
    err = capsys.readouterr().err.splitlines()
    want = "reasearch: waiting for a cpu slot, held by pid 4242 (run abc)"
    assert len([ln for ln in err if ln.startswith(want)]) == 3
    assert not waits._reporters  # removed when the command ends
