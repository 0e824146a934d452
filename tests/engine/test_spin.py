"""Waits that poll briefly after a pause (reasearch.engine._spin): when they poll, and that polling
never changes an outcome or outlives a deadline."""

from __future__ import annotations

import os
import select
import textwrap
import time

import pytest

from reasearch.engine import SandboxConfig, SandboxPool, _spin
from reasearch.engine.protocol import Limits, RunRequest, Status
from tests.engine.conftest import needs_mode, stray_processes


def test_only_a_wait_after_a_pause_polls() -> None:
    now = 100.0
    assert _spin.until(now, now - 2 * _spin.IDLE_S, 0.003) == now + 0.003
    assert _spin.until(now, now - _spin.IDLE_S / 2, 0.003) == 0.0  # back to back: sleep at once
    assert _spin.until(now, 0.0, _spin.ENGINE_S) == now + _spin.ENGINE_S  # a fresh channel has paused
    # the previous answer on the channel came within the window: poll; it took longer: sleep at once
    assert _spin.until(now, now - 2 * _spin.IDLE_S, 0.003, last_wait_s=0.001) == now + 0.003
    assert _spin.until(now, now - 2 * _spin.IDLE_S, 0.003, last_wait_s=0.003) == 0.0


@pytest.mark.parametrize("mode", ["nsjail", "process"])
def test_a_wait_after_a_pause_polls_only_when_the_last_answer_came_within_the_window(mode: str) -> None:
    """Engine and worker alike: a post-pause wait polls exactly when the previous answer on its channel came
    within the window; after an evaluation of 30 ms (longer than either window on any machine) it sleeps
    at once, since its polls would burn a busy machine's CPU for nothing. Whether a quick answer came
    within the window depends on the machine's load, so those steps check the rule, not an outcome."""
    needs_mode(mode)
    quick = RunRequest(source="def run():\n    return 1\n")
    slow = RunRequest(source="import time\ndef run():\n    time.sleep(0.03)\n    return 2\n", limits=Limits(wall_s=5.0))
    with SandboxPool(SandboxConfig(mode=mode, workers=1)) as pool:

        def polls(req: RunRequest) -> tuple[int, int]:
            time.sleep(0.03)  # a pause: the channel has been quiet longer than IDLE_S
            out, stamps = pool.run_stamped(req)
            assert out.status is Status.OK and out.value == (2 if req is slow else 1), out.error
            for side, window in (("e", _spin.ENGINE_S), ("w", _spin.WORKER_S)):
                assert stamps[f"{side}_polls"] == int(stamps[f"{side}_last_wait_ns"] < window * 1e9), (side, stamps)
            return stamps["e_polls"], stamps["w_polls"]

        for _ in range(3):
            pool.run(quick)
        polls(quick)
        polls(slow)
        assert polls(quick) == (0, 0)  # the answer before took 30 ms on both channels: sleep at once
        polls(quick)


def test_one_wait_polls_then_blocks_then_times_out() -> None:
    r, w = os.pipe()
    try:
        poller = select.poll()
        poller.register(r, select.POLLIN)
        now = time.monotonic()
        assert _spin.poll(poller, now, now + 1.0, 5.0) is None  # polling, nothing yet: look again
        t0 = time.monotonic()
        assert _spin.poll(poller, now, 0.0, 0.02) == []  # blocking: the timeout passed
        assert time.monotonic() - t0 >= 0.015
        os.write(w, b"x")
        assert _spin.poll(poller, now, now + 1.0, 5.0) == [(r, select.POLLIN)]  # ready while polling
        assert _spin.poll(poller, now, 0.0, None) == [(r, select.POLLIN)]  # ready while blocking
    finally:
        os.close(r)
        os.close(w)


def test_answers_inside_and_past_the_polling_window_after_pauses(pool: SandboxPool) -> None:
    # Before, inside and after the window: each answer is the candidate's, whichever way it was awaited.
    for delay in (0.0, _spin.WORKER_S / 2, 0.02, 0.0):
        time.sleep(0.03)  # a pause: this request's waits poll first
        src = f"import time\ndef run():\n    time.sleep({delay})\n    return {delay!r}\n"
        out = pool.run(RunRequest(source=src, limits=Limits(wall_s=5.0)))
        assert out.status is Status.OK and out.value == delay, out.error
    session = pool.session(RunRequest(source="def f(x):\n    return x + 1\n", entry=("f",)))
    with session:
        for x in range(3):
            time.sleep(0.02)
            got = session.call({"x": x})
            assert got.status is Status.OK and got.value == x + 1, got.error


def test_a_deadline_inside_the_polling_window_still_kills_on_time(pool: SandboxPool) -> None:
    spin = textwrap.dedent("""
        def run():
            while True:
                pass
        """).lstrip()
    time.sleep(0.03)
    t0 = time.monotonic()
    out = pool.run(RunRequest(source=spin, limits=Limits(wall_s=0.001)))
    took = time.monotonic() - t0
    assert out.status is Status.TIMEOUT, (out.status, out.error)
    assert took < 2.0, took  # the wall limit, the kill and the grace period; no wait runs on to a poll's end
    assert pool.run(RunRequest(source="def run():\n    return 1\n")).value == 1
    assert stray_processes(pool) == []
