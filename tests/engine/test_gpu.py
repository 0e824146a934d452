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


# ------------------------------------------------------------------ the driver's libraries in the jail


def _fake_driver_tree(base: Path) -> Path:
    drv = base / "nvidia-driver"
    drv.mkdir(mode=0o755)
    (drv / "libcuda.so.535.104.05").write_text("fake libcuda")
    (drv / "libcuda.so.1").symlink_to("libcuda.so.535.104.05")
    (drv / "libcuda.so").symlink_to("libcuda.so.1")
    (drv / "libnvidia-ml.so.535.104.05").write_text("fake nvml")
    (drv / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.535.104.05")
    (drv / "libnvidia-ptxjitcompiler.so.1").write_text("fake ptxjit")
    (drv / "libsecret-host-thing.so.1").write_text("must not leak")  # another library of the same folder
    (drv / "libcudart.so.12").write_text("not the driver's")  # the CUDA runtime comes with torch, not the host
    (drv / "libnvidia-nvvm.so.4").symlink_to("/etc/passwd")  # a driver name that resolves elsewhere
    (drv / "notes.txt").write_text("must not leak")
    for p in drv.iterdir():
        if not p.is_symlink():
            p.chmod(0o644)
    return drv


def test_driver_libraries_are_each_file_of_the_driver_and_nothing_else(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    drv = _fake_driver_tree(tmp_path)
    monkeypatch.setenv("REASEARCH_CUDA_LIB_DIRS", f"{drv}:{tmp_path / 'missing'}")
    binds = dict((dst, src) for src, dst in gpu.driver_libraries())
    assert binds == {
        str(drv / "libcuda.so"): str(drv / "libcuda.so.535.104.05"),
        str(drv / "libcuda.so.1"): str(drv / "libcuda.so.535.104.05"),
        str(drv / "libcuda.so.535.104.05"): str(drv / "libcuda.so.535.104.05"),
        str(drv / "libnvidia-ml.so.1"): str(drv / "libnvidia-ml.so.535.104.05"),
        str(drv / "libnvidia-ml.so.535.104.05"): str(drv / "libnvidia-ml.so.535.104.05"),
        str(drv / "libnvidia-ptxjitcompiler.so.1"): str(drv / "libnvidia-ptxjitcompiler.so.1"),
    }
    # Libraries under the folders every jail already sees read-only (/usr, /lib) need no bind of their own.
    assert all(not dst.startswith(("/usr/", "/lib/")) for _, dst in gpu.driver_libraries(["/usr/lib/x86_64-linux-gnu"]))


def test_a_real_gpu_slot_binds_its_node_read_write_and_the_driver_files_read_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reasearch.engine.training import gpu_jail_args

    drv = _fake_driver_tree(tmp_path)
    monkeypatch.setenv("REASEARCH_CUDA_LIB_DIRS", str(drv))
    lease = gpu.SlotLease("gpu", 3, (0,), gpu.GpuDevice(3, "GPU-1234", "H200"), -1, tmp_path / "x.lock")
    args = gpu_jail_args(lease, [tmp_path / "repo"])
    pairs = list(zip(args[::2], args[1::2], strict=False))
    assert ("-R", str(tmp_path / "repo")) in pairs and ("-B", "/dev/nvidia3") in pairs
    assert ("-R", f"{drv / 'libcuda.so.535.104.05'}:{drv / 'libcuda.so.1'}") in pairs
    mounted = [v for flag, v in pairs if str(drv) in v]
    assert all(flag == "-R" for flag, v in pairs if str(drv) in v)  # read-only, every one
    assert len(mounted) == 6 and not any(v.split(":")[-1] in (str(drv), str(drv) + "/") for v in mounted)
    assert not any(name in " ".join(mounted) for name in ("secret", "cudart", "notes", "nvvm"))
    assert not [v for flag, v in pairs if flag == "-B" and v.startswith("/dev/nvidia") and v not in (
        "/dev/nvidia3", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-caps")]
    fake = gpu.SlotLease("gpu", 0, (0,), gpu.GpuDevice(0, "fake-0", "fake GPU", fake=True), -1, tmp_path / "y.lock")
    assert fake.jail_binds() == ([], [])  # a faked device binds nothing


_LOOK = """
import json, os, sys
d = sys.argv[1]
out = {"listing": sorted(os.listdir(d)), "content": open(os.path.join(d, "libcuda.so.1")).read(),
       "ld": os.environ.get("LD_LIBRARY_PATH", "")}
for what, fn in (("write", lambda: open(os.path.join(d, "libcuda.so.1"), "w")),
                 ("create", lambda: open(os.path.join(d, "new.so"), "w"))):
    try:
        fn()
        out[what] = "allowed"
    except OSError as exc:
        out[what] = exc.strerror
print("LOOK " + json.dumps(out), flush=True)
"""


def test_in_the_jail_only_the_driver_files_are_visible_and_read_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    import shutil
    import tempfile

    from reasearch.engine._jail import nsjail_problem
    from reasearch.engine.training import run_job

    if nsjail_problem() is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI runs nsjail: {nsjail_problem()}")
        pytest.skip(f"nsjail cannot run here: {nsjail_problem()}")
    base = Path(tempfile.mkdtemp(prefix="reasearch-drv-", dir="/var/tmp"))
    try:
        base.chmod(0o755)
        drv = _fake_driver_tree(base)
        work = base / "work"
        work.mkdir(mode=0o755)
        monkeypatch.setenv("REASEARCH_CUDA_LIB_DIRS", str(drv))
        monkeypatch.setenv("REASEARCH_LEASE_DIR", str(base / "leases"))
        monkeypatch.setenv("REASEARCH_FAKE_GPUS", "0")
        lease = lease_slot("cpu", wait_s=5)
        try:
            # A real GPU's binds minus its device node (there is no GPU here): exactly the driver's files.
            lease.jail_binds = lambda: ([], gpu.driver_libraries())  # type: ignore[method-assign]
            job = run_job(["python3", "-c", _LOOK, str(drv)], cwd=work, lease=lease, time_budget_s=60,
                          log_path=base / "look.log", binds_rw=[work], mode="nsjail")
        finally:
            lease.release()
        line = next((ln for ln in job.log_tail.splitlines() if ln.startswith("LOOK ")), None)
        assert job.ok and line is not None, job.log_tail
        seen = json.loads(line[5:])
        assert seen["listing"] == sorted(["libcuda.so", "libcuda.so.1", "libcuda.so.535.104.05", "libnvidia-ml.so.1",
                                          "libnvidia-ml.so.535.104.05", "libnvidia-ptxjitcompiler.so.1"])
        assert seen["content"] == "fake libcuda"
        assert seen["write"] != "allowed" and seen["create"] != "allowed"
        assert str(drv) in seen["ld"].split(":")
        assert (drv / "libcuda.so.535.104.05").read_text() == "fake libcuda"
    finally:
        shutil.rmtree(base, ignore_errors=True)
