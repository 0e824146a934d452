"""Numbers comparable with published tables: EPLB's t_alg without the transport, named score variants,
and what "no tolerance" means in circle packing."""

from __future__ import annotations

import json
import statistics
import time

import numpy as np
import pytest

import reasearch
from reasearch.errors import ConfigError
from reasearch.evaluators.circle_packing import CirclePackingTask
from reasearch.evaluators.eplb._timing import (
    MAX_REPLAYS,
    MIN_T_ALG_S,
    REPLAY_CAP_S,
    CallTiming,
    Timing,
    decide,
    replay_plan,
    replay_wait_ns,
    reported_seconds,
)
from reasearch.evaluators.eplb.task import SCORE_VARIANTS, adrs_leaderboard_score
from reasearch.evaluators.result import Status
from reasearch.evaluators.txn_scheduling import SEED_SCORE, adrs_score
from reasearch.native.eplb import rebalance_experts

CONFIG = (288, 8, 4, 32)


@pytest.fixture(scope="module")
def sandbox():  # type: ignore[no-untyped-def]
    from reasearch.evaluators.base import default_runner

    return default_runner()


# ------------------------------------------------------------------------------------- EPLB timing

LIBRARY = "from reasearch.native.eplb import rebalance_experts\n"


def test_t_alg_is_the_algorithm_not_the_transport(sandbox):
    """t_alg against the same algorithm timed in-process on the same windows (medians over 10 windows).

    The sandbox's clock (the claims) is checked against the in-process time on every attempt. Where
    the calibration is usable, t_alg is the claims and must meet the same bound; on a machine too
    loaded to calibrate, t_alg falls back to the round trips and says so (``decide``'s unit test covers
    both branches deterministically). The shared machine is noisy: an attempt whose windows were
    disturbed is retried (at most 4 attempts). The parent's round trip (the former t_alg, ~0.6 ms
    above the algorithm on a quiet machine) is measurably larger than the claims on every attempt.
    """
    task = reasearch.make("eplb/v1", num_windows=11)
    windows, _ = task.trace_windows()
    seen = []
    for _ in range(4):
        in_process = []
        for w in windows[:-1]:
            t0 = time.perf_counter()
            rebalance_experts(w, *CONFIG)
            in_process.append(time.perf_counter() - t0)
        res = task.evaluate(LIBRARY, executor=sandbox)
        assert res.status is Status.OK, res.feedback
        m = res.metrics
        assert m["combined"] == pytest.approx((m["bal_expert"] + 0.002 / m["t_alg_s"]) / 2)
        claimed = statistics.median(m["t_claimed_per_window_s"])
        t_alg = statistics.median(m["t_alg_per_window_s"])
        t_call = statistics.median(m["t_call_per_window_s"])
        reference = statistics.median(in_process)
        seen.append((m["t_alg_source"], claimed, t_alg, t_call, reference))
        if m["t_alg_source"] == "sandbox clock":  # an honest candidate keeps (almost) all its claims
            ok = t_alg < reference + 0.5e-3 and m["t_alg_bounded_windows"] <= 3
        else:
            assert m["t_alg_source"].startswith("round trip") and m["t_alg_per_window_s"] == m["t_call_per_window_s"]
            ok = True
        # the sandbox's clock times the algorithm alone; the round trip is measurably larger
        if ok and claimed < reference + 0.5e-3 and t_call - claimed > 0.1e-3:
            break
    else:
        pytest.fail(f"source, claimed, t_alg, t_call, in-process medians (s) per attempt: {seen}")


CHEAT = """
import time
import reasearch.evaluators.eplb.harness as _h
from reasearch.native.eplb import rebalance_experts as _lib

_h._CLOCK = lambda: 0  # report every call as taking no time

def rebalance_experts(weight, *args):
    t = time.perf_counter()
    while time.perf_counter() - t < 0.002:  # 2 ms of real work the clock no longer sees
        pass
    return _lib(weight, *args)
"""


def test_a_candidate_that_stops_the_clock_is_bounded_by_the_parent(sandbox):
    task = reasearch.make("eplb/v1", num_windows=8)
    res = task.evaluate(CHEAT, executor=sandbox)
    assert res.status is Status.OK, res.feedback
    m = res.metrics
    assert m["t_claimed_per_window_s"] == [0.0] * 7
    slack, transport = m["t_transport_slack_s"], m["t_transport_s"]
    if m["t_alg_source"] != "sandbox clock":  # too loaded to calibrate: the parent's round trips count
        assert m["t_alg_per_window_s"] == m["t_call_per_window_s"] and m["t_alg_bounded_windows"] == 7
        return
    assert 0 <= slack <= max(0.25 * statistics.median(w - transport for w in m["t_call_per_window_s"]), 50e-6)
    floors = [w - transport - slack for w in m["t_call_per_window_s"]]
    assert m["t_alg_bounded_windows"] == sum(f > 0 for f in floors) >= 4  # the claims of 0 s are overruled
    for t_alg, floor in zip(m["t_alg_per_window_s"], floors):
        assert t_alg == pytest.approx(max(floor, MIN_T_ALG_S), abs=1e-12)
    assert m["t_alg_s"] > 1.0e-3  # its 2 ms of work per call are not hidden


def test_timing_rules():
    rounds = [[0.0006, 0.0007, 0.0006, 0.0007, 0.00065], [0.00062, 0.00071, 0.00061, 0.0007, 0.00066]]
    calls = [CallTiming(0.003, 0.0024), CallTiming(0.0031, 0.0024)]
    honest = decide(calls, rounds)
    assert honest.source == "sandbox clock" and honest.bounded_calls == 0 and honest.t_alg == [0.0024, 0.0024]
    assert honest.transport_s == 0.00065 and 0 < honest.slack_s < 0.0002
    liar = decide([CallTiming(0.003, 0.0), CallTiming(0.0031, 0.0024), CallTiming(0.0031, 0.0024)], rounds)
    assert liar.bounded_calls == 1 and liar.t_alg[1:] == [0.0024, 0.0024]  # lies on one call: caught there
    assert liar.t_alg[0] == pytest.approx(0.003 - 0.00065 - liar.slack_s) and liar.t_alg[0] > 0.0021
    uniform = decide([CallTiming(0.003, 0.0012), CallTiming(0.0031, 0.0012)], rounds)  # halves every claim
    assert uniform.bounded_calls == 2 and min(uniform.t_alg) > 0.0021
    spike = decide([CallTiming(0.003, 0.0024), CallTiming(0.013, 0.0024), CallTiming(0.0031, 0.0023)], rounds)
    assert spike.bounded_calls == 0 and spike.t_alg == [0.0024, 0.0024, 0.0023]  # a transport spike is not a lie
    low = decide([CallTiming(0.003, 0.0024), CallTiming(0.003, 0.0012), CallTiming(0.0031, 0.0023)], rounds)
    assert low.bounded_calls == 1 and low.t_alg[1] == pytest.approx(0.003 - 0.00065 - low.slack_s)  # out of line
    over = decide([CallTiming(0.003, 0.5)], rounds[:1])
    assert over.t_alg == [0.003] and over.bounded_calls == 0  # never above the round trip
    assert decide([CallTiming(0.003, None)], rounds).bounded_calls == 1
    assert decide([CallTiming(0.003, 0.001)], []) == Timing([0.003], 1, "round trip (no calibration)", None, None)
    contradicted = decide([CallTiming(0.0005, 0.0)], [[0.0008, 0.0008]])  # replays slower than the call itself
    assert contradicted.t_alg == [0.0005] and contradicted.source.startswith("round trip (the calibration")
    noisy = decide([CallTiming(0.003, 0.0)], [[0.0001, 0.02, 0.0001, 0.03, 0.0005], [0.002] * 5])
    assert noisy.t_alg == [0.003] and noisy.source == "round trip (the machine was too noisy to calibrate)"
    for bad in (-1, True, 1.5, "10", None, 10**15):
        assert reported_seconds(bad) is None
    assert reported_seconds(np.int64(2_000_000)) == 0.002
    many = [CallTiming(0.01, 0.009)] * 100
    plan = replay_plan(many)
    assert len(plan) == MAX_REPLAYS and plan[0] == 0 and plan[-1] == 99
    assert replay_wait_ns(CallTiming(1.0, 0.5)) == int(REPLAY_CAP_S * 1e9)
    assert replay_wait_ns(CallTiming(1.0, None)) == 0


# ----------------------------------------------------------------------------------- score variants


def test_adrs_eplb_formula_by_hand():
    assert adrs_leaderboard_score(0.5, 0.0005) == pytest.approx(45 + 10)  # speed capped at 1 ms
    assert adrs_leaderboard_score(0.5, 0.004) == pytest.approx(45 + 2.5)
    assert adrs_leaderboard_score(0.5, 0.02) == pytest.approx(45 + 0.5 - 0.4)  # slow penalty past 10 ms
    assert adrs_leaderboard_score(0.5, 2.0) == pytest.approx(45 + 0.005 - 20)  # penalty capped at 20


def _answers(task):  # type: ignore[no-untyped-def]
    windows, _ = task.trace_windows()
    out = []
    for w in windows[:-1]:
        phy2log, log2phy, logcnt = rebalance_experts(w, *CONFIG)
        out.append({"phy2log": phy2log, "log2phy": log2phy, "logcnt": logcnt})
    return out


@pytest.mark.parametrize("t", [0.0005, 0.004, 0.03])
def test_eplb_variants_from_the_same_figures(t):
    default = reasearch.make("eplb/v1", num_windows=4)
    answers = _answers(default)
    data = {"placements": answers, "t_alg_s": [t] * len(answers)}
    base = default.score_solution(data)
    m = base.metrics
    assert base.score == m["combined"] == pytest.approx((m["bal_expert"] + 0.002 / t) / 2)
    for name in SCORE_VARIANTS:
        res = reasearch.make("eplb/v1", num_windows=4, score=name).score_solution(data)
        expected = {"combined": m["combined"], "adrs": adrs_leaderboard_score(m["bal_gpu"], t),
                    "bal_gpu": m["bal_gpu"], "bal_expert": m["bal_expert"]}[name]
        assert res.score == pytest.approx(expected, rel=1e-12), name
        assert res.metrics["adrs_score"] == pytest.approx(adrs_leaderboard_score(m["bal_gpu"], t))
        assert res.metrics["score_variant"] == name


def test_unknown_variants_are_config_errors():
    with pytest.raises(ConfigError, match="score must be one of"):
        _ = reasearch.make("eplb/v1", score="fastest").spec
    with pytest.raises(ConfigError, match="score must be one of"):
        _ = reasearch.make("txn_scheduling/v1", score="ADRS").spec


def test_txn_adrs_variant_through_the_cli(tmp_path, capsys):
    from reasearch.cli import main

    task = reasearch.make("txn_scheduling/v1", score="adrs")
    assert task.spec.direction == "maximize" and task.spec.seed_score == pytest.approx(adrs_score(SEED_SCORE, 537, 46))
    assert "adrs" in task.describe() and "ADRS-Leaderboard" in task.describe()
    path = tmp_path / "seed.py"
    path.write_text(task.seed_program())
    assert main(["eval", "txn_scheduling/v1", str(path), "-p", "score=adrs", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "OK" and out["metrics"]["total_makespan"] == SEED_SCORE
    assert out["score"] == pytest.approx(adrs_score(SEED_SCORE, 537, 46)) == pytest.approx(
        (537 - 358) / (537 - (46 + 0.1 * (537 - 46))) * 100)
    default = reasearch.make("txn_scheduling/v1")
    assert default.spec.direction == "minimize" and default.spec.params["score"] == "makespan"


# ------------------------------------------------------------------------- circle packing tolerance


def test_rounding_level_overlap_is_invalid_and_says_so():
    task = CirclePackingTask(n=2)
    centers = np.array([[0.25, 0.5], [0.75, 0.5]])
    exact = task.score_solution({"centers": centers, "radii": np.array([0.25, 0.25])})
    assert exact.status is Status.OK and exact.score == 0.5  # touching in float64 is fine
    res = task.score_solution({"centers": centers, "radii": np.array([0.25, 0.25 + 1e-12])})
    assert res.status is Status.INVALID and res.score is None
    assert "only by float64 rounding" in res.feedback and "IEEE float64" in res.feedback
    assert res.metrics["rounding_only"] is True
    assert res.metrics["lp_repaired_sum"] == pytest.approx(0.5, abs=1e-8) and res.metrics["lp_repaired_sum"] <= 0.5
    assert "0.5000000" in res.feedback
    big = task.score_solution({"centers": centers, "radii": np.array([0.25, 0.26])})
    assert big.status is Status.INVALID and "rounding" not in big.feedback and "rounding_only" not in big.metrics


def test_no_tolerance_is_documented_as_ieee_float64():
    text = CirclePackingTask(n=26).describe()
    assert "IEEE float64" in text and "NO tolerance" in text and "num_circles" in text


GARBLED_CLOCK = """
import itertools
import reasearch.evaluators.eplb.harness as _h
from reasearch.native.eplb import rebalance_experts

_ticks = itertools.count(10**15, -10**14)
_h._CLOCK = lambda: next(_ticks)  # runs backwards: every claimed time is negative
"""


def test_a_garbled_clock_is_overruled_not_believed(sandbox):
    res = reasearch.make("eplb/v1", num_windows=4).evaluate(GARBLED_CLOCK, executor=sandbox)
    assert res.status is Status.OK, res.feedback
    m = res.metrics
    assert m["t_claimed_per_window_s"] == [None, None, None] and m["t_alg_bounded_windows"] == 3
    assert all(MIN_T_ALG_S <= t <= w for t, w in zip(m["t_alg_per_window_s"], m["t_call_per_window_s"]))
