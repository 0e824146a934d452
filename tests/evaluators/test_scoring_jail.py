"""The scoring jails' shared harness module (``evaluators/_scoring_jail.py``): it travels with the three
scoring harnesses into the jail's code copy, it is bound before any candidate code runs, and the report it
writes holds only a step, a built-in class and a place in the repository."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from reasearch.engine._runtime import code_copy_files

ROOT = Path(__file__).resolve().parents[2] / "reasearch"
# The fixed harnesses the training tasks copy into a scoring folder and run there by path.
HARNESSES = ("evaluators/img/_infer.py", "evaluators/nanogpt/_infer.py", "evaluators/rl/_policy_server.py")


@pytest.mark.parametrize("harness", HARNESSES)
def test_every_module_a_scoring_harness_imports_is_in_the_jails_code_copy(harness: str) -> None:
    copied = {str(f.relative_to(ROOT)) for f in code_copy_files()}
    tree = ast.parse((ROOT / harness).read_text())
    wanted = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
              and n.module.split(".")[0] == "reasearch"]
    assert "reasearch.evaluators._scoring_jail" in wanted  # the test is not vacuous
    for module in wanted:
        rel = "/".join(module.split(".")[1:]) + ".py"
        assert rel in copied, f"{harness} imports {module}, which the jail's code copy lacks"
    assert harness not in copied  # the harness itself is copied into the scoring folder, not the code copy


def _img_request(tmp_path: Path, repo: Path) -> Path:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    np.savez(ckpt / "weights.npz", w=np.zeros((4, 2), dtype=np.float32))
    folder = tmp_path / "eval"
    folder.mkdir()
    np.save(folder / "inputs.npy", np.zeros((3, 2, 2, 1), dtype=np.uint8), allow_pickle=False)
    req = {"repo": str(repo), "ckpt": str(ckpt), "inputs": str(folder / "inputs.npy"),
           "out": str(folder / "predictions.npy"), "report": str(folder / "error.json"), "batch": 2}
    (folder / "request.json").write_text(json.dumps(req))
    return folder


def test_a_repository_shadowing_the_shared_module_cannot_write_the_report(tmp_path: Path) -> None:
    """The candidate's repository ships its own ``reasearch`` package whose ``write_report`` forges a harmless
    looking report: the harness bound the real one from the code copy before the repository was on sys.path."""
    repo = tmp_path / "repo"
    shadow = repo / "reasearch" / "evaluators"
    shadow.mkdir(parents=True)
    (repo / "reasearch" / "__init__.py").write_text("")
    (shadow / "__init__.py").write_text("")
    (shadow / "_scoring_jail.py").write_text(
        "import json\n"
        "def write_report(path, repo, step, exc):\n"
        "    json.dump({'step': 'output', 'type': 'forged', 'where': None}, open(path, 'w'))\n")
    (repo / "model.py").write_text("import sys\nraise KeyError('held-out bytes')\n")
    folder = _img_request(tmp_path, repo)
    harness = folder / "_infer.py"
    harness.write_text((ROOT / "evaluators" / "img" / "_infer.py").read_text())
    env = {**os.environ, "PYTHONPATH": str(ROOT.parent)}
    proc = subprocess.run([sys.executable, str(harness), str(folder / "request.json")], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    report = json.loads((folder / "error.json").read_text())
    assert report == {"step": "import", "type": "KeyError", "subclass": False, "where": ["model.py", 2]}
    assert "held-out bytes" not in (folder / "error.json").read_text()  # the message stays in the host log
    assert "held-out bytes" in proc.stderr


def test_the_report_names_the_builtin_parent_and_the_innermost_repository_frame(tmp_path: Path) -> None:
    from reasearch.evaluators._scoring_jail import write_report

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "model.py").write_text("class Odd(ValueError):\n    pass\n\n\ndef build():\n    raise Odd('secret')\n")
    namespace: dict[str, object] = {}
    exec(compile((repo / "model.py").read_text(), str(repo / "model.py"), "exec"), namespace)  # noqa: S102
    try:
        namespace["build"]()  # type: ignore[operator]
    except ValueError as exc:
        write_report(str(tmp_path / "error.json"), str(repo), "build", exc)
    report = json.loads((tmp_path / "error.json").read_text())
    assert report == {"step": "build", "type": "ValueError", "subclass": True, "where": ["model.py", 6]}
