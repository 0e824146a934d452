"""Waits are never silent: a slot another process holds is reported with the holder's pid and run, repeatedly."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from reasearch.engine import waits
from reasearch.engine.gpu import lease_slot

_HOLDER = textwrap.dedent("""
    import sys
    from reasearch.engine.gpu import lease_slot
    from reasearch.engine.waits import set_owner
    set_owner("run feedc0ffee42")
    lease = lease_slot("cpu", wait_s=30)
    print("held", flush=True)
    sys.stdin.read()  # until the test closes our stdin
""")


class _Clock:
    """Monotonic seconds that advance one second per reading: waits pass without real time passing."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.fixture()
def one_cpu_slot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("REASEARCH_LEASE_DIR", str(tmp_path / "leases"))
    monkeypatch.delenv("REASEARCH_FAKE_GPUS", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # CPU slots only, whatever this machine has
    monkeypatch.setenv("REASEARCH_CPUS_PER_SLOT", str(len(os.sched_getaffinity(0))))  # one slot: all cores
    return dict(os.environ)


def test_a_wait_for_a_slot_names_the_holders_pid_and_run_and_keeps_saying_so(one_cpu_slot: dict[str, str]) -> None:
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER], env=one_cpu_slot, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    notices: list[waits.WaitNotice] = []

    def seen(notice: waits.WaitNotice) -> None:
        notices.append(notice)
        if len(notices) == 4:  # the holder ends after the fourth notice: the lease then goes to us
            assert holder.stdin is not None
            holder.stdin.close()
            holder.wait(timeout=60)

    remove = waits.add_wait_reporter(seen)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        lease = lease_slot("cpu", wait_s=500, poll_s=0.01, notice_every_s=5, clock=_Clock())
        lease.release()
    finally:
        remove()
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert len(notices) >= 4
    assert [n.count for n in notices[:4]] == [1, 2, 3, 4]
    assert all(f"pid {holder.pid}" in n.holder and "run feedc0ffee42" in n.holder for n in notices[:4])
    assert all("cpu slot" in n.what for n in notices)
    waited = [n.waited_s for n in notices[:4]]
    assert waited == sorted(waited) and waited[3] - waited[0] >= 15  # every 5 s of the clock, not every poll
    assert f"held by pid {holder.pid}" in notices[0].line()


def test_a_slow_start_up_is_reported_while_it_lasts() -> None:
    notices: list[waits.WaitNotice] = []
    enough = threading.Event()

    def seen(notice: waits.WaitNotice) -> None:
        notices.append(notice)
        if len(notices) >= 2:
            enough.set()

    remove = waits.add_wait_reporter(seen)
    try:
        with waits.waiting("the sandbox to start", after_s=0, every_s=0.01):
            assert enough.wait(60)
    finally:
        remove()
    assert [n.count for n in notices[:2]] == [1, 2] and notices[0].what == "the sandbox to start"


def test_a_garbled_lock_record_is_described_not_raised() -> None:
    assert waits.describe_holder("") == "another process (unknown pid)"
    assert waits.describe_holder("x y\n") == "another process (unknown pid)"
    assert waits.describe_holder(f"{os.getpid()} notatime") .startswith(f"pid {os.getpid()} (")
