"""``txn_scheduling/v1``: the Workload API, trusted scoring, the harness, and evaluation in the sandbox."""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path

import numpy as np
import pytest

import reasearch
from reasearch.engine import SandboxConfig, SandboxPool
from reasearch.evaluators import Status, check_task
from reasearch.evaluators.txn_scheduling import (
    BEST_KNOWN_TOTAL,
    SEED_SCORE,
    WORKLOAD_NAMES,
    TxnSchedulingTask,
    Workload,
    adrs_score,
    load_workloads,
    workload_texts,
)
from reasearch.evaluators.txn_scheduling.harness import plain_schedule, run_schedules, split_result
from reasearch.evaluators.txn_scheduling.task import _compat_files


@pytest.fixture(scope="module")
def task() -> TxnSchedulingTask:
    return TxnSchedulingTask()


@pytest.fixture(scope="module")
def golden(shared_data: Path) -> list[dict]:
    return json.loads((shared_data / "txn" / "golden_makespans.json").read_text())["cases"]


@pytest.fixture(scope="module")
def full_golden(golden) -> tuple[list[list[int]], list[int]]:
    """The first full schedule of each workload in the golden file, and its makespan."""
    scheds, spans = [], []
    for name in WORKLOAD_NAMES:
        case = next(c for c in golden if c["workload"] == name and len(c["schedule"]) == 100)
        scheds.append(case["schedule"])
        spans.append(case["makespan"])
    return scheds, spans


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(SandboxConfig(workers=1, mode="auto")) as p:  # nsjail where it works
        yield p


# ---------------------------------------------------------------- Workload: the published API

def test_shipped_workloads_are_the_shared_data(shared_data: Path):
    assert workload_texts() == json.loads((shared_data / "txn" / "workloads.json").read_text())


def test_workload_published_api():
    w1, w2, w3 = load_workloads()
    assert (w1.num_txns, w2.num_txns, w3.num_txns) == (100, 100, 100)
    assert w1.txns[0][:3] == [("w", "17", 1, 16), ("r", "5", 2, 16), ("w", "3", 3, 16)]
    assert w2.txns[0] == [("r", "3", 1, 21), ("r", "40", 2, 21), ("w", "40", 3, 21)]
    assert w3.txns[0] == [("r", "4", 1, 9), ("w", "6", 9, 9)]
    assert w1.debug is False and w1.name == "workload_1"
    assert [w.lower_bound() for w in (w1, w2, w3)] == [16, 21, 9]
    assert [w.get_opt_seq_cost(list(range(100))) for w in (w1, w2, w3)] == [452, 38, 47]


def test_workload_accepts_the_published_json_text(golden):
    text = json.dumps(workload_texts()["workload_2"])
    w = Workload(text)
    for case in (c for c in golden if c["workload"] == "workload_2"):
        assert w.get_opt_seq_cost(case["schedule"]) == case["makespan"]


def test_workload_pickles_and_stays_exact(golden):
    w = pickle.loads(pickle.dumps(load_workloads()[0]))
    assert w.name == "workload_1"
    for case in (c for c in golden if c["workload"] == "workload_1"):
        assert w.get_opt_seq_cost(case["schedule"]) == case["makespan"]


def test_workload_incremental_api(full_golden):
    w = load_workloads()[2]
    seq, span = full_golden[0][2], full_golden[1][2]
    state = w.new_state()
    for t in seq[:50]:
        w.extend(state, t)
    fork = state.copy()
    assert w.peek_all(state) == [w.get_opt_seq_cost(seq[:50] + [t]) for t in range(100)]
    for t in seq[50:]:
        assert w.peek(state, t) == w.extend(state, t)
    assert state.makespan == span and state.sequence == seq
    assert len(fork) == 50 and fork.makespan == w.get_opt_seq_cost(seq[:50])


# ---------------------------------------------------------------- trusted scoring

def test_score_is_the_recomputed_total(task, full_golden):
    scheds, spans = full_golden
    res = task.score_solution({"schedules": scheds, "reported": [1, 1, 1]})
    assert res.status is Status.OK
    assert res.score == sum(spans)
    assert res.normalized_score == pytest.approx(BEST_KNOWN_TOTAL / sum(spans))
    assert [res.metrics[f"makespan_{n}"] for n in WORKLOAD_NAMES] == spans
    assert res.metrics["sequential_makespan"] == 537 and res.metrics["lower_bound"] == 46
    assert res.metrics["reported_mismatches"] == 3
    assert "self-reported makespans differ (ignored)" in res.feedback
    assert f"workload_1 reported 1, recomputed {spans[0]}" in res.feedback
    assert res.solution == {"schedules": scheds}


def test_honest_report_has_no_mismatch(task, full_golden):
    scheds, spans = full_golden
    res = task.score_solution({"schedules": scheds, "reported": [float(s) for s in spans]})
    assert res.metrics["reported_mismatches"] == 0 and "differ" not in res.feedback


def test_adrs_score_matches_the_published_formula():
    # 0 at sequential order, 100 at 46 + 0.1 * (537 - 46) = 95.1, linear between, clamped.
    assert adrs_score(537, 537, 46) == 0.0
    assert adrs_score(95.1, 537, 46) == pytest.approx(100.0)
    assert adrs_score(316.05, 537, 46) == pytest.approx(50.0)
    assert adrs_score(600, 537, 46) == 0.0 and adrs_score(50, 537, 46) == 100.0


def _with(scheds, i, sched):
    out = [list(s) for s in scheds]
    out[i] = sched
    return {"schedules": out}


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda s: _with(s, 0, s[0][:99]),
            "workload_1: 99 entries, but every one of the 100 transactions must appear once (missing: ",
        ),
        (
            lambda s: _with(s, 1, s[1][:50] + [s[1][3]] + s[1][51:]),
            "workload_2: transaction {dup} appears twice (entries 3 and 50)",
        ),
        (lambda s: _with(s, 2, s[2][:-1] + [100]), "workload_3: entry 99 is 100, outside 0..99"),
        (lambda s: _with(s, 2, [-1] + s[2][1:]), "workload_3: entry 0 is -1, outside 0..99"),
        (lambda s: _with(s, 0, [True] + s[0][1:]), "workload_1: entry 0 is True, not a transaction index"),
        (lambda s: _with(s, 0, [float(s[0][0])] + s[0][1:]), "workload_1: entry 0 is"),
        (
            lambda s: _with(s, 1, {"error": "returned NoneType, not a list"}),
            "workload_2: get_best_schedule returned NoneType",
        ),
        (lambda s: _with(s, 1, "0 1 2"), "workload_2: the schedule must be a list"),
        (lambda s: {"schedules": s[:2]}, "expected 3 schedules"),
        (lambda s: {"schedule": s}, "expected {{'schedules'"),
    ],
)
def test_broken_schedules_are_invalid_and_say_where(task, full_golden, make, message):
    scheds = full_golden[0]
    res = task.score_solution(make(scheds))
    assert res.status is Status.INVALID and res.score is None
    assert message.format(dup=scheds[1][3]) in res.feedback


def test_missing_transactions_are_listed(task, full_golden):
    scheds = full_golden[0]
    res = task.score_solution(_with(scheds, 0, [t for t in scheds[0] if t not in (4, 77)]))
    assert "(missing: 4, 77)" in res.feedback


def test_every_broken_workload_is_reported(task, full_golden):
    scheds = full_golden[0]
    res = task.score_solution({"schedules": [scheds[0][:10], scheds[1], scheds[2] + [0]]})
    assert res.status is Status.INVALID and res.metrics["invalid_workloads"] == 2
    assert "workload_1:" in res.feedback and "workload_3:" in res.feedback and "workload_2:" not in res.feedback


# ---------------------------------------------------------------- harness (runs in the sandbox; tested in-process)

def test_split_and_plain_schedule():
    assert split_result((12, [2, 0, 1])) == (12, [2, 0, 1])
    assert split_result([2, 0, 1]) == (None, [2, 0, 1])
    arr = np.array([2, 0, 1])
    assert split_result((np.int64(5), arr))[0] == 5
    assert plain_schedule(arr) == [2, 0, 1] and all(type(x) is int for x in plain_schedule(arr))
    assert plain_schedule([np.int32(3), 1.5, None, "x", object()])[:4] == [3, 1.5, None, "x"]
    assert plain_schedule(None) == {"error": "returned NoneType, not a list of transaction indices"}
    assert plain_schedule(range(3)) == [0, 1, 2]


def test_harness_seeds_and_returns_plain_lists(task):
    def candidate(workload, num_seqs):
        order = list(np.random.permutation(workload.num_txns))
        random.shuffle(order)
        return float(workload.get_opt_seq_cost(order)), np.array(order, dtype=np.int16)

    payload = task.payload(7)
    out = run_schedules(candidate, payload)
    assert out == run_schedules(candidate, payload)  # seeded: same payload, same answer
    random.seed(7)
    np.random.seed(7)
    expected = []
    for _w in load_workloads():
        order = list(np.random.permutation(100))
        random.shuffle(order)
        expected.append([int(x) for x in order])
    assert out["schedules"] == expected
    assert out["reported"] == [float(w.get_opt_seq_cost(s)) for w, s in zip(load_workloads(), expected, strict=True)]
    assert task.score_solution(out).score == sum(out["reported"])


def test_harness_reported_makespan_is_finite_or_none():
    answers = iter([(10**400, list(range(100))), (float("nan"), list(range(100))), (np.float32(7.5), list(range(100)))])
    out = run_schedules(lambda w, n: next(answers), TxnSchedulingTask().payload(0))
    assert out["reported"] == [None, None, 7.5]


def test_harness_passes_num_seqs():
    seen = []
    out = run_schedules(
        lambda w, n: seen.append(n) or list(range(w.num_txns)), TxnSchedulingTask(num_seqs=3).payload(0)
    )
    assert seen == [3, 3, 3] and out["reported"] == [None, None, None]


def test_compat_modules_give_the_published_imports():
    files = dict(_compat_files())
    ns: dict = {}
    exec(files["workloads.py"].decode(), ns)
    sim: dict = {}
    exec(files["txn_simulator.py"].decode(), sim)
    for i, w in enumerate(load_workloads(), start=1):
        again = sim["Workload"](ns[f"WORKLOAD_{i}"])
        assert again.txns == w.txns


def test_params_are_validated():
    with pytest.raises(reasearch.errors.ConfigError, match="num_seqs"):
        _ = TxnSchedulingTask(num_seqs=0).spec
    with pytest.raises(reasearch.errors.ConfigError, match="time_limit_s"):
        _ = TxnSchedulingTask(time_limit_s=-1).spec


def test_registered():
    task = reasearch.make("txn_scheduling/v1", num_seqs=4)
    assert isinstance(task, TxnSchedulingTask) and task.params.num_seqs == 4
    assert "txn_scheduling/v1" in reasearch.list_tasks()
    assert "get_best_schedule" in task.describe() and "peek" in task.describe()


# ---------------------------------------------------------------- evaluation in the sandbox

def test_check_task(task, pool):
    report = check_task(task, executor=pool)
    assert report.ok and report.seed_result is not None
    assert report.seed_result.score == SEED_SCORE
    assert report.seed_result.metrics["total_makespan"] == SEED_SCORE


PUBLISHED_STYLE = '''
import random
from txn_simulator import Workload
from workloads import WORKLOAD_1, WORKLOAD_2, WORKLOAD_3


def get_best_schedule(workload, num_seqs):
    assert isinstance(workload, Workload) and num_seqs == 10
    assert Workload(WORKLOAD_1).num_txns == workload.num_txns
    seq = list(range(workload.num_txns))
    random.shuffle(seq)
    return 1, seq  # a lie: the evaluator recomputes
'''


def test_published_style_program_runs_unchanged_and_cannot_lie(task, pool):
    res = task.evaluate(PUBLISHED_STYLE, seed=3, executor=pool)
    assert res.status is Status.OK, res.feedback
    random.seed(3)
    expected = []
    for w in load_workloads():
        seq = list(range(100))
        random.shuffle(seq)
        expected.append(w.get_opt_seq_cost(seq))
    assert res.score == sum(expected) and res.score > 3
    assert res.metrics["reported_mismatches"] == 3 and "differ (ignored)" in res.feedback


def test_short_schedule_in_sandbox_is_invalid(task, pool):
    res = task.evaluate("def get_best_schedule(workload, num_seqs):\n    return list(range(99))\n", executor=pool)
    assert res.status is Status.INVALID
    assert "workload_1: 99 entries" in res.feedback and "missing: 99" in res.feedback


def test_time_limit_is_a_parameter(pool):
    slow = "import time\n\ndef get_best_schedule(workload, num_seqs):\n    time.sleep(30)\n"
    res = TxnSchedulingTask(time_limit_s=0.5).evaluate(slow, executor=pool)  # the sleeper waits it out: keep it short
    assert res.status is Status.TIMEOUT and res.score is None, (res.status, res.feedback)
    assert "limit of 0.5 s" in res.feedback, res.feedback  # the parameter's limit killed it, not the default's


def test_cli_eval(pool, tmp_path, monkeypatch, capsys):
    from reasearch import cli
    from reasearch.evaluators import base

    monkeypatch.setattr(base, "default_runner", lambda: pool)
    path = tmp_path / "cand.py"
    path.write_text(TxnSchedulingTask().seed_program())
    assert cli.main(["eval", "txn_scheduling/v1", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "OK" and out["score"] == SEED_SCORE
    assert out["provenance"]["task_id"] == "txn_scheduling/v1"
    path.write_text("def get_best_schedule(workload, num_seqs):\n    return [0] * 100\n")
    assert cli.main(["eval", "txn_scheduling/v1", str(path), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "INVALID" and "transaction 0 appears twice (entries 0 and 1)" in out["feedback"]


def test_evaluator_hash_covers_the_simulator(task):
    from reasearch.evaluators.base import Task

    assert task.evaluator_hash() != Task.evaluator_hash(task)
    assert len(task.evaluator_hash()) == 16


def test_render_png(task, full_golden, tmp_path):
    res = task.score_solution({"schedules": full_golden[0]})
    out = task.render_png(res, tmp_path / "gantt.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    with pytest.raises(ValueError, match="no solution"):
        task.render_png(task.score_solution(None), tmp_path / "bad.png")


def test_seed_score_equals_the_greedy_priced_by_full_recomputation():
    # The published greedy prices each sampled transaction with get_opt_seq_cost(prefix + [t]); the seed
    # program uses peek. Same draws, same choices: the recorded seed score must come out of both.
    random.seed(0)
    total = 0
    for w in load_workloads():
        first = random.randint(0, w.num_txns - 1)
        seq, remaining = [first], [t for t in range(w.num_txns) if t != first]
        while remaining:
            sample = random.sample(remaining, min(10, len(remaining)))
            best = min(sample, key=lambda t: w.get_opt_seq_cost(seq + [t]))
            seq.append(best)
            remaining.remove(best)
        total += w.get_opt_seq_cost(seq)
    assert total == SEED_SCORE
