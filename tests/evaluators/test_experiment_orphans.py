"""A hostile train.py (process mode) double-forks a daemon of the job's uid, which inherits the slot lease; its
driver is then killed with -9: the job dies with the driver, the daemon does not. Pruning the dead experiment's
folder (what the next experiment of any process, or a resume that records it interrupted, does) ends the daemon,
so the slot is free again and nothing of the job runs on (the chaos soak's check ``nothing_left_behind`` and a
hand-run attack found the slot held for good before)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reasearch.engine.gpu import slot_status
from reasearch.evaluators.training import prune_experiments

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="process-mode training jobs need root (a uid of their own)")

_TRAIN = '''import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # the daemon: the job's uid, the lease descriptor the job inherited
        with open(os.path.join(os.environ["REASEARCH_OUT_DIR"], "daemon.pid"), "w") as f:
            f.write(str(os.getpid()))
        time.sleep(300)
        os._exit(0)
    os._exit(0)
time.sleep(300)
'''
_DRIVER = f'''
from reasearch.evaluators.repo import encode_repo
from reasearch.evaluators.testing import ToyRepoTrainingTask
ToyRepoTrainingTask(sandbox_mode="process", time_budget_s=60.0).evaluate(encode_repo({{"train.py": {_TRAIN!r}}}))
'''


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def test_a_daemon_of_a_killed_drivers_job_is_ended_when_its_folder_is_pruned(experiment_root: Path) -> None:
    experiments = experiment_root / "experiments"
    driver = subprocess.Popen([sys.executable, "-c", _DRIVER], start_new_session=True, env=dict(os.environ))
    daemon = 0
    try:
        deadline = time.monotonic() + 120
        while not daemon:
            marks = list(experiments.glob("exp-*/out/daemon.pid"))
            text = marks[0].read_text() if marks else ""
            daemon = int(text) if text.isdigit() else 0
            assert driver.poll() is None and time.monotonic() < deadline, "the daemon never started"
            time.sleep(0.05)
        os.killpg(driver.pid, signal.SIGKILL)  # the driver dies; its job with it (parent-death signal)
        driver.wait()
        time.sleep(0.5)
        assert _alive(daemon), "the daemon died with the driver: nothing to test"
        assert not all(s["free"] for s in slot_status("gpu")), "the daemon holds the slot lease it inherited"
        pruned = prune_experiments(experiments)
        assert len(pruned) == 1 and pruned[0].startswith("exp-")
        deadline = time.monotonic() + 30
        while _alive(daemon) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(daemon), "the dead driver's job left a daemon running"
        assert all(s["free"] for s in slot_status("gpu")), "the slot stayed leased"
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        if daemon and _alive(daemon):
            os.kill(daemon, signal.SIGKILL)
