"""A sandbox worker killed while it starts (kill -9 from outside, the OOM killer) is replaced and waited
for again, three starts in all; past that the error says it died at start-up and how (issue 40: the chaos
soak's ``kill_worker`` that struck a starting worker raised SandboxError and killed the driver)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from reasearch.engine import RunRequest, SandboxConfig, SandboxPool
from reasearch.engine._handle import WorkerHandle
from reasearch.errors import SandboxError
from reasearch.evaluators.result import Status
from tests.engine.conftest import MODES, needs_mode


@pytest.fixture
def kill_starts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """``kill_starts.append(n)``: the next ``n`` worker starts are killed (-9) as soon as they are spawned."""
    left: list[int] = []
    real = WorkerHandle.start

    def start(self: WorkerHandle) -> None:
        real(self)
        if left and left[0] > 0:
            left[0] -= 1
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)

    monkeypatch.setattr(WorkerHandle, "start", start)
    yield left


def _config(mode: str) -> SandboxConfig:
    return SandboxConfig(mode=mode, workers=1, preload=())


_ADD = RunRequest(source="def run(x):\n    return x + 1\n", payload={"x": 41})


@pytest.mark.parametrize("mode", MODES)
def test_a_worker_killed_twice_while_starting_is_replaced_and_serves(mode: str, kill_starts: list[int]) -> None:
    needs_mode(mode)
    kill_starts.append(2)
    pool = SandboxPool(_config(mode))  # the pool's own start: 2 deaths, the third start serves
    try:
        assert kill_starts == [0] and pool.restarts == 2
        out = pool.run(_ADD)
        assert (out.status, out.value) == (Status.OK, 42), out.error
        # The worker killed between requests, then its replacement killed while it starts: the next
        # request still runs (a third start), instead of a SandboxError that ended the driver.
        kill_starts[0] = 1
        w = pool._workers[0]
        assert w.proc is not None
        os.kill(w.proc.pid, signal.SIGKILL)
        w.proc.wait()
        out = pool.run(_ADD)
        assert (out.status, out.value) == (Status.OK, 42), out.error
        assert kill_starts == [0]
    finally:
        pool.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_worker_that_dies_at_every_start_gives_up_after_three_with_the_reason(mode: str,
                                                                              kill_starts: list[int]) -> None:
    needs_mode(mode)
    kill_starts.append(10)
    with pytest.raises(SandboxError) as info:
        SandboxPool(_config(mode))
    first = str(info.value).splitlines()[0]
    assert first.startswith("sandbox worker 0 died while starting, 3 times in a row (killed by signal 9"), first
    assert kill_starts == [7]  # three starts, no more
