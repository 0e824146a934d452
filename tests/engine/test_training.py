"""The training runner: budget in the environment, hard kill at budget + grace, streamed log, metrics,
the slot held exactly as long as the job, and no job outliving a driver killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from reasearch.engine.gpu import SlotBusyError, lease_slot
from reasearch.engine.protocol import Status
from reasearch.engine.training import run_job
from tests.engine.conftest import MODES, needs_mode

SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    print("budget", os.environ["REASEARCH_TIME_BUDGET_S"], "gpu", repr(os.environ.get("CUDA_VISIBLE_DEVICES")),
          "cores", sorted(os.sched_getaffinity(0)), flush=True)
    for i in range(3):
        print(json.dumps({"step": i, "loss": 3.0 - i}), flush=True)
    print("not json {", flush=True)
    print("[1, 2]", flush=True)
    mode = sys.argv[1]
    if mode == "spin":  # ignores its budget, and the budget's SIGTERM too
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open(os.path.join(os.environ["OUT"], "pid"), "w").write(str(os.getpid()))
        while True:
            pass
    if mode == "flood":
        chunk = "x" * 65536
        for _ in range(64):
            sys.stdout.write(chunk)
    if mode == "write":
        open(os.path.join(os.environ["OUT"], "ckpt.txt"), "w").write("saved")
        try:
            open(os.path.join(os.getcwd(), "sneaky.txt"), "w").write("no")
            print("REPO-WRITABLE")
        except OSError:
            print("repo is read-only")
    sys.exit(3 if mode == "fail" else 0)
""")


@pytest.fixture()
def job_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    base = Path("/var/tmp") / f"reasearch-test-training-{os.getpid()}-{time.monotonic_ns()}"
    base.mkdir(mode=0o755)
    repo, out = base / "repo", base / "out"
    repo.mkdir(mode=0o755)
    out.mkdir()
    (repo / "train.py").write_text(SCRIPT)
    monkeypatch.setenv("REASEARCH_LEASE_DIR", str(tmp_path_factory.mktemp("leases")))
    monkeypatch.setenv("REASEARCH_FAKE_GPUS", "1")
    yield repo, out
    import shutil

    shutil.rmtree(base, ignore_errors=True)


def _run(repo: Path, out: Path, mode: str, arg: str, budget: float = 5.0, grace: float = 1.0, **kw: object):
    with lease_slot("gpu", wait_s=5) as lease:
        return run_job(["python3", "train.py", arg], cwd=repo, lease=lease, time_budget_s=budget, grace_s=grace,
                       log_path=repo.parent / f"{arg}.log", binds_ro=[repo], binds_rw=[out], env={"OUT": str(out)},
                       memory_mb=2048, mode=mode, **kw)


@pytest.mark.parametrize("mode", MODES)
def test_a_job_gets_its_budget_and_slot_and_its_metrics_are_parsed(job_dirs: tuple[Path, Path], mode: str) -> None:
    needs_mode(mode)
    repo, out = job_dirs
    job = _run(repo, out, mode, "write")
    assert job.status is Status.OK, job.log_tail
    log = Path(job.log_path).read_text()
    assert "budget 5 gpu '0'" in log  # the fake GPU's index is what CUDA_VISIBLE_DEVICES names
    assert [m["step"] for m in job.metrics] == [0, 1, 2] and job.metrics[0]["loss"] == 3.0
    assert all(m["_t"] >= 0 for m in job.metrics) and job.first_metric_s is not None
    assert (out / "ckpt.txt").read_text() == "saved"
    assert job.gpu_s == pytest.approx(job.wall_s) and job.sandbox_mode == mode
    if mode == "nsjail":
        assert "repo is read-only" in log and not (repo / "sneaky.txt").exists()
    failed = _run(repo, out, mode, "fail")
    assert failed.status is Status.CRASH and failed.exit_code == 3


@pytest.mark.parametrize("mode", MODES)
def test_a_job_that_ignores_its_budget_is_killed_at_the_hard_limit_and_its_slot_released(
        job_dirs: tuple[Path, Path], mode: str) -> None:
    needs_mode(mode)
    repo, out = job_dirs
    t0 = time.monotonic()
    # budget 1 s: the SIGTERM finds its SIG_IGN set, even on a busy machine; grace 0.5 s: the kill is what is shown
    job = _run(repo, out, mode, "spin", budget=1.0, grace=0.5)
    assert job.status is Status.TIMEOUT and job.hard_limit_s == 1.5
    assert 1.5 <= job.wall_s < 30 and time.monotonic() - t0 < 60
    assert "killed at the hard limit" in Path(job.log_path).read_text()
    pid = int((out / "pid").read_text())
    if mode == "process":  # (in a jail the pid is the namespace's; the jail is gone with its init)
        assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    lease = lease_slot("gpu", wait_s=0)  # free again at once
    lease.release()


def test_the_log_is_capped_and_the_job_never_blocks_on_output(job_dirs: tuple[Path, Path]) -> None:
    repo, out = job_dirs
    job = _run(repo, out, "process", "flood", log_cap_bytes=100_000)
    assert job.status is Status.OK
    text = Path(job.log_path).read_text()
    assert len(text) < 101_000 and "dropped past the 100000 byte log cap" in text


_DRIVER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from reasearch.engine.gpu import lease_slot
    from reasearch.engine.training import run_job
    repo, out, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    lease = lease_slot("gpu", wait_s=5)
    run_job(["python3", "train.py", "spin"], cwd=repo, lease=lease, time_budget_s=120, grace_s=1,
            log_path=repo.parent / "driver.log", binds_ro=[repo], binds_rw=[out], env={"OUT": str(out)},
            memory_mb=2048, mode=mode)
""")


def _spinning(repo: Path) -> list[int]:
    """Host pids of processes running this test's spinning train.py."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            continue
        if b"train.py" in cmd and b"spin" in cmd and cwd == str(repo):
            pids.append(int(name))
    return pids


def _children() -> dict[int, str]:
    from reasearch.engine._procs import process_table

    return {pid: row[3] for pid, row in process_table().items() if row[0] == os.getpid()}


def _reap_new_children(before: set[int], timeout_s: float = 15.0) -> None:
    """The engine made this process a child subreaper: the killed driver's orphans come back here."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        new = {p: st for p, st in _children().items() if p not in before}
        if not new:
            return
        for pid, st in new.items():
            if st == "Z":
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
        time.sleep(0.05)
    raise AssertionError(f"the killed driver left processes running: {_children()}")


@pytest.mark.parametrize("mode", MODES)
def test_kill_9_of_the_driver_kills_the_job_and_frees_the_slot(job_dirs: tuple[Path, Path], mode: str) -> None:
    needs_mode(mode)
    repo, out = job_dirs
    before = set(_children())
    driver = subprocess.Popen([sys.executable, "-c", _DRIVER, str(repo), str(out), mode], env=dict(os.environ))
    try:
        deadline = time.monotonic() + 60
        while not (out / "pid").exists():
            assert time.monotonic() < deadline and driver.poll() is None, "the job never started"
            time.sleep(0.05)
        assert _spinning(repo), "the spinning job is not visible"
        with pytest.raises(SlotBusyError):
            lease_slot("gpu", wait_s=0)
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 20
        while _spinning(repo) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _spinning(repo) == [], "the job outlived its driver"
        lease = lease_slot("gpu", wait_s=10)
        lease.release()
    finally:
        driver.kill()
        driver.wait()
        _reap_new_children(before)


def test_metric_lines_after_a_carriage_return_progress_line_are_parsed(job_dirs: tuple[Path, Path]) -> None:
    """A tqdm-style progress bar ends its lines with \\r only; the metric lines after it are still read."""
    repo, out = job_dirs
    (repo / "train.py").write_text(textwrap.dedent("""
        import json, sys
        sys.stdout.write("epoch 1:  50%|#####     |\\r")
        sys.stdout.write(json.dumps({"step": 0, "loss": 2.5}) + "\\r")
        sys.stdout.write("epoch 1: 100%|##########|\\r" + json.dumps({"step": 1, "loss": 2.0}) + "\\r\\n")
        sys.stdout.write(json.dumps({"step": 2, "loss": 1.5}) + "\\n")
    """))
    job = _run(repo, out, "process", "progress")
    assert job.status is Status.OK, job.log_tail
    assert [(m["step"], m["loss"]) for m in job.metrics] == [(0, 2.5), (1, 2.0), (2, 1.5)]
