"""Training-task costs, side by side with their references.

Run: ``pytest benchmarks/bench_training.py --benchmark-group-by=group``.

* ``experiment-launch``: from the call to the first training step. A ``train.py`` that imports torch, runs
  one step of a tiny model, prints its first metrics line and exits: through the experiment runner
  (lease a slot, fresh nsjail, log streaming) against ``python train.py`` directly. Each round also
  records (``extra_info``) the launch overhead: time to the first metrics line minus the time the script
  itself spent before printing it (its own clock), which cancels the torch import's large run-to-run noise.
* ``trusted-eval``: the trusted evaluation of one nanogpt/v2 checkpoint (two jailed inference runs over
  the held-out windows, the causality comparison and the metric), at 4,096 evaluation tokens.
* ``slot-lease``: leasing and releasing a (fake) GPU slot: lock file + flock, and the same through
  ``slot_status`` (what each snapshot costs).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch.engine.gpu import lease_slot, slot_status
from reasearch.engine.protocol import Status
from reasearch.engine.training import run_job

FIRST_STEP = """
import time
T0 = time.time()
import json, torch
torch.manual_seed(0)
m = torch.nn.Linear(64, 256)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
loss = m(torch.randn(16, 64)).logsumexp(-1).mean()
loss.backward(); opt.step()
print(json.dumps({"step": 0, "loss": loss.item(), "inside_s": time.time() - T0}), flush=True)
"""


@pytest.fixture(scope="module")
def env() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="reasearch-bench-training-", dir="/var/tmp"))
    base.chmod(0o755)
    (base / "repo").mkdir(mode=0o755)
    (base / "repo" / "train.py").write_text(FIRST_STEP)
    old = {k: os.environ.get(k) for k in ("REASEARCH_LEASE_DIR", "REASEARCH_FAKE_GPUS", "REASEARCH_CPUS_PER_SLOT",
                                          "REASEARCH_EXPERIMENTS_DIR")}
    os.environ.update(REASEARCH_LEASE_DIR=str(base / "leases"), REASEARCH_FAKE_GPUS="1", REASEARCH_CPUS_PER_SLOT="1",
                      REASEARCH_EXPERIMENTS_DIR=str(base / "experiments"))
    try:
        yield base
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(base, ignore_errors=True)


def _experiment(base: Path, mode: str, overheads: list[float]) -> float:
    with lease_slot("gpu", wait_s=30) as lease:
        job = run_job(["python3", "train.py"], cwd=base / "repo", lease=lease, time_budget_s=60, grace_s=5,
                      log_path=base / "launch.log", binds_ro=[base / "repo"], memory_mb=4096, mode=mode)
    assert job.status is Status.OK and job.first_metric_s is not None, job.log_tail
    overheads.append(job.first_metric_s - float(job.metrics[0]["inside_s"]))
    return job.first_metric_s


def _record(benchmark, overheads: list[float]) -> None:  # type: ignore[no-untyped-def]
    overheads.sort()
    benchmark.extra_info["launch_overhead_median_s"] = round(overheads[len(overheads) // 2], 4)
    benchmark.extra_info["launch_overhead_min_s"] = round(overheads[0], 4)
    print(f"\n{benchmark.name}: launch overhead median {overheads[len(overheads) // 2]:.3f} s, "
          f"min {overheads[0]:.3f} s")


@pytest.mark.benchmark(group="experiment-launch")
@pytest.mark.parametrize("mode", ["nsjail", "process"])
def test_experiment_runner_to_first_step(benchmark, env: Path, mode: str) -> None:  # type: ignore[no-untyped-def]
    from tests.engine.conftest import needs_mode

    needs_mode(mode)
    overheads: list[float] = []
    first = benchmark.pedantic(_experiment, args=(env, mode, overheads), rounds=5, iterations=1, warmup_rounds=1)
    assert first > 0
    _record(benchmark, overheads)


@pytest.mark.benchmark(group="experiment-launch")
def test_plain_python_train_py_to_first_step(benchmark, env: Path) -> None:  # type: ignore[no-untyped-def]
    import json
    import time

    overheads: list[float] = []

    def direct() -> float:
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "train.py"], cwd=env / "repo", stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert proc.stdout is not None
        line = proc.stdout.readline()
        first = time.monotonic() - t0
        proc.wait()
        proc.stdout.close()
        overheads.append(first - float(json.loads(line)["inside_s"]))
        return first

    assert benchmark.pedantic(direct, rounds=5, iterations=1, warmup_rounds=1) > 0
    _record(benchmark, overheads)


@pytest.fixture(scope="module")
def checkpoint(env: Path, shared_data_dir: Path) -> tuple[object, Path]:
    import reasearch
    from reasearch.evaluators.repo import encode_repo

    text = shared_data_dir / "text" / "tinyshakespeare.txt"
    task = reasearch.make("nanogpt/v2", corpus=str(text) if text.is_file() else "stdlib", time_budget_s=60,
                          grace_s=30, eval_tokens=4096)
    files = task.seed_files()  # type: ignore[attr-defined]
    files["train.py"] = files["train.py"].replace("max_steps = None", "max_steps = 10")
    os.environ["REASEARCH_KEEP_CHECKPOINTS"] = "1"  # the checkpoint is scored again below
    try:
        res = task.evaluate(encode_repo(files))
    finally:
        del os.environ["REASEARCH_KEEP_CHECKPOINTS"]
    assert res.ok, res.feedback
    return task, Path(res.metrics["experiment_dir"])


@pytest.fixture(scope="module")
def shared_data_dir() -> Path:
    env = os.environ.get("REASEARCH_SHARED_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.mark.benchmark(group="trusted-eval")
def test_trusted_evaluation_per_checkpoint(benchmark, checkpoint: tuple[object, Path]) -> None:  # type: ignore[no-untyped-def]
    task, exp = checkpoint

    def evaluate_once() -> float:
        for old in exp.glob("eval*"):
            shutil.rmtree(old)
        with lease_slot("auto", wait_s=30) as lease:
            res = task.trusted_evaluation(exp_dir=exp, repo_dir=exp / "repo", ckpt_dir=exp / "out", lease=lease)  # type: ignore[attr-defined]
        assert res.ok, res.feedback
        return float(res.score)

    assert 0 < benchmark.pedantic(evaluate_once, rounds=3, iterations=1) < 9


@pytest.mark.benchmark(group="slot-lease")
def test_lease_and_release_a_gpu_slot(benchmark, env: Path) -> None:  # type: ignore[no-untyped-def]
    def cycle() -> str:
        lease = lease_slot("gpu", wait_s=5)
        lease.release()
        return lease.kind

    assert benchmark(cycle) == "gpu"


@pytest.mark.benchmark(group="slot-lease")
def test_slot_status_of_every_slot(benchmark, env: Path) -> None:  # type: ignore[no-untyped-def]
    assert benchmark(slot_status, "gpu")[0]["free"]
