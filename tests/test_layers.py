"""The layer contract (pyproject.toml, one ``layers`` contract; docs/architecture.md) is checked by import-linter.

Part of the default ``pytest`` run, so a lower layer importing a higher one fails the suite; and every package
and top-level module under ``reasearch/`` must sit in a layer, so a new package cannot live outside the contract.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
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
    assert "1 kept, 0 broken" in res.stdout


def placed_in_layers(pyproject: Path) -> set[str]:
    """Every module a ``layers`` contract of ``pyproject`` names (``a | b`` and ``a : b`` name both)."""
    config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    placed: set[str] = set()
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract["type"] == "layers":
            for row in contract["layers"]:
                placed |= {name.strip() for part in row.split("|") for name in part.split(":")}
    return placed


def outside_the_layers(root: Path) -> list[str]:
    """The packages and top-level modules of ``root/reasearch`` that no layer names (the root package itself,
    which holds only the lazy public names, is the container, not a layer)."""
    pkg = root / "reasearch"
    children = {f"reasearch.{p.name}" for p in pkg.iterdir()  # a folder of modules without __init__.py too
                if p.is_dir() and p.name != "__pycache__" and any(p.rglob("*.py"))}
    children |= {f"reasearch.{p.stem}" for p in pkg.glob("*.py") if p.name != "__init__.py"}
    return sorted(children - placed_in_layers(root / "pyproject.toml"))


def test_every_package_and_top_level_module_sits_in_a_layer() -> None:
    assert outside_the_layers(ROOT) == []


def test_a_package_in_no_layer_is_reported(tmp_path: Path) -> None:
    (tmp_path / "reasearch" / "newpkg").mkdir(parents=True)
    (tmp_path / "reasearch" / "newpkg" / "__init__.py").write_text("")
    (tmp_path / "reasearch" / "loose.py").write_text("")
    (tmp_path / "reasearch" / "data").mkdir()  # a folder of no module is no package
    (tmp_path / "reasearch" / "data" / "table.json").write_text("{}")
    (tmp_path / "reasearch" / "loose_dir").mkdir()  # a namespace package (no __init__.py) is one
    (tmp_path / "reasearch" / "loose_dir" / "x.py").write_text("")
    (tmp_path / "reasearch" / "__init__.py").write_text("")
    (tmp_path / "reasearch" / "errors.py").write_text("")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    assert outside_the_layers(tmp_path) == ["reasearch.loose", "reasearch.loose_dir", "reasearch.newpkg"]


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
    # the rows this contract added (issue 42): each is a real mistake someone could make
    ("reasearch/engine/exec.py", "import reasearch.hostfs  # deliberate violation\n"),  # not in the jail's copy
    ("reasearch/hostfs/host_git.py", "import reasearch.evaluators  # deliberate violation\n"),
    ("reasearch/models/base.py", "import reasearch.engine  # deliberate violation\n"),
    ("reasearch/models/base.py", "import reasearch.evaluators.spec  # deliberate violation\n"),
    ("reasearch/native/lp.py", "import reasearch.models  # deliberate violation\n"),
    ("reasearch/usage.py", "import reasearch.errors  # deliberate violation\n"),
    ("reasearch/errors.py", "import reasearch.engine  # deliberate violation\n"),
    ("reasearch/runs/run.py", "import reasearch.adapters  # deliberate violation\n"),
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
