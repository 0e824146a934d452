"""``reasearch seed`` (a file or a repository), ``reasearch eval`` of a repository candidate, and
``reasearch sandbox check --gpu`` with a faked device."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from reasearch.cli import main


def test_seed_writes_a_program_file_and_refuses_to_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "seed.py"
    assert main(["seed", "circle_packing/n26-v1", "-o", str(out)]) == 0
    assert "def run" in out.read_text() or "def " in out.read_text()
    assert main(["seed", "circle_packing/n26-v1", "-o", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["seed", "circle_packing/n26-v1", "-o", str(out), "--force"]) == 0


def test_seed_writes_a_committed_repository_for_a_training_task(tmp_path: Path) -> None:
    repo = tmp_path / "gpt"
    assert main(["seed", "nanogpt/v2", "-o", str(repo)]) == 0
    assert {p.name for p in repo.iterdir()} >= {"train.py", "model.py", ".git"}
    log = subprocess.run(["git", "-C", str(repo), "log", "--oneline"], capture_output=True, text=True, check=True)
    assert "seed of nanogpt/v2" in log.stdout
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    assert main(["seed", "nanogpt/v2", "-o", str(repo)]) == 2  # not an empty folder


def test_eval_runs_one_experiment_on_a_repository(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setenv("REASEARCH_FAKE_GPUS", "1")
    monkeypatch.setenv("REASEARCH_CPUS_PER_SLOT", "1")
    monkeypatch.setenv("REASEARCH_LEASE_DIR", str(tmp_path / "leases"))
    repo = Path(tempfile.mkdtemp(prefix="reasearch-cli-eval-", dir="/var/tmp")) / "gpt"
    try:
        assert main(["seed", "nanogpt/v2", "-o", str(repo)]) == 0
        train = repo / "train.py"
        train.write_text(train.read_text().replace("max_steps = None", "max_steps = 5"))
        (repo / "out").mkdir()
        (repo / "out" / "model.pt").write_bytes(b"x" * 10)  # ignored (.gitignore): not part of the candidate
        capsys.readouterr()
        code = main(["eval", "nanogpt/v2", str(repo), "-p", "time_budget_s=60",  # the default corpus: generated, sealed
                     "-p", "eval_tokens=512", "-p", "grace_s=30", "--json"])
        doc = json.loads(capsys.readouterr().out)
        assert code == 0 and doc["status"] == "OK", doc["feedback"][-2000:]
        m = doc["metrics"]
        assert m["slot"].startswith("gpu0") and m["gpu_s"] > 0 and m["train_s"] > 0 and m["last_step"] == 0
        assert m["corpus"] == "generated" and m["sealed"] is True and m["heldout_public"] is False
        assert "training log tail" in doc["feedback"] and 0 < doc["score"] < 9
    finally:
        import shutil

        shutil.rmtree(repo.parent, ignore_errors=True)


def test_sandbox_check_gpu_reports_a_fake_device_and_probes_a_leased_slot(monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str],
                                                                          tmp_path: Path) -> None:
    monkeypatch.setenv("REASEARCH_FAKE_GPUS", "2")
    monkeypatch.setenv("REASEARCH_LEASE_DIR", str(tmp_path / "leases"))
    code = main(["sandbox", "check", "--gpu", "--json"])
    gpu = json.loads(capsys.readouterr().out)["gpu"]
    assert [d["uuid"] for d in gpu["usable"]] == ["fake-0", "fake-1"] and gpu["source"] == "fake"
    assert gpu["probe_ok"] and gpu["probe"]["cuda_visible_devices"] in ("0", "1")
    assert gpu["probe"]["visible_nodes"] == []  # nothing of /dev/nvidia* for a fake device
    assert code in (0, 1)  # 1 only where nsjail itself is unavailable
    assert all(s["free"] for s in gpu["slots"]) and os.environ["REASEARCH_FAKE_GPUS"] == "2"


def test_gpu_check_script_says_plainly_when_torch_is_a_cpu_build(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    torch = pytest.importorskip("torch")
    if torch.version.cuda is not None:
        pytest.skip("torch here is a CUDA build")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"  # a host with a driver that supports CUDA 12.8, and a CPU-only torch
    smi.write_text("#!/bin/sh\necho '| NVIDIA-SMI 550.54.14   Driver Version: 550.54.14   CUDA Version: 12.8 |'\n")
    smi.chmod(0o755)
    drv = tmp_path / "drv"
    drv.mkdir()
    (drv / "libcuda.so.1").write_text("fake")
    env = {**os.environ, "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
           "PYTHON": sys.executable, "REASEARCH_CUDA_LIB_DIRS": str(drv)}
    script = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.sh"
    cp = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    version = torch.__version__.split("+")[0]
    assert f"torch {torch.__version__} in {sys.executable} is a CPU-only build" in cp.stderr
    assert (f"{sys.executable} -m pip install --force-reinstall --index-url https://download.pytorch.org/whl/cu128 "
            f"torch=={version}") in cp.stderr
    assert '"driver_cuda": "12.8"' in cp.stdout and f'"libcuda": ["{drv}/libcuda.so.1"]' in cp.stdout
    assert "== 1." not in cp.stdout  # it stops there, before anything obscure can fail
