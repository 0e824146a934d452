"""Student-call throughput against a local student with a fixed latency, and the cost of a cached repeat.

Run: ``pytest benchmarks/bench_prompt.py --benchmark-group-by=group``.

Group ``student_throughput``: a batch of 64 calls to a local OpenAI-compatible fake student that
answers after 20 ms, through the run's ledger (each call stored and debited in SQLite), at
concurrency 1, 4 and 16; plus the plain client (no store) at 16 as the reference for the store's
share. ``extra_info.calls_per_s`` is 64 / median round time; the latency bound is concurrency / 20 ms
(50, 200, 800 calls/s).

Group ``student_cached_repeat``: the same 64 calls again, all served from the store: no request
reaches the student and nothing is debited (checked), so the figure is the store lookup per call.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch.evaluators.prompt import StudentRequest
from reasearch.evaluators.prompt.testing import FakeStudentServer
from reasearch.runs import Run, Unit, open_store
from reasearch.runs.students import StudentLedger

N_CALLS = 64
LATENCY_S = 0.02


@pytest.fixture(scope="module")
def student() -> Iterator[FakeStudentServer]:
    answers = {f"q{i}": str(i) for i in range(N_CALLS)}
    with FakeStudentServer(answers, latency_s=LATENCY_S) as srv:
        yield srv


def _run(tmp_path: Path, srv: FakeStudentServer, concurrency: int) -> Run:
    data = tmp_path / "d.jsonl"
    data.write_text("".join(f'{{"input": "q{i}", "answer": "{i}"}}\n' for i in range(N_CALLS + 2)))
    return Run.create(open_store(tmp_path / "runs"), task_id="prompt/jsonl-v1", budget={"student_calls": 10**6},
                      task_params={"path": str(data), "student": "openai/fake", "base_url": srv.url,
                                   "concurrency": concurrency, "n_train": 1, "n_validation": 1})


def _batch(tag: str) -> list[StudentRequest]:
    return [StudentRequest("openai/fake", f"prompt {tag}. Answer:", f"q{i}") for i in range(N_CALLS)]


@pytest.mark.parametrize("concurrency", [1, 4, 16])
@pytest.mark.parametrize("path", ["ledger", "client"])
def test_student_throughput(benchmark, student: FakeStudentServer, tmp_path: Path, concurrency: int, path: str) -> None:
    if path == "client" and concurrency != 16:
        pytest.skip("the plain client is measured at the highest concurrency only (the store's share)")
    benchmark.group = "student_throughput"
    run = _run(tmp_path, student, concurrency)
    tags = itertools.count()
    caller = run.task.student_client() if path == "client" else None  # type: ignore[attr-defined]

    def one_batch() -> None:
        requests = _batch(str(next(tags)))  # a new prompt each round: nothing is cached
        ledger = caller if caller is not None else StudentLedger(run, step=0)
        replies = ledger.call_batch(requests)
        assert all(r.ok and not r.cached for r in replies)

    benchmark.pedantic(one_batch, rounds=5, iterations=1, warmup_rounds=1)
    if benchmark.stats is not None:
        benchmark.extra_info["calls_per_s"] = N_CALLS / benchmark.stats.stats.median
        benchmark.extra_info["latency_bound_calls_per_s"] = concurrency / LATENCY_S


def test_student_cached_repeat(benchmark, student: FakeStudentServer, tmp_path: Path) -> None:
    benchmark.group = "student_cached_repeat"
    run = _run(tmp_path, student, 16)
    requests = _batch("cached")
    StudentLedger(run, step=0).call_batch(requests)  # paid once
    paid, hits = run.used()[Unit.STUDENT_CALLS], student.paid_hits()

    def repeat() -> None:
        replies = StudentLedger(run, step=1).call_batch(requests)
        assert all(r.ok and r.cached for r in replies)

    benchmark.pedantic(repeat, rounds=10, iterations=1, warmup_rounds=1)
    assert run.used()[Unit.STUDENT_CALLS] == paid == N_CALLS and student.paid_hits() == hits  # cost nothing
    if benchmark.stats is not None:
        benchmark.extra_info["us_per_cached_call"] = benchmark.stats.stats.median / N_CALLS * 1e6
        benchmark.extra_info["student_calls_debited_by_repeats"] = run.used()[Unit.STUDENT_CALLS] - paid
