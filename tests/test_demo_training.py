"""The demo model on a training task (issue 29): ``reasearch optimize tabular/csv-v2 --model demo`` runs the
seed, edits ``train.py`` with the tools on offer, and ends with a better validation score than the seed's."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch.cli import main
from reasearch.models._demo_training import numbered_text, seasonal_edit
from reasearch.runs import Run, open_store


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """Under /var/tmp: the sandbox uid must reach the workspaces."""
    d = Path(tempfile.mkdtemp(prefix="reasearch-demo-train-", dir="/var/tmp"))
    d.chmod(0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_the_demo_model_improves_on_the_tabular_seed(run_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")  # nothing may be called
    argv = ["optimize", "tabular/csv-v2", "--model", "demo", "--budget", "4", "--run-dir", str(run_dir), "--quiet"]
    assert main(argv) == 0
    assert "chosen by agent" in capsys.readouterr().err
    with open_store(run_dir) as store:
        (rec,) = store.list_runs()
        run = Run.open(store, rec.id)
        scores = [e.result.score for e in run.evaluations()]
        tools = [e.payload["name"] for e in run.events(kind="tool_call")]
        best = run.best()
    assert len(scores) == 4 and all(s is not None for s in scores)
    assert best is not None and best[1].score < 0.5 * scores[0]  # rmse: 7.39 (seed) -> 1.55 (time features)
    assert tools[:3] == ["read_file", "read_file", "run_experiment"] and tools[-1] == "finish"
    assert "git" in tools and tools.count("write_file") >= 3  # kept the best with a commit, wrote variants
    # deterministic: a second run makes the same decisions and gets the same scores
    assert main(argv) == 0
    with open_store(run_dir) as store:
        runs = [Run.open(store, r.id) for r in store.list_runs()]
        again = [[e.result.score for e in r.evaluations()] for r in runs]
    assert again[0] == again[1]


def test_seasonal_edit_needs_its_anchors_and_applies_once() -> None:
    assert seasonal_edit("print('no model here')\n") is None
    src = ("import numpy as np\nTIME = 'date'\nEPOCHS = 200\n\n\ndef matrix(header, rows, cols):\n"
           "    x = np.zeros((len(rows), len(cols)))\n    return np.nan_to_num(x)\n")
    out = seasonal_edit(src)
    assert out is not None and "EPOCHS = 3000" in out and "time_features(header, rows)" in out
    compile(out, "train.py", "exec")
    assert seasonal_edit(out) is None


def test_numbered_text_reads_back_read_file_output_and_refuses_a_cut_file() -> None:
    src = "a = 1\n\n    b = 2\n"
    shown = "\n".join(f"{i:5d}  {line}" for i, line in enumerate(src.splitlines(), 1))
    assert numbered_text(shown) == src
    assert numbered_text(shown + "\n[lines 1-3 of 900]") == ""
