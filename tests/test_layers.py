"""The layer contract (agent -> runs -> evaluators -> engine; native below all) is checked by import-linter.

Part of the default ``pytest`` run, so a lower layer importing a higher one fails the suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    lint = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([lint, "--config", str(root / "pyproject.toml"), "--no-cache"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_the_package_keeps_its_layer_contract() -> None:
    res = _lint(ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "4 kept, 0 broken" in res.stdout


@pytest.mark.parametrize(("module", "line"), [
    ("reasearch/engine/exec.py", "import reasearch.runs.store  # deliberate violation\n"),
    ("reasearch/evaluators/spec.py", "from reasearch.agent import loop  # deliberate violation\n"),
    ("reasearch/native/lp.py", "import reasearch.engine  # deliberate violation\n"),
    ("reasearch/models/base.py", "import reasearch.runs  # deliberate violation\n"),
    ("reasearch/agent/loop.py", "import reasearch.fleets  # deliberate violation\n"),
    ("reasearch/methods/evolve.py", "import reasearch.agent.loop  # deliberate violation\n"),
    ("reasearch/agent/loop.py", "import reasearch.methods.evolve  # deliberate violation\n"),
    ("reasearch/adapters/_rank.py", "import reasearch.agent.loop  # deliberate violation\n"),
    ("reasearch/evaluators/spec.py", "import reasearch.adapters  # deliberate violation\n"),
    ("reasearch/ast_lock.py", "import reasearch.errors  # deliberate violation\n"),
])
def test_a_lower_layer_importing_a_higher_one_fails_the_contract(tmp_path: Path, module: str, line: str) -> None:
    shutil.copytree(ROOT / "reasearch", tmp_path / "reasearch",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    src = target.read_text()
    head, sep, rest = src.partition("from __future__ import annotations\n")
    target.write_text(head + sep + line + rest)
    res = _lint(tmp_path)
    assert res.returncode != 0, res.stdout
    assert "BROKEN" in res.stdout
