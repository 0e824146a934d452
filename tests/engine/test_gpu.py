"""GPU discovery and slot leases with faked devices: exclusive across processes, released by death."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from reasearch.engine import gpu
from reasearch.engine.gpu import SlotBusyError, lease_slot, slot_status
from reasearch.errors import ConfigError, SandboxError


@pytest.fixture()
def fake_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    lock_dir = tmp_path / "leases"
    monkeypatch.setenv("REASEARCH_LEASE_DIR", str(lock_dir))
    monkeypatch.setenv("REASEARCH_FAKE_GPUS", "2")
    return lock_dir


def test_two_leases_never_share_a_device_and_a_third_waits(fake_gpus: Path) -> None:
    a = lease_slot("gpu", wait_s=1)
    b = lease_slot("gpu", wait_s=1)
    try:
        assert a.gpu and b.gpu
        assert a.device is not None and b.device is not None and a.device.uuid != b.device.uuid
        assert a.env()["CUDA_VISIBLE_DEVICES"] != b.env()["CUDA_VISIBLE_DEVICES"]
        assert a.device_nodes() == []  # fake devices bind nothing into the jail
        t0 = time.monotonic()
        with pytest.raises(SlotBusyError, match="all leased"):
            lease_slot("gpu", wait_s=0.3)
        assert time.monotonic() - t0 >= 0.3
        assert [s["free"] for s in slot_status("gpu")] == [False, False]
    finally:
        a.release()
        b.release()
    c = lease_slot("gpu", wait_s=0)
    assert c.device is not None
    c.release()
    c.release()  # idempotent


_HOLDER = textwrap.dedent("""
    import sys, time
    from reasearch.engine.gpu import lease_slot
    lease = lease_slot("gpu", wait_s=5)
    print(lease.device.uuid, flush=True)
    time.sleep(120)
""")


def _holder(env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def test_leases_are_exclusive_across_processes_and_kill_9_releases_them(fake_gpus: Path) -> None:
    env = {**os.environ, "REASEARCH_LEASE_DIR": str(fake_gpus), "REASEARCH_FAKE_GPUS": "2"}
    p1, uuid1 = _holder(env)
    p2, uuid2 = _holder(env)
    try:
        assert {uuid1, uuid2} == {"fake-0", "fake-1"}  # two processes, two devices
        with pytest.raises(SlotBusyError):
            lease_slot("gpu", wait_s=0.2)
        holders = {s["holder_pid"] for s in slot_status("gpu")}
        assert holders == {p1.pid, p2.pid}
        p1.send_signal(signal.SIGKILL)
        p1.wait()
        lease = lease_slot("gpu", wait_s=2)  # the kernel dropped the dead holder's lock
        assert lease.device is not None and lease.device.uuid == uuid1
        lease.release()
    finally:
        for p in (p1, p2):
            p.kill()
            p.wait()
            assert p.stdout is not None
            p.stdout.close()


def test_cpu_slots_pin_disjoint_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REASEARCH_LEASE_DIR", str(tmp_path / "leases"))
    monkeypatch.setenv("REASEARCH_FAKE_GPUS", "0")
    slots = gpu.cpu_slots(1)
    assert len(slots) == len(os.sched_getaffinity(0)) and all(len(s) == 1 for s in slots)
    leases = [lease_slot("auto", cpus_per_slot=1, wait_s=1) for _ in slots]
    try:
        assert all(not lease.gpu for lease in leases)
        assert len({lease.cpus for lease in leases}) == len(slots)
        assert leases[0].env()["CUDA_VISIBLE_DEVICES"] == "" and leases[0].env()["OMP_NUM_THREADS"] == "1"
        with pytest.raises(SlotBusyError):
            lease_slot("cpu", cpus_per_slot=1, wait_s=0.1)
    finally:
        for lease in leases:
            lease.release()
    with pytest.raises(SandboxError, match="no usable GPU"):
        lease_slot("gpu", wait_s=0)


def test_discovery_parses_nvidia_smi_and_rejects_a_device_without_its_node(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho '0, GPU-aaaa, NVIDIA H100 80GB HBM3, 81559'\necho 'garbage line'\n"
                   "echo '7, GPU-bbbb, NVIDIA H100 80GB HBM3, 81559 MiB'\n")
    smi.chmod(0o755)
    monkeypatch.delenv("REASEARCH_FAKE_GPUS", raising=False)
    monkeypatch.setenv("PATH", f"{smi.parent}:{os.environ['PATH']}")
    report = gpu.gpu_report()
    assert report.source == "nvidia-smi"
    seen = [d for d in report.usable] + [d for d, _ in report.unusable]
    assert [(d.index, d.uuid, d.memory_mb) for d in seen] == [(0, "GPU-aaaa", 81559), (7, "GPU-bbbb", 81559)]
    if not os.path.exists("/dev/nvidia7"):
        assert any(d.index == 7 and "does not exist" in why for d, why in report.unusable)
        assert all(d.index != 7 for d in gpu.discover_gpus())


def test_proc_fallback_and_bad_fake_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    card = tmp_path / "0000:3b:00.0"
    card.mkdir()
    (card / "information").write_text("Model: \t\t NVIDIA A100-SXM4-40GB\nGPU UUID: \t GPU-cccc\nDevice Minor: \t 2\n")
    assert [(d.index, d.uuid, d.name) for d in gpu._from_proc(tmp_path)] == [(2, "GPU-cccc", "NVIDIA A100-SXM4-40GB")]
    monkeypatch.setenv("REASEARCH_FAKE_GPUS", "two")
    with pytest.raises(ConfigError, match="whole number"):
        gpu.gpu_report()


def test_a_lock_folder_that_is_a_symlink_or_shared_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    monkeypatch.setenv("REASEARCH_LEASE_DIR", str(link))
    with pytest.raises(SandboxError, match="not a directory"):
        gpu.lease_dir()
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("REASEARCH_LEASE_DIR", str(shared))
    with pytest.raises(SandboxError, match="writable only by it"):
        gpu.lease_dir()
