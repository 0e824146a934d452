"""Hostile training candidates against whole experiments (budget, disk) and the trusted scoring reads.

Each test's docstring says what the attacker tries. Assertions are on recorded decisions (status, the
budget signal's time, the hard limit, the errors the job saw), never on how fast the machine is.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from reasearch.engine.protocol import Status
from reasearch.engine.training import JobOutcome
from reasearch.evaluators import training
from reasearch.evaluators.kinds import ExperimentOptions
from reasearch.evaluators.repo import encode_repo
from reasearch.evaluators.testing import ToyRepoTrainingTask
from tests.engine.conftest import MODES, needs_mode


def _repo(train: str) -> str:
    return encode_repo({"train.py": textwrap.dedent(train), "settings.json": '{"x": 3.0, "sleep_s": 0}'})


def test_the_save_grace_is_min_of_grace_and_max_of_10_s_and_5_percent_of_the_budget() -> None:
    """The rule the next test applies with a lowered floor: a generous grace_s never buys training time."""
    assert training.save_grace_s(1.0, 30.0) == 10.0  # the 10 s floor, not the 30 s asked for
    assert training.save_grace_s(1000.0, 30.0) == 30.0  # 5% of the budget, capped by grace_s
    assert training.save_grace_s(400.0, 30.0) == 20.0
    assert training.save_grace_s(1.0, 4.0) == 4.0  # grace_s below the floor wins


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", MODES)
def test_training_25_s_past_a_1_s_budget_with_a_30_s_grace_is_a_timeout(experiment_root: Path, mode: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's attack: a generous grace_s (30 s) taken as training time. train.py catches the
    budget's SIGTERM and keeps training 25 s past its 1 s budget, then saves a perfect answer.

    The save grace's floor (10 s; the rule itself is checked above) is lowered to 2 s here, so the run is
    killed at 1 + min(30, max(2, 5% of 1)) = 3 s instead of 11 s: the same rule, 8 s less of the suite's time
    per mode (issue 27 item 5). The attack still runs 22 s past the kill, so only the kill can stop it."""
    needs_mode(mode)
    monkeypatch.setattr(training, "_SAVE_GRACE_MIN_S", 2.0)
    task = ToyRepoTrainingTask(time_budget_s=1.0, grace_s=30.0, sandbox_mode=mode)
    res = task.evaluate(_repo("""
        import json, os, signal, time
        signal.signal(signal.SIGTERM, lambda *a: print("got SIGTERM, training on", flush=True))
        t0 = time.time()
        while time.time() - t0 < 25:
            time.sleep(0.05)
        json.dump({"x": 3.0}, open(os.path.join(os.environ["REASEARCH_OUT_DIR"], "x.json"), "w"))
    """), options=ExperimentOptions(str(experiment_root / "own")))
    assert res.status is Status.TIMEOUT and res.score is None, res.feedback
    m = res.metrics
    assert m["time_budget_s"] == 1.0 and m["hard_limit_s"] == 3.0  # budget + min(30, max(2, 5% of 1 s))
    assert m["budget_signal_s"] is not None and 1.0 <= m["budget_signal_s"] < 3.0
    assert "got SIGTERM, training on" in (experiment_root / "own" / "train.log").read_text()
    assert "did not end within its budget" in res.feedback


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", MODES)
def test_a_run_that_saves_at_the_budget_signal_is_scored(experiment_root: Path, mode: str) -> None:
    """The honest pattern under the new rule: train until SIGTERM, save, exit within the save grace."""
    needs_mode(mode)
    task = ToyRepoTrainingTask(time_budget_s=2.0, grace_s=30.0, sandbox_mode=mode)
    res = task.evaluate(_repo("""
        import json, os, signal, sys, time
        def save(*a):
            json.dump({"x": 3.0}, open(os.path.join(os.environ["REASEARCH_OUT_DIR"], "x.json"), "w"))
            sys.exit(0)
        signal.signal(signal.SIGTERM, save)
        while True:
            time.sleep(0.05)
    """))
    assert res.status is Status.OK and res.score == 0.0, res.feedback
    assert res.metrics["budget_signal_s"] is not None and res.metrics["budget_signal_s"] >= 2.0


_FILLS_THE_DISK = """
    import errno, json, os, signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    out = os.environ["REASEARCH_OUT_DIR"]
    json.dump({"x": 3.0}, open(os.path.join(out, "x.json"), "w"))
    report = {"size_mb": os.statvfs(out).f_blocks * os.statvfs(out).f_frsize / 2**20, "written_mb": 0}
    try:
        for i in range(64):  # 64 MB in 1 MB fallocated files, each under the per-file limit
            fd = os.open(os.path.join(out, f"f{i}"), os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, 1 << 20)
            finally:
                os.close(fd)
            report["written_mb"] += 1
    except OSError as exc:
        report["error"] = errno.errorcode[exc.errno]
    print(json.dumps({"disk": report}), flush=True)
"""


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", MODES)
def test_fallocate_past_the_experiment_cap_fails_and_the_host_disk_is_untouched(
        experiment_root: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """train.py fallocates file after file (each under RLIMIT_FSIZE) in its output folder to fill the
    host's disk (the issue's 11 GB); with an 8 MB cap the ninth megabyte must fail, on a filesystem
    that is the experiment's own, not the host disk."""
    needs_mode(mode)
    if os.geteuid() != 0:
        pytest.skip("the hard cap is a tmpfs mount, which needs root (without it the checked quota applies: "
                    "tests/engine/test_training_jobs_hostile.py::test_writes_past_the_disk_quota_are_bounded)")
    monkeypatch.setenv("REASEARCH_EXPERIMENT_MAX_MB", "8")
    task = ToyRepoTrainingTask(time_budget_s=30.0, grace_s=5.0, sandbox_mode=mode)
    own = experiment_root / "own"
    res = task.evaluate(_repo(_FILLS_THE_DISK), options=ExperimentOptions(str(own)))
    lines = [json.loads(line) for line in (own / "train.log").read_text().splitlines() if line.startswith('{"disk"')]
    assert lines, (own / "train.log").read_text()
    disk = lines[0]["disk"]
    assert disk["error"] == "ENOSPC" and disk["written_mb"] < 8, disk
    assert disk["size_mb"] <= 8, f"the output folder lies on a {disk['size_mb']:.0f} MB filesystem: the host disk"
    assert res.status is Status.OK, res.feedback  # the job handled the error; its answer still scores
    assert not list((experiment_root / "experiments").glob("exp-*")), "the experiment folder was left"


class _FakeJob:
    """Stands in for the inference job: leaves a hostile logits.npy where the real one would be."""

    def __init__(self, make: Any) -> None:
        self.make = make

    def __call__(self, argv: list[str], **kw: Any) -> JobOutcome:
        folder = Path(kw["cwd"])
        self.make(folder / "logits.npy")
        return JobOutcome(Status.OK, 0, None, 0.1, 0.1, 0.0, "cpu", "process", str(folder / "infer.log"), "")


def _object_npy(path: Path) -> None:
    np.save(path, np.array([{"payload": 1}], dtype=object), allow_pickle=True)


def _truncated_npy(path: Path) -> None:
    np.save(path, np.zeros((4, 8, 256), dtype=np.float32))
    path.write_bytes(path.read_bytes()[:-100])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("make, why", [
    (os.mkfifo, "FIFO"),
    (_object_npy, "Python objects"),
    (_truncated_npy, "truncated"),
    (lambda p: p.symlink_to("/dev/zero"), "symlink"),
])
def test_hostile_logits_are_invalid_and_never_hang_the_scorer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              make: Any, why: str) -> None:
    """The candidate's model.py runs in the inference jail, whose folder it can write: it leaves a FIFO
    (np.load would block forever), a pickled object array, a truncated array or a symlink to /dev/zero
    as logits.npy."""
    from reasearch.evaluators.nanogpt import task as nanogpt_task

    monkeypatch.setattr(nanogpt_task, "run_job", _FakeJob(make))
    task = nanogpt_task.NanoGPTTask(time_budget_s=3.0, grace_s=5.0, eval_tokens=1024)
    folder = tmp_path / "eval0"
    lease = SimpleNamespace(gpu=False)
    out = task._infer(folder, np.zeros((4, 8), dtype=np.uint8), __file__, tmp_path, tmp_path, lease,  # type: ignore[arg-type]
                      tmp_path / "infer.log")
    assert not isinstance(out, np.ndarray)
    assert out.status is Status.INVALID and "no readable logits.npy" in out.feedback, out.feedback  # reason withheld
    from reasearch.engine.files import UntrustedFileError, read_npy

    if (folder / "logits.npy").exists() or (folder / "logits.npy").is_symlink():
        with pytest.raises(UntrustedFileError, match=why):  # what the reader refused it for
            read_npy(folder, "logits.npy", dtype="<f4", shape=(4, 8, 256))


@pytest.mark.parametrize("variable", ["REASEARCH_DATA_CACHE", "REASEARCH_EXPERIMENTS_DIR"])
def test_a_planted_symlink_at_the_cache_or_experiment_root_is_refused_and_its_target_untouched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    """Another user plants a symlink at the predictable corpus-cache or experiment-root path (a shared
    /var/tmp-like folder), pointing at a folder of theirs: root used to follow it, chmod the target
    0755 and write the held-out split (or the experiments) into it."""
    from reasearch.evaluators import training
    from reasearch.evaluators.nanogpt import _data

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    target = tmp_path / "attacker"
    target.mkdir(mode=0o700)
    (shared / "planted").symlink_to(target)
    monkeypatch.setenv(variable, str(shared / "planted"))
    text = tmp_path / "corpus.txt"
    text.write_bytes(bytes(range(256)) * 64)
    _data.load_corpus.cache_clear()
    with pytest.raises(Exception, match="symlink"):
        if variable == "REASEARCH_DATA_CACHE":
            _data.load_corpus(str(text))
        else:
            training.experiments_root()
    _data.load_corpus.cache_clear()
    assert oct(target.stat().st_mode & 0o777) == oct(0o700) and list(target.iterdir()) == []


@pytest.mark.parametrize(("task_id", "params", "public"), [
    ("img/folder-v2", {"data": "digits"}, True), ("img/folder-v2", {}, False), ("tabular/csv-v2", {}, False),
    ("rl/Hopper-v5-v2", {}, False), ("atari/qbert-v1", {}, False), ("nanogpt/v2", {}, False),
    ("nanogpt/v2", {"corpus": "shakespeare"}, True), ("nanogpt/v2", {"corpus": "stdlib"}, True)])
def test_every_training_result_states_whether_its_held_out_data_is_public(
        experiment_root: Path, task_id: str, params: dict[str, Any], public: bool) -> None:
    """Issue 36 item 1: every result says ``heldout_public``, and a public one never says ``sealed``, even a
    result that never ran (here: not a repository). RL and Atari score episodes of a public simulator whose
    seeds come from the secret: not public. A task that states nothing (the toy) gets neither key."""
    from reasearch import make

    bad = json.dumps({"format": "reasearch-repo/1", "files": {"../escape.py": "x"}})  # refused before running
    res = make(task_id, **params).evaluate(bad)
    assert res.status is Status.INVALID and "not a repository candidate" in res.feedback
    assert res.metrics["heldout_public"] is public
    assert res.metrics["sealed"] is (not public)
    toy = ToyRepoTrainingTask().evaluate(bad)
    assert "heldout_public" not in toy.metrics and "sealed" not in toy.metrics
