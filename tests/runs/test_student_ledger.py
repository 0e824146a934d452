"""Student calls in a run: each stored with its debit, repeats free, the cap held under concurrency,
failures recorded (never debited, never served again), kill -9 mid-batch then resume re-pays nothing."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch.evaluators.kinds import PromptOptions
from reasearch.evaluators.prompt.testing import (
    BETTER_PROMPT,
    GOOD_PROMPT,
    FakeStudentServer,
    gsm8k_answer_key,
    write_synthetic_gsm8k,
)
from reasearch.evaluators.result import Status
from reasearch.runs import Run, Unit, open_store
from reasearch.runs.prompt_splits import PromptSplits, score_test
from tests.pg_helpers import BACKENDS, store_location

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=BACKENDS)
def store_at(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store: a run directory, or a new schema of the test PostgreSQL database."""
    yield from store_location(request.param, tmp_path, "students")


@pytest.fixture(scope="module")
def gsm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_gsm8k(tmp_path_factory.mktemp("gsm8k"), n_train=120, n_test=30)


@pytest.fixture()
def server(gsm: Path) -> Iterator[FakeStudentServer]:
    with FakeStudentServer(gsm8k_answer_key(gsm)) as srv:
        yield srv


def _run(store_dir: Path | str, gsm: Path, srv: FakeStudentServer, cap: float | None = None, **kw: object) -> Run:
    params = dict(student="openai/fake", base_url=srv.url, data_dir=str(gsm), n_train=40, n_validation=40,
                  concurrency=8, backoff_s=0.01)
    params.update(kw)
    budget = {} if cap is None else {"student_calls": cap}
    return Run.create(open_store(store_dir), task_id="gsm8k/v1", task_params=params, budget=budget)


def _student_debits(run: Run) -> list[tuple[int, str, float]]:
    return [(e.step, e.note, e.amount) for e in run.store.ledger(run.id) if e.unit is Unit.STUDENT_CALLS]


def test_each_call_is_stored_with_its_debit_and_repeats_are_free(
    store_at: str, gsm: Path, server: FakeStudentServer
) -> None:
    run = _run(store_at, gsm, server)
    splits = PromptSplits(run)
    _, first = splits.validate(GOOD_PROMPT, step=1)
    assert first.status is Status.OK and not first.cached and first.metrics["calls_paid"] == 40
    assert run.used()[Unit.STUDENT_CALLS] == 40 and server.paid_hits() == 40
    assert run.used()[Unit.STUDENT_TOKENS] == first.metrics["input_tokens"] + first.metrics["output_tokens"]
    assert run.used()[Unit.TOKENS] == 0  # student tokens are not the agent's model tokens
    _, again = splits.validate(GOOD_PROMPT, step=2)  # the same prompt at a new step: served from the store
    assert again.cached and again.score == first.score and again.metrics["calls_paid"] == 0
    assert run.used()[Unit.STUDENT_CALLS] == 40 and server.paid_hits() == 40
    _, replay = splits.validate(GOOD_PROMPT, step=1)  # replaying a recorded step returns its record
    assert replay == first
    # train calls with the same prompt on other examples are paid; a duplicate id in one batch is paid once
    out = splits.run_train(GOOD_PROMPT, ["train-0", "train-1", "train-0"], step=3)
    assert [o.cached for o in out] == [False, False, True] and run.used()[Unit.STUDENT_CALLS] == 42
    # another run of the same store is served the calls already made without asking the student, but
    # pays each once (equal budgets per run); within that run a repeat is then free
    other = Run.create(run.store, task_id="gsm8k/v1", task_params=run.task_params, budget={"student_calls": 39})
    _, refused = PromptSplits(other).validate(GOOD_PROMPT, step=1)
    assert refused.status is Status.REFUSED and refused.metrics["refused"] == 1  # 40 do not fit under 39
    other = Run.create(run.store, task_id="gsm8k/v1", task_params=run.task_params, budget={"student_calls": 40})
    _, res = PromptSplits(other).validate(GOOD_PROMPT, step=1)
    assert res.status is Status.OK and not res.cached and res.score == first.score
    assert other.used()[Unit.STUDENT_CALLS] == 40 and res.metrics["calls_paid"] == 40
    _, res2 = PromptSplits(other).validate(GOOD_PROMPT, step=2)
    assert res2.cached and other.used()[Unit.STUDENT_CALLS] == 40
    assert server.paid_hits() == 42  # none of it reached the student


def test_the_cap_refuses_calls_past_it_and_holds_under_concurrency(store_at: str, gsm: Path) -> None:
    with FakeStudentServer(gsm8k_answer_key(gsm), latency_s=0.02) as srv:
        run = _run(store_at, gsm, srv, cap=25, concurrency=16)
        splits = PromptSplits(run)
        results: list[object] = []

        def validate(prompt: str, step: int) -> None:
            results.append(splits.validate(prompt, step=step)[1])

        threads = [threading.Thread(target=validate, args=(p, s)) for s, p in
                   enumerate([GOOD_PROMPT, BETTER_PROMPT, "Answer with '####'."], start=1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert srv.paid_hits() == 25 and srv.max_in_flight > 1
        assert run.used()[Unit.STUDENT_CALLS] == 25 and len(_student_debits(run)) == 25
        refused = sum(r.metrics["refused"] for r in results)  # type: ignore[attr-defined]
        assert refused == 3 * 40 - 25
        assert all(r.status is Status.REFUSED and r.score is None for r in results)  # type: ignore[attr-defined]
        assert all("student-call budget spent" in r.feedback for r in results)  # type: ignore[attr-defined]
        # the refused calls are not stored: with a larger cap they are made (and paid) later
        assert sum(1 for _, _, st in run.store.student_calls(run.id) if st == "OK") == 25


def test_the_cap_holds_across_two_drivers_of_one_run(store_at: str, gsm: Path) -> None:
    """Two Run objects on their own store connections (as two processes would be) share the cap."""
    with FakeStudentServer(gsm8k_answer_key(gsm), latency_s=0.02) as srv:
        run = _run(store_at, gsm, srv, cap=30, concurrency=8)
        drivers = [Run.open(open_store(store_at), run.id) for _ in range(2)]
        results: list[object] = []
        threads = [
            threading.Thread(target=lambda d=d, p=p, s=s: results.append(PromptSplits(d).validate(p, step=s)[1]))
            for d, p, s in zip(drivers, (GOOD_PROMPT, BETTER_PROMPT), (1, 2), strict=True)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len({d.driver_id for d in drivers}) == 2
        assert srv.paid_hits() == 30 and run.used()[Unit.STUDENT_CALLS] == 30
        assert sum(r.metrics["refused"] for r in results) == 80 - 30  # type: ignore[attr-defined]
        assert run.store.reserved(run.id).get(Unit.STUDENT_CALLS, 0.0) == 0.0  # every reservation released


def test_a_failed_call_is_recorded_not_debited_and_retried_later(store_at: str, gsm: Path) -> None:
    answers = gsm8k_answer_key(gsm)
    with FakeStudentServer(answers, fail_marker="Problem 1", fail_status=500) as srv:
        run = _run(store_at, gsm, srv, retries=1)
        _, res = PromptSplits(run).validate(GOOD_PROMPT, step=1)
        failed = res.metrics["call_failed"]
        assert res.status is Status.CRASH and res.score is None and failed > 0
        assert run.used()[Unit.STUDENT_CALLS] == 40 - failed
        statuses = [st for _, _, st in run.store.student_calls(run.id)]
        assert statuses.count("CRASH") == failed and statuses.count("OK") == 40 - failed
        srv.fail_marker = None  # the student recovers: only the failed calls are made again
        before = srv.paid_hits()
        _, res2 = PromptSplits(run).validate(GOOD_PROMPT, step=2)
        assert res2.status is Status.OK and srv.paid_hits() - before == failed
        assert run.used()[Unit.STUDENT_CALLS] == 40


def test_the_trusted_test_pass_is_stored_and_free_when_repeated(
    store_at: str, gsm: Path, server: FakeStudentServer
) -> None:
    run = _run(store_at, gsm, server, cap=45)
    splits = PromptSplits(run)
    cid, val = splits.validate(BETTER_PROMPT, step=1)
    run.finish(final_candidate=cid)
    cid2, test = score_test(run)
    assert cid2 == cid and test.status is Status.OK and test.metrics["n"] == 30 and test.metrics["split"] == "test"
    direct = run.task.evaluate(BETTER_PROMPT, options=PromptOptions("test"))
    assert test.score == direct.score
    hits = server.paid_hits()
    _, again = score_test(run)
    assert again.cached and again.score == test.score and server.paid_hits() == hits
    assert [e.kind for e in run.events(kind="test_result")] == ["test_result", "test_result"]
    assert run.used()[Unit.STUDENT_CALLS] == 40 + 30  # debited (one ledger), not capped by the optimizer's cap


def test_a_spent_dollar_cap_refuses_priced_calls(tmp_path: Path, gsm: Path, server: FakeStudentServer) -> None:
    params = dict(student="openai/fake", base_url=server.url, data_dir=str(gsm), n_train=40, n_validation=40,
                  concurrency=1, price_in=1000.0, price_out=1000.0)  # ~$0.03 a call
    run = Run.create(open_store(tmp_path / "runs"), task_id="gsm8k/v1", task_params=params, budget={"dollars": 0.1})
    _, res = PromptSplits(run).validate(GOOD_PROMPT, step=1)
    paid = res.metrics["n"] - res.metrics["refused"]
    assert res.status is Status.REFUSED and 0 < paid < 40 and server.paid_hits() == paid
    assert "dollar budget spent" in res.feedback
    dollars = run.used()[Unit.DOLLARS]
    assert dollars >= 0.1 and dollars - 0.1 < 0.1  # the call that crossed the cap is the last one made


def test_train_ids_only(tmp_path: Path, gsm: Path, server: FakeStudentServer) -> None:
    from reasearch.errors import ConfigError

    splits = PromptSplits(_run(tmp_path / "runs", gsm, server))
    for bad in (["val-0"], ["test-0"], ["train-999"], ["train-0", "../x"]):
        with pytest.raises(ConfigError, match="not train example ids"):
            splits.run_train(GOOD_PROMPT, bad, step=1)
    assert server.requests == 0


_DRIVER = """
import sys
from reasearch.runs import Run, open_store
from reasearch.runs.prompt_splits import PromptSplits
run = Run.open(open_store(sys.argv[1]), sys.argv[2])
PromptSplits(run).validate(sys.argv[3], step=5)
print("finished")
"""


def _stored_ok(store_dir: Path) -> int:
    try:
        with sqlite3.connect(f"file:{store_dir / 'store.sqlite'}?mode=ro", uri=True, timeout=5) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM student_calls WHERE status = 'OK'").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def test_kill_9_mid_batch_then_resume_repays_nothing(tmp_path: Path, gsm: Path) -> None:
    with FakeStudentServer(gsm8k_answer_key(gsm), latency_s=0.15) as srv:
        store_dir = tmp_path / "runs"
        run = _run(store_dir, gsm, srv, cap=42, concurrency=2)  # 40, and the (at most 2) calls in flight at the kill
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.Popen([sys.executable, "-c", _DRIVER, str(store_dir), run.id, GOOD_PROMPT], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while _stored_ok(store_dir) < 8 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
        stored = _stored_ok(store_dir)
        assert 8 <= stored < 40, stored  # killed mid-batch
        srv.latency_s = 0.0  # the latency only held the batch open for the kill: the resume need not wait on it
        resumed = Run.open(open_store(store_dir), run.id, resume=True, takeover=True)  # the killed driver is dead
        _, res = PromptSplits(resumed).validate(GOOD_PROMPT, step=5)
        assert res.status is Status.OK and res.metrics["n"] == 40
        assert res.metrics["calls_cached"] == stored and res.metrics["calls_paid"] == 40 - stored
        # every call debited exactly once, and each call in flight at the kill (at most the batch's
        # concurrency, 2) charged once at its reservation: the server may have answered it (issue 40 item 3)
        debits = _student_debits(resumed)
        in_flight = [note for _, note, _ in debits if note.startswith("charged at reservation")]
        assert 0 <= len(in_flight) <= 2 and all("student call was in flight" in note for note in in_flight)
        assert resumed.used()[Unit.STUDENT_CALLS] == 40 + len(in_flight) <= 42
        # the server answered each stored call once; only calls in flight at the kill were asked twice, and
        # each of those is charged (a charged call may not have reached the server). Counted once everything
        # is done, not after a sleep: on a busy machine a call in flight at the kill can reach the server
        # after any fixed wait.
        extra = srv.paid_hits() - 40
        assert 0 <= extra <= len(in_flight), (extra, in_flight)
        assert sum(n - 1 for n in srv.hits.values()) <= extra
        ledger_notes = [note for _, note, _ in debits]
        assert len(ledger_notes) == len(set(ledger_notes)) == 40 + len(in_flight)
        assert Run.open(open_store(store_dir), run.id, resume=True, takeover=True).used() == resumed.used()


def test_run_evaluate_on_a_prompt_task_reserves_a_whole_validation_pass(tmp_path: Path, gsm: Path,
                                                                       server: FakeStudentServer) -> None:
    """The generic Run.evaluate path (sweeps, user loops): one validation pass reserved up front, the
    calls it actually paid debited with the result; per-call storage is the PromptSplits path's."""
    run = _run(tmp_path / "runs", gsm, server, cap=60)
    assert run.eval_unit is Unit.STUDENT_CALLS
    first = run.evaluate(GOOD_PROMPT, step=0)
    assert first.status is Status.OK and run.used()[Unit.STUDENT_CALLS] == 40
    refused = run.evaluate(BETTER_PROMPT, step=1)  # 40 more do not fit under 60
    assert refused.status is Status.REFUSED and server.paid_hits() == 40
    again = run.evaluate(GOOD_PROMPT, step=2)  # the evaluation cache: free
    assert again.cached and again.score == first.score and run.used()[Unit.STUDENT_CALLS] == 40
    run.close()


def test_the_same_student_name_on_another_endpoint_is_another_call(store_at: str, gsm: Path) -> None:
    """Attack: run B names its student like run A's (``openai/fake``) but on another server; with the
    model name as the cache key B is served A's stored replies, scores A's answers, and its own student
    gets no request. The key names the normalized endpoint, so B asks its own server; a respelling of
    A's endpoint (host case, default port, trailing slash) is still A's and served from the store."""
    answers = gsm8k_answer_key(gsm)
    wrong = {q: str(int(float(a)) + 7) for q, a in answers.items()}  # a server that answers differently
    with FakeStudentServer(answers) as srv_a, FakeStudentServer(wrong) as srv_b:
        run_a = _run(store_at, gsm, srv_a)
        _, res_a = PromptSplits(run_a).validate(GOOD_PROMPT, step=1)
        assert res_a.status is Status.OK and srv_a.paid_hits() == 40
        run_b = _run(store_at, gsm, srv_b)
        _, res_b = PromptSplits(run_b).validate(GOOD_PROMPT, step=1)
        assert srv_b.paid_hits() == 40 and srv_a.paid_hits() == 40  # B's own student answered every call
        assert res_b.status is Status.OK and res_b.score != res_a.score and res_b.metrics["calls_paid"] == 40
        respelled = srv_a.url.replace("http://", "HTTP://") + "/"
        run_c = _run(store_at, gsm, srv_a, base_url=respelled)
        _, res_c = PromptSplits(run_c).validate(GOOD_PROMPT, step=1)
        assert res_c.score == res_a.score and srv_a.paid_hits() == 40  # the same endpoint: served from the store


def test_endpoints_are_normalized() -> None:
    from reasearch.evaluators.prompt._students import StudentSpec, normalized_endpoint

    same = ["http://LocalHost:80/v1", "http://localhost/v1/", "HTTP://localhost:80/v1//"]
    assert len({normalized_endpoint("openai", u) for u in same}) == 1
    assert normalized_endpoint("openai", None) == normalized_endpoint("openai", "https://api.openai.com:443/v1/")
    assert normalized_endpoint("openai", "http://h:8000/v1") != normalized_endpoint("openai", "http://h:8001/v1")
    assert normalized_endpoint("openai", "http://h/v1") != normalized_endpoint("anthropic", "http://h/v1")
    assert normalized_endpoint("openai", "http://h/v1") != normalized_endpoint("openai", "http://h/v2")
    assert "secret" not in normalized_endpoint("openai", "http://user:secret@h/v1")
    assert StudentSpec("openai", "m", base_url="http://H:80/v1/").endpoint == normalized_endpoint("openai", "http://h/v1")


def test_an_answered_call_whose_record_fails_is_charged_at_its_reservation(
    store_at: str, gsm: Path, server: FakeStudentServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The student answered, then storing the call failed (a full disk) and the driver died of it: every call
    the student answered is paid once, at its reservation, when the next driver takes over."""
    from reasearch.errors import StoreError

    run = _run(store_at, gsm, server, cap=100, concurrency=1)

    def full_disk(*args: object, **kwargs: object) -> None:
        raise StoreError("database or disk is full")

    monkeypatch.setattr(run.store, "record_student_call", full_disk)
    with pytest.raises(StoreError, match="full"):
        PromptSplits(run).validate(GOOD_PROMPT, step=1)
    answered = server.paid_hits()
    assert answered >= 1 and run.store.reserved(run.id).get(Unit.STUDENT_CALLS) == float(answered)
    run.store.takeover(run.id, "the-next-driver")
    assert run.store.usage(run.id).get(Unit.STUDENT_CALLS) == float(answered) and run.store.reserved(run.id) == {}


def test_the_test_pass_holds_each_call_so_a_death_mid_call_is_paid(
    tmp_path: Path, gsm: Path, server: FakeStudentServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sealed test pass is not capped, but each of its calls is held while in flight (never refused, even
    past the cap): a driver killed mid-pass is charged at the reservation for the call the student may have
    answered, as for any call. (Found by the chaos soak's prompt runs: a kill during the test pass left an
    answered call in no ledger.)"""
    run = _run(tmp_path / "runs", gsm, server, cap=40, concurrency=1)
    PromptSplits(run).validate(GOOD_PROMPT, step=1)  # spends the whole cap: the test pass still runs
    run.finish(final_candidate=None)
    client = _student_client_of(run)
    held: list[float] = []
    real = client.complete

    def watched(request: object) -> object:
        held.append(run.store.reserved(run.id).get(Unit.STUDENT_CALLS, 0.0))
        return real(request)  # type: ignore[arg-type]

    monkeypatch.setattr(client, "complete", watched)
    _, test = score_test(run, client=client)
    assert test.status is Status.OK and held and all(h == 1.0 for h in held), held  # one call held at a time
    assert run.store.reserved(run.id) == {}  # each hold ended with its call's record
    assert run.used()[Unit.STUDENT_CALLS] == 40 + len(held)  # debited past the cap: the pass is not capped


def _student_client_of(run: Run):  # type: ignore[no-untyped-def]
    from reasearch.runs.students import _student_client

    return _student_client(run)
