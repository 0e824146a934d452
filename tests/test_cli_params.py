"""``-p KEY=VALUE`` (and ``--cap``), spec files and exported evaluator files refuse NaN, infinities and
integers beyond 64 bits with one line (exit 2): a number from outside is finite and bounded."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import reasearch
from reasearch import cli
from reasearch.errors import ConfigError
from reasearch.evaluators import make
from reasearch.evaluators.circle_packing.task import CirclePackingTask
from reasearch.fleets.fleet import FleetSpec

BAD = ("Infinity", "NaN", "-Infinity", "1e400", "[1,NaN]", "1" * 5000, str(2**63))

COMMANDS = {
    "eval": ("eval", "circle_packing/n26-v1", "{seed}"),
    "seed": ("seed", "circle_packing/n26-v1", "-o", "{tmp}/seed_out.py"),
    "optimize": ("optimize", "circle_packing/n26-v1", "--model", "demo", "--run-dir", "{tmp}/runs"),
    "compare": ("compare", "circle_packing/n26-v1", "--run-dir", "{tmp}/runs"),
    "mcp": ("mcp", "circle_packing/n26-v1", "--run-dir", "{tmp}/runs"),
    "export-openevolve": ("export-evaluator", "circle_packing/n26-v1", "--for", "openevolve", "-o", "{tmp}/ev.py"),
    "export-shinka": ("export-evaluator", "circle_packing/n26-v1", "--for", "shinka", "-o", "{tmp}/ev.py"),
}


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    path = tmp_path / "seed.py"
    path.write_text(CirclePackingTask(n=26).seed_program())
    return path


@pytest.mark.parametrize("value", BAD)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_taking_p_refuses_non_finite_numbers(command: str, value: str, seed: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a.format(seed=seed, tmp=tmp_path) for a in COMMANDS[command]] + ["-p", f"time_limit_s={value}"]
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and err.count("\n") == 1 and len(err) < 400
    assert "finite" in err and "time_limit_s" in err
    assert not (tmp_path / "ev.py").exists() and not (tmp_path / "seed_out.py").exists()


def test_cap_refuses_non_finite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["mcp", "circle_packing/n26-v1", "--run-dir", str(tmp_path), "--cap", "dollars=Infinity"])
    err = capsys.readouterr().err
    assert code == 2 and "finite" in err and "--cap" in err and err.count("\n") == 1


@pytest.mark.parametrize("value", [float("inf"), float("nan"), float("-inf"), [1.0, float("nan")], 2**64])
def test_make_refuses_non_finite_parameters(value: Any) -> None:
    with pytest.raises(ConfigError, match="finite"):
        make("circle_packing/n26-v1", time_limit_s=value)


@pytest.mark.parametrize("fmt", ["openevolve", "shinka"])
@pytest.mark.parametrize("value", ['float("inf")', 'float("nan")', 'float("-inf")', "10**30"])
def test_generated_evaluator_files_refuse_non_finite_parameters(fmt: str, value: str, seed: Path,
                                                                tmp_path: Path) -> None:
    """A generated file edited (or written by hand) to take a non-finite limit refuses it in one line."""
    out = tmp_path / "evaluator.py"
    assert cli.main(["export-evaluator", "circle_packing/n26-v1", "--for", fmt, "-o", str(out),
                     "-p", "time_limit_s=2.5"]) == 0
    text = out.read_text()
    assert "2.5" in text
    out.write_text(text.replace("2.5", value))
    if fmt == "openevolve":
        spec = importlib.util.spec_from_file_location("edited_openevolve", out)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        with pytest.raises(ConfigError, match="finite"):
            module.evaluate(str(seed))
    else:  # ShinkaEvolve runs the file as a script
        proc = subprocess.run([sys.executable, str(out), "--program_path", str(seed), "--results_dir",
                               str(tmp_path / "r")], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(Path(reasearch.__file__).parent.parent)})
        assert proc.returncode == 2, proc.stderr
        assert "finite" in proc.stderr and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(("suffix", "text"), [
    (".json", '{"tasks": ["circle_packing/n26-v1"], "seeds": [0], "models": ["demo"], '
              '"task_params": {"circle_packing/n26-v1": {"time_limit_s": Infinity}}}'),
    (".json", '{"tasks": ["circle_packing/n26-v1"], "seeds": [0], "models": ["demo"], '
              '"budget": {"evaluations": NaN}}'),
    (".json", '{"tasks": ["circle_packing/n26-v1"], "seeds": [0], "models": ["demo"], "price_in": 1e400, '
              '"price_out": 1}'),
    (".toml", 'tasks = ["circle_packing/n26-v1"]\nseeds = [0]\nmodels = ["demo"]\n'
              '[task_params."circle_packing/n26-v1"]\ntime_limit_s = inf\n'),
    (".toml", 'tasks = ["circle_packing/n26-v1"]\nseeds = [0]\nmodels = ["demo"]\n'
              '[task_params."circle_packing/n26-v1"]\ntime_limit_s = -inf\n'),
    (".toml", 'tasks = ["circle_packing/n26-v1"]\nseeds = [0]\nmodels = ["demo"]\nprice_in = nan\nprice_out = 1\n'),
])
def test_fleet_spec_files_refuse_non_finite_numbers(suffix: str, text: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / f"fleet{suffix}"
    path.write_text(text)
    with pytest.raises(ConfigError, match="finite"):
        FleetSpec.from_file(path)
    finite = text.replace("Infinity", "3").replace("NaN", "3").replace("1e400", "3").replace("-inf", "3")
    finite = finite.replace("= inf", "= 3").replace("nan", "3")
    FleetSpec.from_file(_write(tmp_path / f"ok{suffix}", finite))  # the same spec with finite numbers loads
    code = cli.main(["fleet", "run", "--spec", str(path), "--run-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2 and "finite" in err and err.count("\n") == 1


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_finite_values_and_text_still_parse() -> None:
    from reasearch._cli._params import key_values

    assert key_values(["a=2.5", "b=-3", "c=[1, 2.0]", "d=some text", "e=/tmp/x.jsonl", f"f={2**63 - 1}", "g=null"]) == {
        "a": 2.5, "b": -3, "c": [1, 2.0], "d": "some text", "e": "/tmp/x.jsonl", "f": 2**63 - 1, "g": None}


@pytest.mark.parametrize("value", ["Infinity", "NaN", "-Infinity", "1e400"])
@pytest.mark.parametrize("key", ["time_limit_s", "best_known", "seed_score"])
def test_a_task_spec_read_back_refuses_non_finite_numbers(key: str, value: str) -> None:
    from reasearch.evaluators.spec import TaskSpec

    doc = make("circle_packing/n26-v1").spec.to_dict()
    text = json.dumps({**doc, key: 1.5}).replace("1.5", value, 1)
    with pytest.raises(ValueError, match=f"{key} must be a finite number"):
        TaskSpec.from_json(text)
    params = json.dumps({**doc, "params": {"time_limit_s": 1.5}}).replace("1.5", value, 1)
    with pytest.raises(ConfigError, match="finite"):
        make(TaskSpec.from_json(params))
