"""Experiment scratch folders: removed once scored, kept on request, pruned when their driver died, and
never removed through a symlink the candidate planted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from reasearch.evaluators import training
from reasearch.evaluators.kinds import ExperimentOptions
from reasearch.evaluators.repo import encode_repo
from reasearch.evaluators.testing import ToyRepoTrainingTask
from reasearch.evaluators.training import prune_experiments


@pytest.fixture()
def root(experiment_root: Path) -> Path:
    return experiment_root


def _victim(base: Path) -> Path:
    victim = base / "victim"
    (victim / "inner").mkdir(parents=True)
    (victim / "precious.txt").write_text("keep me")
    (victim / "inner" / "also.txt").write_text("keep me too")
    return victim


def _victim_intact(victim: Path) -> bool:
    return (victim / "precious.txt").read_text() == "keep me" and (victim / "inner" / "also.txt").is_file()


_HOSTILE_TRAIN = '''
import json, os
out = os.environ["REASEARCH_OUT_DIR"]
victim = json.load(open("settings.json"))["victim"]
os.symlink(victim, os.path.join(out, "to-victim"))
os.symlink(os.path.join(victim, "precious.txt"), os.path.join(out, "to-file"))
deep = out
for i in range(50):
    deep = os.path.join(deep, "d")
    os.mkdir(deep)
os.symlink(victim, os.path.join(deep, "deep-link"))
locked = os.path.join(out, "locked")
os.mkdir(locked)
open(os.path.join(locked, "f"), "w").write("x")
os.symlink(victim, os.path.join(locked, "link"))
os.chmod(locked, 0)
json.dump({"x": 3.0}, open(os.path.join(out, "x.json"), "w"))
'''


def _hostile(victim: Path) -> str:
    return encode_repo({"train.py": _HOSTILE_TRAIN, "settings.json": f'{{"victim": "{victim}"}}'})


def test_the_scratch_folder_goes_once_scored_and_a_planted_symlink_is_never_followed(root: Path) -> None:
    victim = _victim(root)
    task = ToyRepoTrainingTask(sandbox_mode="process")
    own = root / "run" / "experiments" / "step-00001"
    res = task.evaluate(_hostile(victim), options=ExperimentOptions(str(own)))
    assert res.status.value == "OK", res.feedback
    assert _victim_intact(victim), "removing the scratch folder followed a symlink the candidate planted"
    assert not list((root / "experiments").glob("exp-*")), "the scratch folder (repository, checkpoints) was kept"
    # What the agent needs stays in the caller's folder: the whole log and the last status.
    assert (own / "train.log").is_file() and res.metrics["log_path"] == str(own / "train.log")
    assert '"state": "done"' in (own / "status.json").read_text()
    assert res.metrics["experiment_dir"] is None


def test_keep_checkpoints_keeps_the_folder_and_pruning_leaves_it(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REASEARCH_KEEP_CHECKPOINTS", "1")
    task = ToyRepoTrainingTask(sandbox_mode="process")
    files = {**task.seed_files(), "settings.json": '{"x": 2.0, "sleep_s": 0}'}
    res = task.evaluate(encode_repo(files))
    assert res.status.value == "OK", res.feedback
    kept = Path(res.metrics["experiment_dir"])
    assert (kept / "out" / "x.json").is_file() and (kept / "KEEP").is_file()
    assert prune_experiments(root / "experiments") == [] and kept.is_dir()


_HOLDER = textwrap.dedent("""
    import sys, time
    from reasearch.evaluators.training import _new_experiment_folder
    folder, fd = _new_experiment_folder()
    (folder / "out").mkdir()
    print(folder, flush=True)
    time.sleep(300)
""")


def _holder() -> tuple[subprocess.Popen[str], Path]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER], stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    assert proc.stdout is not None
    return proc, Path(proc.stdout.readline().strip())


def test_prune_removes_dead_drivers_folders_and_nothing_else(root: Path) -> None:
    exp_root = root / "experiments"
    exp_root.mkdir(mode=0o711)
    victim = _victim(root)
    live, live_dir = _holder()
    dead, dead_dir = _holder()
    try:
        os.kill(dead.pid, signal.SIGKILL)
        dead.wait()
        # The dead driver's candidate had planted links and a locked folder in its checkpoints.
        (dead_dir / "out" / "to-victim").symlink_to(victim)
        locked = dead_dir / "out" / "locked"
        locked.mkdir()
        (locked / "link").symlink_to(victim / "precious.txt")
        locked.chmod(0)
        planted = exp_root / "exp-20200101-000000-planted"  # a symlink where a folder should be
        planted.symlink_to(victim)
        legacy_old = exp_root / "exp-20200101-000000-legacy"  # no lock (an older version), a day old
        legacy_old.mkdir()
        os.utime(legacy_old, (time.time() - 2 * 86400,) * 2)
        legacy_new = exp_root / "exp-20200101-000000-recent"
        legacy_new.mkdir()
        half = exp_root / ".new-0123456789abcdef"  # being set up right now
        half.mkdir()
        data = exp_root / "toy-data"
        data.mkdir()
        removed = prune_experiments(exp_root)
        assert sorted(removed) == sorted([dead_dir.name, planted.name, legacy_old.name])
        assert not dead_dir.exists() and not planted.is_symlink() and not legacy_old.exists()
        assert live_dir.is_dir() and legacy_new.is_dir() and half.is_dir() and data.is_dir()
        assert _victim_intact(victim)
    finally:
        live.kill()
        live.wait()
        for p in (live, dead):
            assert p.stdout is not None
            p.stdout.close()
    assert prune_experiments(exp_root) == [live_dir.name]  # its holder is gone now


def test_the_first_experiment_of_a_process_prunes(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exp_root = root / "experiments"
    exp_root.mkdir(mode=0o711)
    dead, dead_dir = _holder()
    os.kill(dead.pid, signal.SIGKILL)
    dead.wait()
    assert dead.stdout is not None
    dead.stdout.close()
    monkeypatch.setattr(training, "_pruned", set())  # as in a fresh process
    task = ToyRepoTrainingTask(sandbox_mode="process")
    res = task.evaluate(encode_repo({**task.seed_files(), "settings.json": '{"x": 2.0, "sleep_s": 0}'}))
    assert res.status.value == "OK" and not dead_dir.exists()
