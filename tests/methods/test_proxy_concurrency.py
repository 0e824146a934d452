"""The metering proxy serves a peer's parallel workers at once, and keeps the run's caps exact while it does.

A fake model (the "endpoint") counts the calls in flight and holds each call at a barrier until as many
as expected have arrived: a proxy that served one request at a time would never get two calls in. The
barrier's timeout only stops a broken proxy from hanging the test; nothing is timed.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from reasearch.engine import SandboxConfig, SandboxPool
from reasearch.errors import ModelError
from reasearch.methods._driver import REPLY_EVENT, MethodDriver
from reasearch.methods._peer_common import prestart_sandbox
from reasearch.methods._proxy import MeteringProxy
from reasearch.models.messages import ModelReply, ModelRequest, StopReason, Usage
from reasearch.runs import LocalExecutor, Run, Unit, open_store
from tests.engine.conftest import MODES, needs_mode

TASK = "circle_packing/n26-v1"
CHAT = {"messages": [{"role": "user", "content": "```python\nx = 1\n```"}]}
BARRIER_S = 30.0  # a broken (serial) proxy: the held calls give up after this and the assertions fail


class HoldingModel:
    """A model endpoint that holds each call until ``parties`` calls are in flight (or the barrier breaks)."""

    def __init__(self, parties: int, *, fail: bool = False) -> None:
        self.barrier = threading.Barrier(parties, timeout=BARRIER_S)
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.calls = 0
        self.fail = fail

    @property
    def name(self) -> str:
        return "holding"

    def complete(self, request: ModelRequest) -> ModelReply:
        with self.lock:
            self.now += 1
            self.calls += 1
            self.most = max(self.most, self.now)
            n = self.calls
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            pass
        finally:
            with self.lock:
                self.now -= 1
        if self.fail:
            raise ModelError("the endpoint is down")
        return ModelReply(({"type": "text", "text": f"```python\nx = {n}\n```"},), StopReason.END_TURN,
                          Usage(input_tokens=10, output_tokens=5), 0.0, "holding")


def _post(url: str, body: dict[str, Any], token: str) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, json.dumps(body).encode(), headers), timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture()
def store_path(tmp_path: Path) -> Iterator[str]:
    yield str(tmp_path / "store.sqlite")


def _driver(store_path: str, model: Any, budget: dict[str, float]) -> MethodDriver:
    run = Run.create(open_store(store_path), task_id=TASK, budget=budget)
    return MethodDriver(run, model, method="openevolve")


def _at_once(n: int, fn: Any) -> list[Any]:
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: fn(), range(n)))


def test_two_model_calls_are_in_flight_at_once(store_path: str) -> None:
    model = HoldingModel(2)
    driver = _driver(store_path, model, {"evaluations": 3, "model_calls": 10})
    proxy = MeteringProxy(driver, note="openevolve")
    answers = proxy.serve(lambda: _at_once(2, lambda: _post(proxy.url + "/chat/completions", CHAT, proxy.token)))
    assert model.most == 2  # the endpoint saw both calls at once
    assert [code for code, _ in answers] == [200, 200]
    texts = sorted(a["choices"][0]["message"]["content"] for _, a in answers)
    assert texts == ["```python\nx = 1\n```", "```python\nx = 2\n```"]  # each peer got its own reply
    events = driver.run.events(kind=REPLY_EVENT)
    assert len({e.step for e in events}) == 2 == len(events)  # one step each, both journaled
    assert driver.run.used()[Unit.MODEL_CALLS] == 2 and proxy.calls == 2
    driver.run.close()


@pytest.mark.parametrize("n,k", [(8, 3), (5, 1)])
def test_n_calls_at_once_against_a_cap_of_k_get_exactly_k_answers(store_path: str, n: int, k: int) -> None:
    model = HoldingModel(k)  # the k admitted calls are all held in flight while the others are refused
    driver = _driver(store_path, model, {"evaluations": 3, "model_calls": k})
    proxy = MeteringProxy(driver, note="openevolve")
    answers = proxy.serve(lambda: _at_once(n, lambda: _post(proxy.url + "/chat/completions", CHAT, proxy.token)))
    codes = sorted(code for code, _ in answers)
    assert codes == [200] * k + [400] * (n - k)
    assert all(a["error"]["type"] == "budget_exhausted" for code, a in answers if code == 400)
    assert model.calls == k and model.most == k  # refused calls never reached the endpoint
    run = driver.run
    assert run.used()[Unit.MODEL_CALLS] == k  # no overspend, nothing lost
    assert sum(e.amount for e in run.store.ledger(run.id) if e.unit is Unit.MODEL_CALLS) == k
    assert len(run.events(kind=REPLY_EVENT)) == k
    assert (proxy.calls, proxy.refused) == (k, n - k)
    run.close()


def test_evaluations_are_served_at_once(store_path: str) -> None:
    barrier = threading.Barrier(2, timeout=BARRIER_S)
    seen: list[int] = []
    lock = threading.Lock()
    now = [0]

    def evaluate(path: str) -> dict[str, Any]:
        with lock:
            now[0] += 1
            seen.append(now[0])
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        with lock:
            now[0] -= 1
        return {"metrics": {"combined_score": float(len(path))}, "artifacts": {}}

    driver = _driver(store_path, HoldingModel(1), {"evaluations": 3})
    proxy = MeteringProxy(driver, evaluate=evaluate, note="openevolve")
    url = f"http://127.0.0.1:{proxy.port}/reasearch/evaluate"
    answers = proxy.serve(lambda: _at_once(2, lambda: _post(url, {"program_path": "/tmp/p.py"}, proxy.token)))
    assert max(seen) == 2 and [code for code, _ in answers] == [200, 200]
    driver.run.close()


def test_a_model_failure_on_one_request_ends_serving_with_it(store_path: str) -> None:
    model = HoldingModel(2, fail=True)
    driver = _driver(store_path, model, {"evaluations": 3, "model_calls": 10})
    proxy = MeteringProxy(driver, note="openevolve")
    peer_done = threading.Event()

    def peer() -> None:
        _at_once(2, lambda: _post(proxy.url + "/chat/completions", CHAT, proxy.token))
        peer_done.wait(BARRIER_S)  # the peer would go on: serving ends on the failure, not on the peer

    with pytest.raises(ModelError, match="endpoint is down"):
        proxy.serve(peer)
    peer_done.set()
    assert proxy.in_flight == 0  # both failed calls were waited for
    assert driver.run.used().get(Unit.MODEL_CALLS, 0.0) == 0  # a failed call is released, never paid
    driver.run.close()


# ---------------------------------------------------------------- the pool starts while the peer starts
@pytest.mark.parametrize("mode", MODES)
def test_the_sandbox_worker_for_the_seed_starts_ahead_of_the_peers_first_evaluation(store_path: str,
                                                                                    mode: str) -> None:
    needs_mode(mode)
    with SandboxPool(SandboxConfig(mode=mode, workers=2, lazy_start=True)) as pool:
        run = Run.create(open_store(store_path), task_id=TASK, budget={"evaluations": 2},
                         executor=LocalExecutor(pool=pool))
        driver = MethodDriver(run, HoldingModel(1), method="openevolve")
        thread = prestart_sandbox(driver)
        assert thread is not None
        thread.join()
        seed = driver.task.seed_program()
        request = driver.task.build_request(seed, seed=int(run.seed))
        # A slot with the seed's image is up or on its way before any evaluation was asked for.
        assert pool.prestart(request) is False
        cand = driver.evaluate(seed, parent=None, note="openevolve")
        assert cand.ok and cand.result.provenance is not None and cand.result.provenance.sandbox_mode == mode
        # The first evaluation was served by that slot: one worker started, with that image, none switched.
        assert [w.profile for w in pool._workers if not w.cold] == [pool.profile_of(request)]
        assert pool.profile_switches == 0
        run.close()


def test_no_local_pool_starts_nothing(store_path: str) -> None:
    class NoPool:
        pass

    driver = _driver(store_path, HoldingModel(1), {"evaluations": 1})
    driver.run._executor = NoPool()  # type: ignore[assignment]  # e.g. Ray: its workers hold the pools
    assert prestart_sandbox(driver) is None
    driver.run._executor = None
    driver.run.close()
