"""Numbers comparable with published tables: EPLB's t_alg without the transport, named score variants,
and what "no tolerance" means in circle packing."""

from __future__ import annotations

import json
import random
import statistics
import time

import numpy as np
import pytest

import reasearch
from reasearch.errors import ConfigError
from reasearch.evaluators.circle_packing import CirclePackingTask
from reasearch.evaluators.eplb._timing import (
    CALIBRATION_SOURCE,
    MAX_REPLAYS,
    MIN_T_ALG_S,
    NOISE_FLOOR_S,
    REPLAY_CAP_S,
    CallTiming,
    Timing,
    answer_signature,
    decide,
    replay_plan,
    replay_wait_ns,
    reported_seconds,
    signature_bytes,
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
    loaded to calibrate, t_alg is floored or falls back to the round trips and says so (``decide``'s unit
    tests cover every branch deterministically). The shared machine is noisy: an attempt whose windows were
    disturbed is retried (at most 6 attempts). The parent's round trip (the former t_alg, ~0.6 ms
    above the algorithm on a quiet machine) is measurably larger than the claims on every attempt.
    """
    task = reasearch.make("eplb/v1", num_windows=11)
    windows, _ = task.workload_windows()
    seen = []
    for _ in range(6):
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
        elif m["t_alg_source"].startswith("sandbox clock, floored at 4x the allowance"):  # a noisy machine
            # each call counts the floor, but never more than its own round trip
            floor = m["t_alg_floor_s"]
            assert all(min(floor, w) - 1e-12 <= t <= w + 1e-12
                       for t, w in zip(m["t_alg_per_window_s"], m["t_call_per_window_s"], strict=False))
            ok = False  # the floor, not the claims: try again
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
    if m["t_alg_source"].startswith("round trip"):  # too loaded to calibrate: the parent's round trips count
        assert m["t_alg_per_window_s"] == m["t_call_per_window_s"] and m["t_alg_bounded_windows"] == 7
        return
    _check_bounded(m)
    assert m["t_alg_bounded_windows"] >= 4  # the claims of 0 s are overruled
    assert m["t_alg_s"] > 1.0e-3  # its 2 ms of work per call are not hidden


def _check_bounded(m):  # type: ignore[no-untyped-def]
    """Every call counts at least what the rule of ``_timing``'s docstring (steps 5-7) gives it, re-derived
    from the recorded figures: its claim raised by the mean excess beyond the allowance and its own excess
    beyond the per-call limit (step 5); each raise capped by the call's own CPU beyond its claim, what the
    caps cut given back up to the forked helpers' CPU, the raises summed capped by the calls' CPU less eps
    each (step 6); then by the kernel's account of the session's CPU less one allowance per call (step 5);
    never below its floor (step 7) nor above its round trip. Every factor is the rule's own, not a looser
    model: a looser one (helpers' CPU spread evenly, no kernel cap) failed on a loaded machine, where the
    walls outgrow the CPU and these caps bind (issue 27 item 5)."""
    limit, floor, slack = m["t_call_limit_s"], m["t_alg_floor_s"], m["t_transport_slack_s"]
    assert 0 < slack <= limit and floor == pytest.approx(4 * slack)
    assert all(f <= floor + 1e-12 for f in m["t_alg_floor_per_window_s"])
    walls, refs = m["t_call_per_window_s"], m["t_transport_per_window_s"]
    claims = m["t_claimed_per_window_s"]
    known = [i for i, c in enumerate(claims) if c is not None]  # no usable claim: w - e - C, nothing to raise
    shift = max(0.0, (m["t_excess_s"] or 0.0) - slack)
    raises = {i: shift + max(0.0, walls[i] - claims[i] - refs[i] - limit) for i in known}
    algs, helpers_cpu = m["cpu_alg_per_window_s"], m["cpu_descendants_s"]
    if known and algs and None not in algs and helpers_cpu is not None:  # step 6
        capped = {i: min(r, max(0.0, algs[i] - claims[i])) for i, r in raises.items()}
        lost = sum(raises[i] - capped[i] for i in known)
        if lost > 0:
            back = min(1.0, max(0.0, helpers_cpu) / lost)
            capped = {i: k + back * (raises[i] - k) for i, k in capped.items()}
        hidden = sum(algs[i] - claims[i] for i in known) + max(0.0, helpers_cpu) - len(known) * m["cpu_slack_s"]
        total = sum(capped.values())
        if total > 0:
            capped = {i: k * min(1.0, max(0.0, hidden) / total) for i, k in capped.items()}
        raises = capped
    total = sum(raises.values())
    if m["cpu_for_calls_s"] is not None and total > 0:  # the kernel's account
        hidden = max(0.0, m["cpu_for_calls_s"] - sum(claims[i] for i in known) - len(known) * slack)
        raises = {i: r * min(1.0, hidden / total) for i, r in raises.items()}
    for i, (t_alg, w, f) in enumerate(zip(m["t_alg_per_window_s"], walls, m["t_alg_floor_per_window_s"], strict=False)):
        lower = claims[i] + raises[i] if i in raises else w - refs[i] - limit
        assert min(w, max(lower, f)) - 1e-9 <= t_alg <= w, (i, t_alg, w, lower, f)


def _honest(rng, n=10, alg=0.001, transport=0.0015, noise=50e-6):
    """Calls of an honest candidate and their replays: transport samples around ``transport``."""
    def sample():
        return transport + abs(rng.gauss(0, noise))  # preemption only adds time

    calls = [CallTiming(alg + sample(), alg) for _ in range(n)]
    return calls, [[sample(), sample()] for _ in range(n)]


def test_timing_rules_keep_honest_claims():
    rng = random.Random(7)
    calls, echoes = _honest(rng)
    honest = decide(calls, echoes)
    assert honest.source == "sandbox clock" and honest.bounded_calls == 0 and honest.t_alg == [0.001] * 10
    assert honest.transport_s == pytest.approx(0.0015, abs=1e-4) and NOISE_FLOOR_S <= honest.slack_s < 2e-4
    assert len(honest.transport_per_call_s) == 10
    # a transport hiccup on one call raises that call only, by the hiccup beyond the per-call limit
    spike = decide([*calls[:3], CallTiming(calls[3].wall_s + 0.01, 0.001), *calls[4:]], echoes)
    assert spike.bounded_calls == 1 and spike.t_alg[:3] == [0.001] * 3 and spike.t_alg[4:] == [0.001] * 6
    assert 0.001 < spike.t_alg[3] < 0.001 + 0.01
    over = decide([CallTiming(c.wall_s, 0.5) for c in calls], echoes)  # never above the round trip
    assert over.t_alg == [c.wall_s for c in calls] and over.bounded_calls == 0


def _lie(rng: random.Random, calls: list[CallTiming], fraction: float, lie: float) -> list[CallTiming]:
    """``calls`` with the claims of a random ``fraction`` of them lowered by ``lie`` seconds."""
    liars = set(rng.sample(range(len(calls)), max(1, round(fraction * len(calls)))))
    return [CallTiming(c.wall_s, max(c.t_jail_s - lie, 0.0) if i in liars else c.t_jail_s) for i, c in enumerate(calls)]


@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.5, 1.0])
@pytest.mark.parametrize("lie", [30e-6, 100e-6, 300e-6, 0.001, 0.01])
def test_a_liar_keeps_at_most_the_allowance(fraction, lie):
    """Under-reporting, on every call or on some, by a little or a lot: the mean t_alg stays within the
    allowance (plus the calibration's own sampling error) of the true mean."""
    worst = 0.0
    for seed in range(20):
        rng = random.Random(seed)
        calls, echoes = _honest(rng, n=20)
        lied = _lie(rng, calls, fraction, lie)
        for cpu in (None, 20 * 0.001):  # the CPU account (its true work) never weakens the bound
            verdict = decide(lied, echoes, cpu)
            assert verdict.source == "sandbox clock"
            gain = 0.001 - statistics.fmean(verdict.t_alg)
            worst = max(worst, gain - verdict.slack_s)
            if fraction * lie > 3 * verdict.slack_s:
                assert verdict.bounded_calls > 0
    assert worst < 40e-6  # the calibration's sampling error of 20 calls against 40 replays


def test_the_cpu_account_caps_the_shift_not_the_bound():
    """Replays that ran under a lighter load than the calls make an honest candidate look like a liar
    (D high); the CPU its process tree used shows its claims could not hide that much."""
    rng = random.Random(5)
    calls, echoes = _honest(rng, n=20)
    drifted = [[e - 0.0005 for e in pair] for pair in echoes]  # the machine got quieter after the calls
    shifted = decide(calls, drifted)
    assert min(shifted.t_alg) > 0.0013 and shifted.bounded_calls == 20  # without the CPU account: raised
    honest = decide(calls, drifted, cpu_bound_s=20 * 0.001 + 0.0004)  # 20 us of CPU per call beyond claims
    assert honest.t_alg == [0.001] * 20 and honest.bounded_calls == 0
    liar = decide([CallTiming(c.wall_s, 0.0005) for c in calls], echoes, cpu_bound_s=20 * 0.001)
    assert statistics.fmean(liar.t_alg) >= 0.001 - liar.slack_s - 40e-6  # the CPU shows what it hid


def _with_cpu(rng, calls, echoes, alg_cpu=None, overhead=600e-6, noise=40e-6):  # type: ignore[no-untyped-def]
    """The calls with the CPU their process spent (harness ``overhead`` plus ``alg_cpu[i]``, default the
    claim), and each replay's harness CPU beyond its busy-wait (``overhead`` plus noise)."""
    alg_cpu = alg_cpu or [c.t_jail_s for c in calls]
    with_cpu = [
        CallTiming(c.wall_s, c.t_jail_s, overhead + a + rng.gauss(0, noise))
        for c, a in zip(calls, alg_cpu, strict=False)
    ]
    return with_cpu, [[overhead + rng.gauss(0, noise) for _ in e] for e in echoes]


def test_cpu_evidence_keeps_an_honest_claim_through_hiccups_and_a_noisy_calibration():
    rng = random.Random(11)
    calls, echoes = _honest(rng, n=20)
    # transport hiccups on 5 calls, and replays that ran on a quieter machine (the calls look 0.4 ms slow)
    hiccups = [CallTiming(c.wall_s + (0.004 if i % 4 == 0 else 0.0004), c.t_jail_s) for i, c in enumerate(calls)]
    without = decide(hiccups, echoes)
    assert without.bounded_calls >= 5 and statistics.fmean(without.t_alg) > 0.0012  # the wall alone raises them
    cpu_calls, overheads = _with_cpu(rng, hiccups, echoes)
    verdict = decide(cpu_calls, echoes, None, overheads, descendants_cpu_s=0.0)
    assert verdict.bounded_calls == 0 and verdict.t_alg == [0.001] * 20  # the process did not spend that time
    assert verdict.cpu_overhead_s == pytest.approx(600e-6, abs=60e-6) and verdict.cpu_slack_s >= NOISE_FLOOR_S
    # a noisy calibration (allowance 0.3 ms: the floor 1.2 ms is above the claims): the CPU vouches for them
    noisy_echoes = [[e[0] + 0.0003, e[1]] for e in echoes]  # the machine got 0.3 ms faster between the rounds
    floored = decide(calls, noisy_echoes)
    assert floored.floor_s > 0.001 and min(floored.t_alg) >= floored.floor_s
    cpu_calls, overheads = _with_cpu(rng, calls, noisy_echoes)
    kept = decide(cpu_calls, noisy_echoes, None, overheads, 0.0)
    assert kept.floor_s == floored.floor_s and kept.t_alg == [0.001] * 20 and kept.source == "sandbox clock"


def test_cpu_evidence_does_not_raise_a_multithreaded_claim():
    """Threads make the process's CPU exceed the call's wall time: the CPU caps nothing, the wall decides."""
    rng = random.Random(12)
    calls, echoes = _honest(rng, n=20, alg=0.002)
    cpu_calls, overheads = _with_cpu(rng, calls, echoes, alg_cpu=[0.004] * 20)  # two threads, 2 ms each
    verdict = decide(cpu_calls, echoes, None, overheads, 0.0)
    assert verdict.t_alg == [0.002] * 20 and verdict.bounded_calls == 0
    assert verdict.t_alg == decide(calls, echoes).t_alg


@pytest.mark.parametrize("fraction", [0.1, 0.5, 1.0])
@pytest.mark.parametrize("lie", [30e-6, 300e-6, 0.001, 0.01])
@pytest.mark.parametrize("where", ["process", "threads", "helper"])
def test_a_liar_keeps_at_most_the_allowance_with_cpu_evidence(fraction, lie, where):
    """The true work shows in the process's CPU (single-threaded, in threads: twice the CPU), or only in
    a forked helper's (the process's CPU is the harness's alone; the helpers' CPU shows at the session's
    close): the CPU evidence never lets a liar keep more than the wall rule allows."""
    worst = 0.0
    for seed in range(12):
        rng = random.Random(seed)
        calls, echoes = _honest(rng, n=20)
        lied = _lie(rng, calls, fraction, lie)
        work = {"process": [0.001] * 20, "threads": [0.002] * 20, "helper": [c.t_jail_s for c in lied]}[where]
        cpu_calls, overheads = _with_cpu(rng, lied, echoes, alg_cpu=work)
        helpers = (
            sum(c.t_jail_s - lc.t_jail_s for c, lc in zip(calls, lied, strict=False)) if where == "helper" else 0.0
        )
        verdict = decide(cpu_calls, echoes, None, overheads, helpers)
        assert verdict.source == "sandbox clock"
        worst = max(worst, 0.001 - statistics.fmean(verdict.t_alg) - verdict.slack_s)
    assert worst < 40e-6


def test_cpu_evidence_bounds_a_tiny_claim():
    """A liar claiming 20 us of a 600 us algorithm that a noisy calibration cannot check (4x the allowance
    is 1.2 ms): the CPU its process spent still shows the work; an honest 20 us claim keeps a floor."""
    rng = random.Random(13)
    calls, echoes = _honest(rng, n=20, alg=0.0006)
    noisy = [[e[0] + 0.0003, e[1]] for e in echoes]  # a drift of 0.3 ms between the replay rounds
    lied = [CallTiming(c.wall_s, 20e-6) for c in calls]
    cpu_calls, overheads = _with_cpu(rng, lied, noisy, alg_cpu=[0.0006] * 20)
    verdict = decide(cpu_calls, noisy, None, overheads, 0.0)
    assert verdict.floor_s > 0.001 and verdict.source.startswith("sandbox clock, floored")
    eps = verdict.cpu_slack_s
    assert all(t >= max(4 * eps, 0.0006 - max(eps, 4 * 60e-6) - 3 * 40e-6) for t in verdict.t_alg)  # per call
    assert statistics.fmean(verdict.t_alg) >= 0.0006 - eps - 30e-6  # on the mean: at most the CPU allowance
    tiny, overheads = _with_cpu(rng, [CallTiming(c.wall_s - 0.00058, 20e-6) for c in calls], noisy)
    honest = decide(tiny, noisy, None, overheads, 0.0)
    assert all(t == pytest.approx(4 * honest.cpu_slack_s) for t in honest.t_alg)  # an unverifiable time: the floor


def test_timing_rules_fall_back_and_say_why():
    rng = random.Random(3)
    calls, echoes = _honest(rng)
    assert decide(calls, [[] for _ in calls]) == Timing([c.wall_s for c in calls], 10, "round trip (no calibration)",
                                                        None, None)
    assert decide(calls, [[e[0]] for e in echoes]).source == "round trip (no calibration)"  # no pairs: no noise figure
    noisy = decide(calls, [[0.0001, 0.02] if i % 2 else [0.03, 0.0005] for i in range(10)])
    assert noisy.t_alg == [c.wall_s for c in calls] and noisy.bounded_calls == 10
    assert noisy.source.startswith("round trip (the machine was too noisy to calibrate: allowance ")
    assert "4x that reaches the median round trip" in noisy.source
    # below 4x the allowance a time cannot be verified: a 20 us claim (honest or not) counts that floor
    fast = decide([CallTiming(c.wall_s - 0.00098, 0.00002) for c in calls], echoes)
    assert fast.source.startswith("sandbox clock, floored at 4x the allowance (")
    assert fast.t_alg == [4 * fast.slack_s] * 10 and fast.bounded_calls == 10
    garbled = decide([CallTiming(c.wall_s, None) for c in calls], echoes)
    assert garbled.bounded_calls == 10 and garbled.source == "sandbox clock"
    refs = garbled.transport_per_call_s
    assert all(c.wall_s - e - 0.001 < t < c.wall_s for c, e, t in zip(calls, refs, garbled.t_alg, strict=False))
    assert decide(calls[:1], [[]]).source == "round trip (no calibration)"
    with pytest.raises(ValueError, match="2 replay lists for 10 calls"):
        decide(calls, echoes[:2])


def test_timing_helpers():
    for bad in (-1, True, 1.5, "10", None, 10**15):
        assert reported_seconds(bad) is None
    assert reported_seconds(np.int64(2_000_000)) == 0.002
    assert replay_plan(5) == [0, 1, 2, 3, 4]
    plan = replay_plan(100, random.Random(1))
    assert len(plan) == MAX_REPLAYS == len(set(plan)) and plan == sorted(plan) and plan != list(range(MAX_REPLAYS))
    assert replay_wait_ns(CallTiming(1.0, 0.5)) == int(REPLAY_CAP_S * 1e9)
    assert replay_wait_ns(CallTiming(1.0, None)) == 0
    sig = answer_signature({"phy2log": np.zeros((2, 3), np.int16), "log2phy": np.zeros((2, 4, 1), np.int32),
                            "logcnt": np.zeros((2, 4), np.float32)})
    assert sig == [[[2, 3], "<i2"], [[2, 4, 1], "<i4"], [[2, 4], "<f4"]]
    assert signature_bytes(sig) == 12 + 32 + 32


# ----------------------------------------------------------------------------------- score variants


def test_adrs_eplb_formula_by_hand():
    assert adrs_leaderboard_score(0.5, 0.0005) == pytest.approx(45 + 10)  # speed capped at 1 ms
    assert adrs_leaderboard_score(0.5, 0.004) == pytest.approx(45 + 2.5)
    assert adrs_leaderboard_score(0.5, 0.02) == pytest.approx(45 + 0.5 - 0.4)  # slow penalty past 10 ms
    assert adrs_leaderboard_score(0.5, 2.0) == pytest.approx(45 + 0.005 - 20)  # penalty capped at 20


def _answers(task):  # type: ignore[no-untyped-def]
    windows, _ = task.workload_windows()
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
    with pytest.raises(ConfigError, match="parameter score of eplb/v1 takes one of .*not 'fastest'"):
        _ = reasearch.make("eplb/v1", score="fastest").spec
    with pytest.raises(ConfigError, match="parameter score of txn_scheduling/v1 takes one of .*not 'ADRS'"):
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
    assert all(MIN_T_ALG_S <= t <= w for t, w in zip(m["t_alg_per_window_s"], m["t_call_per_window_s"], strict=False))
    if not m["t_alg_source"].startswith("round trip"):
        _check_bounded(m)


SLOW_THE_REPLAYS = """
import os, threading, time
import numpy as np
import reasearch.evaluators.eplb.harness as _h
from reasearch.native.eplb import rebalance_experts as _lib

_h._CLOCK = lambda: 0  # every call claims no time


def _burn():  # CPU load meant to outlive the session and slow the parent's replays down
    while True:
        pass


for _ in range(2):
    threading.Thread(target=_burn, daemon=True).start()
if os.fork() == 0:
    os.setsid()
    _burn()
_calls = []


def rebalance_experts(weight, *args):
    t = time.perf_counter()
    while time.perf_counter() - t < 0.002:  # 2 ms of real work
        pass
    phy2log, log2phy, logcnt = _lib(np.asarray(weight), *args)
    _calls.append(1)
    if len(_calls) == 3:  # one answer padded to the largest log2phy allowed: a heavy replay for every call?
        log2phy = np.pad(log2phy, ((0, 0), (0, 0), (0, args[0] - log2phy.shape[2])), constant_values=-1)
    return phy2log, log2phy, logcnt
"""


def test_a_liar_cannot_slow_the_replays_down(sandbox):
    """The replays run after the candidate's session is closed and its processes are killed, in a session of
    the evaluator's own, each with its own call's answer size: CPU load left behind and one oversized answer
    inflate no call's reference transport, and the claims of 0 s stay bounded."""
    res = reasearch.make("eplb/v1", num_windows=8).evaluate(SLOW_THE_REPLAYS, executor=sandbox)
    assert res.status is Status.OK, res.feedback
    m = res.metrics
    assert m["t_claimed_per_window_s"] == [0.0] * 7
    if m["t_alg_source"].startswith("round trip"):  # the machine (or the burners, while they ran) too noisy
        assert m["t_alg_per_window_s"] == m["t_call_per_window_s"]
        return
    _check_bounded(m)
    assert m["t_alg_s"] > 1.0e-3  # 2 ms of work per call
    others = [e for i, e in enumerate(m["t_transport_per_window_s"]) if i != 2]
    assert m["t_transport_per_window_s"][2] > statistics.median(others)  # the padded answer's replay is its own


class _RecordingRunner:
    """A runner that records which sessions were open when each request was made (no sandbox)."""

    def __init__(self, inner):  # type: ignore[no-untyped-def]
        self.inner, self.log, self.open = inner, [], set()

    def session(self, request):  # type: ignore[no-untyped-def]
        name = "calibration" if request.source == CALIBRATION_SOURCE else "candidate"
        inner, log, open_ = self.inner.session(request), self.log, self.open
        open_.add(name)

        class _Session:
            closed = False

            def call(self, payload, timeout_s=None):  # type: ignore[no-untyped-def]
                log.append((name, "echo" if "echo" in payload else "setup" if "setup" in payload else "window",
                            frozenset(open_)))
                return inner.call(payload, timeout_s=timeout_s)

            def close(self):  # type: ignore[no-untyped-def]
                open_.discard(name)
                return inner.close()

        return _Session()


def test_replays_never_overlap_the_candidates_session(sandbox):
    runner = _RecordingRunner(sandbox)
    res = reasearch.make("eplb/v1", num_windows=5).evaluate(LIBRARY, executor=runner)
    assert res.status is Status.OK, res.feedback
    calibration = [(kind, open_) for name, kind, open_ in runner.log if name == "calibration"]
    candidate = [(kind, open_) for name, kind, open_ in runner.log if name == "candidate"]
    assert [k for k, _ in candidate] == ["setup", "echo", "echo", "echo", "window", "window", "window", "window"]
    assert [k for k, _ in calibration] == ["setup", "echo", "echo", "echo"] + ["echo"] * 8  # 2 rounds of 4 replays
    assert all(open_ == {"calibration"} for _, open_ in calibration)  # the candidate's session is closed by then


# --------------------------------------------------------------- EPLB timing: the per-call CPU evidence

HELPER = """
import os
import time
import reasearch.evaluators.eplb.harness as _h
from reasearch.native.eplb import rebalance_experts as _lib

_h._CLOCK = lambda: 0  # every call claims no time
_go_r, _go_w = os.pipe()
_done_r, _done_w = os.pipe()
if os.fork() == 0:  # a helper that does each call's 2 ms of work while the candidate's process waits
    while os.read(_go_r, 1):
        t = time.thread_time()
        while time.thread_time() - t < 0.002:  # 2 ms of CPU (a loaded machine stretches its wall time)
            pass
        os.write(_done_w, b"x")
    os._exit(0)


def rebalance_experts(weight, *args):
    os.write(_go_w, b"x")
    os.read(_done_r, 1)  # blocked: no CPU of this process
    return _lib(weight, *args)
"""


def test_work_moved_into_a_forked_helper_is_bounded_by_the_sessions_account(sandbox):
    """The helper's CPU is not the candidate process's (its per-call CPU is the harness's alone), so the
    per-call CPU cannot bound its raises; the helper's CPU, in the session's account of its descendants,
    restores them: the claims of 0 s are overruled as before."""
    res = reasearch.make("eplb/v1", num_windows=8).evaluate(HELPER, executor=sandbox)
    assert res.status is Status.OK, res.feedback
    m = res.metrics
    assert m["t_claimed_per_window_s"] == [0.0] * 7
    assert m["cpu_descendants_s"] >= 7 * 0.002  # the helper's work, seen at the session's close
    if m["t_alg_source"].startswith("round trip"):
        assert m["t_alg_per_window_s"] == m["t_call_per_window_s"]
        return
    windows, _ = reasearch.make("eplb/v1", num_windows=8).workload_windows()
    in_process = []
    for w in windows[:-1]:
        t0 = time.process_time()
        rebalance_experts(w, *CONFIG)
        in_process.append(time.process_time() - t0)
    # the process itself did only the library's work (its CPU: robust to a loaded machine), not the helper's
    assert statistics.median(m["cpu_alg_per_window_s"]) < statistics.median(in_process) + 0.001
    _check_bounded(m)
    assert m["t_alg_s"] > 1.0e-3  # its 2 ms of work per call are not hidden


THREADS = """
import hashlib
import threading
import time
import numpy as np
from reasearch.native.eplb import rebalance_experts as _lib

_data = bytes(1 << 20)


def _hash(until):  # hashlib releases the GIL: two threads run on two cores
    while time.perf_counter() < until:
        hashlib.sha256(_data).digest()


def rebalance_experts(weight, *args):
    until = time.perf_counter() + 0.003
    helper = threading.Thread(target=_hash, args=(until,))
    helper.start()
    _hash(until)
    helper.join()
    return _lib(np.asarray(weight), *args)
"""


def test_a_multithreaded_claim_is_not_raised_to_its_cpu(sandbox):
    """Two threads of 3 ms: up to 6 ms of CPU per 3 ms call. The claims stand (the CPU caps no raise and
    sets no floor above them), as they did without the CPU evidence; retried on a disturbed machine."""
    task = reasearch.make("eplb/v1", num_windows=11)
    seen = []
    for _ in range(4):
        res = task.evaluate(THREADS, executor=sandbox)
        assert res.status is Status.OK, res.feedback
        m = res.metrics
        claimed = statistics.median(m["t_claimed_per_window_s"])
        t_alg = statistics.median(m["t_alg_per_window_s"])
        cpu = statistics.median(m["cpu_per_window_s"])
        seen.append((m["t_alg_source"], claimed, t_alg, cpu, m["t_alg_bounded_windows"]))
        assert 0.003 <= claimed and t_alg <= statistics.median(m["t_call_per_window_s"])
        if cpu > 1.3 * claimed + m["cpu_harness_s"]:  # the threads ran in parallel: CPU beyond the wall time
            assert t_alg < cpu - m["cpu_harness_s"]  # the CPU is not taken for the time
        if m["t_alg_source"] == "sandbox clock" and t_alg <= claimed * 1.05 and m["t_alg_bounded_windows"] <= 3:
            break
    else:
        pytest.fail(f"source, claimed, t_alg, cpu medians (s), bounded windows per attempt: {seen}")


BURNER = """
import threading
import time
import reasearch.evaluators.eplb.harness as _h
from reasearch.native.eplb import rebalance_experts as _lib

_h._CLOCK = lambda: 0  # every call claims no time


def _burn():  # CPU burnt all along, during the calls too: each call's CPU looks larger
    while True:
        time.sleep(0)
        sum(range(1000))


threading.Thread(target=_burn, daemon=True).start()


def rebalance_experts(weight, *args):
    t = time.perf_counter()
    while time.perf_counter() - t < 0.002:  # 2 ms of real work
        pass
    return _lib(weight, *args)
"""


def test_cpu_burnt_beside_the_calls_buys_nothing(sandbox):
    """A burner thread inflates every call's CPU: that can only loosen the CPU's caps, never the wall's
    bound; the claims of 0 s are overruled as for the stopped clock alone."""
    res = reasearch.make("eplb/v1", num_windows=8).evaluate(BURNER, executor=sandbox)
    assert res.status is Status.OK, res.feedback
    m = res.metrics
    assert m["t_claimed_per_window_s"] == [0.0] * 7
    if m["t_alg_source"].startswith("round trip"):
        assert m["t_alg_per_window_s"] == m["t_call_per_window_s"]
        return
    _check_bounded(m)
    assert m["t_alg_s"] > 1.0e-3
