"""The engine's module structure: the in-jail worker loads only its own modules; no import cycles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]

# The worker's own modules (and the package root, which every import of a subpackage runs).
WORKER_MODULES = {
    "reasearch", "reasearch.errors", "reasearch.engine", "reasearch.engine._worker", "reasearch.engine._supervisor",
    "reasearch.engine._child", "reasearch.engine._pump", "reasearch.engine._privilege", "reasearch.engine._procs",
    "reasearch.engine._cleanup", "reasearch.engine._spin", "reasearch.engine._wire", "reasearch.engine._zygote",
    "reasearch.engine._scratch", "reasearch.engine._forking", "reasearch.engine._proc_tree",  # the supervisor's parts
}


def test_the_worker_imports_only_its_own_modules() -> None:
    code = ("import json, sys, reasearch.engine._worker; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('reasearch'))))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, cwd=ROOT)
    loaded = set(json.loads(out.stdout))
    assert loaded == WORKER_MODULES, sorted(loaded ^ WORKER_MODULES)


def test_engine_modules_form_no_import_cycle() -> None:
    graph = grimp.build_graph("reasearch", include_external_packages=False)
    engine = {m for m in graph.modules if m.startswith("reasearch.engine.")}
    edges = {m: {d for d in graph.find_modules_directly_imported_by(m) if d in engine} for m in engine}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(m: str, stack: list[str]) -> bool:
        state[m] = 1
        stack.append(m)
        for d in sorted(edges[m]):
            if state.get(d) == 1:
                cycle.extend(stack[stack.index(d):] + [d])
                return True
            if d not in state and visit(d, stack):
                return True
        stack.pop()
        state[m] = 2
        return False

    for m in sorted(engine):
        if m not in state and visit(m, []):
            break
    assert cycle == [], " -> ".join(cycle)


def test_public_names_stay_importable() -> None:
    import reasearch.engine as engine
    from reasearch.engine import config, sandbox

    for name in engine.__all__:
        assert getattr(engine, name) is not None
    assert sandbox.SandboxConfig is config.SandboxConfig  # old import paths keep working
    assert sandbox.SandboxMode is config.SandboxMode


def test_the_supervisor_holds_its_parts_instead_of_inheriting_them() -> None:
    """Issue 42 item 3c: the worker is a Supervisor holding three objects, not one class over four files."""
    from reasearch.engine._forking import ChildForks
    from reasearch.engine._proc_tree import ProcessTree
    from reasearch.engine._scratch import ScratchFolders
    from reasearch.engine._supervisor import Supervisor

    for cls in (Supervisor, ChildForks, ProcessTree, ScratchFolders):
        assert cls.__mro__ == (cls, object), cls
    for part in ("_forking", "_proc_tree", "_scratch"):  # no part declares attributes another class sets
        assert "set by ``Supervisor.__init__``" not in (ROOT / "reasearch" / "engine" / f"{part}.py").read_text()
