"""The pool's scheduler is an object the pool holds (issue 42 item 3b), with its own state and a small
public face: it serves workers that are plain objects, with no pool and no jail behind them."""

from __future__ import annotations

import threading
import time
from typing import Any, cast

import pytest

from reasearch.engine._handle import WorkerHandle
from reasearch.engine._pool_schedule import WorkerScheduler
from reasearch.engine.config import SandboxConfig
from reasearch.engine.protocol import RunRequest
from reasearch.engine.sandbox import SandboxPool
from reasearch.errors import ConfigError, SandboxError


class FakeWorker:
    """What the scheduler reads and calls of a worker; records image switches instead of starting jails."""

    def __init__(self, index: int, profile: tuple[str, ...]) -> None:
        self.index, self.profile, self.cold, self.last_used = index, profile, False, time.monotonic()
        self.switched: list[tuple[str, ...]] = []

    def alive(self) -> bool:
        return True

    def restart(self) -> None:
        raise AssertionError("a live worker is not restarted")

    def switch_profile(self, profile: tuple[str, ...]) -> None:
        self.switched.append(profile)
        self.profile = profile


def _scheduler(*profiles: tuple[str, ...], **config: Any) -> tuple[WorkerScheduler, list[FakeWorker], list[int]]:
    workers = [FakeWorker(i, p) for i, p in enumerate(profiles)]
    kept: list[int] = []
    cfg = SandboxConfig(mode="process", workers=len(workers), preload=("math",), **config)
    sched = WorkerScheduler(cfg, cast("list[WorkerHandle]", workers), {"math", "json"}, lambda: kept.append(1))
    sched.admit(cast("list[WorkerHandle]", workers))
    return sched, workers, kept


def test_the_pool_holds_its_scheduler_instead_of_inheriting_it() -> None:
    assert SandboxPool.__mro__ == (SandboxPool, object)


def test_a_free_worker_with_the_image_is_taken_and_given_back() -> None:
    sched, (a, b), kept = _scheduler(("math",), ("json",))
    assert sched.acquire(("json",)) is b and kept == [1]
    assert sched.acquire(("math",)) is a
    sched.release(b)
    assert sched.acquire(None) is b and sched.switches == 0


def test_an_image_no_idle_worker_has_replaces_the_least_recently_released() -> None:
    sched, (a, b), _ = _scheduler(("math",), ("math",), switch_interval_s=0.0)
    assert sched.acquire(("json",)) is a and a.switched == [("json",)] and sched.switches == 1
    assert b.switched == []


def test_a_request_for_a_module_outside_the_runtime_is_a_config_error() -> None:
    sched, _, _ = _scheduler(("math",))
    with pytest.raises(ConfigError, match=r"outside this pool's runtime: \['os'\]"):
        sched.profile_of(RunRequest(source="", preload=("os",)))
    assert sched.profile_of(RunRequest(source="", preload=("json", "math", "json"))) == ("json", "math")


def test_closing_wakes_a_waiting_acquire_with_a_clear_error() -> None:
    sched, (a,), _ = _scheduler(("math",))
    assert sched.acquire(("math",)) is a
    errors: list[BaseException] = []

    def wait_for_one() -> None:
        try:
            sched.acquire(("math",))
        except SandboxError as exc:
            errors.append(exc)

    t = threading.Thread(target=wait_for_one)
    t.start()
    assert sched.close() == []
    t.join(10)
    assert not t.is_alive() and len(errors) == 1 and "closed" in str(errors[0])
    with pytest.raises(SandboxError, match="closed"):
        sched.acquire(None)
