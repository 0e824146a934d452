"""The sandbox bench's arithmetic: step breakdown, CPU and page-fault budgets of stamped runs (synthetic stamps)."""

from __future__ import annotations

import math

from reasearch._bench.sandbox import CRITICAL_PATH, POST_REPLY, breakdown, cpu_budget, fault_budget


def _stamp_set(
    worker: int, base: int, *, cpu: int, child_base: int, child_reply: int, child_life: int | None
) -> dict[str, int]:
    t = {"e_worker": worker, "e_start": base, "e_sent": base + 10_000, "w_recv": base + 30_000,
         "w_cpu_ns": cpu, "child_cpu_base_ns": child_base, "child_cpu_reply_ns": child_reply, "e_cpu_ns": 200_000}
    if child_life is not None:
        t["p_child_cpu_ns"] = child_life
    return t


def test_breakdown_takes_medians_and_p95_per_step() -> None:
    stamp_sets = [{"e_start": 0, "e_sent": d, "w_recv": d + 1_000_000} for d in (1_000_000, 2_000_000, 3_000_000)]
    parts = breakdown(stamp_sets, CRITICAL_PATH)
    assert [p[0] for p in parts] == [CRITICAL_PATH[0][0], CRITICAL_PATH[1][0]]  # steps without stamps are left out
    label, med, p95 = parts[0]
    assert math.isclose(med, 2.0) and math.isclose(p95, 3.0)
    assert math.isclose(parts[1][1], 1.0) and math.isclose(parts[1][2], 1.0)
    assert breakdown([], POST_REPLY) == []


def test_cpu_budget_pairs_each_workers_consecutive_requests() -> None:
    # Two workers served in turn; each one's CPU clock advances 2 ms per request cycle, and each
    # child's whole life (reported with the next request of the same worker) is 0.5 ms past its reply.
    stamp_sets = []
    cpu = {0: 0, 1: 50_000_000}
    for i in range(6):
        w = i % 2
        cpu[w] += 2_000_000
        prev_reply = 1_300_000 if i >= 2 else None
        stamp_sets.append(_stamp_set(w, i * 10_000_000, cpu=cpu[w], child_base=300_000, child_reply=1_300_000,
                             child_life=None if prev_reply is None else prev_reply + 500_000))
    budget = dict(cpu_budget(stamp_sets))
    assert math.isclose(budget["engine (the caller's thread)"], 0.2)
    assert math.isclose(
        budget["worker (one request cycle; the fork too without a zygote)"], 2.0
    )  # never across workers
    assert "zygote (forks the worker's next child)" not in budget  # no zygote stamps: no row
    assert math.isclose(budget["child before its request (set-up, prewarm)"], 0.3)
    assert math.isclose(budget["child serving the request"], 1.0)
    assert math.isclose(budget["child after its reply (exit, teardown)"], 0.5)
    assert cpu_budget([]) == []


def test_fault_budget_pairs_each_workers_consecutive_requests() -> None:
    # Two workers in turn, with counters far apart: worker 0 takes 250 faults a cycle and its
    # children 400; worker 1 takes 300 and 450. A pairing across workers would give huge numbers.
    stamp_sets = []
    counts = {0: [1_000, 5_000], 1: [900_000, 2_000_000]}
    step = {0: (250, 400), 1: (300, 450)}
    for i in range(8):
        w = i % 2
        counts[w][0] += step[w][0]
        counts[w][1] += step[w][1]
        stamp_sets.append({"e_worker": w, "w_minflt": counts[w][0], "w_cminflt": counts[w][1]})
    stamp_sets.append({"e_worker": 0})  # an unstamped step is skipped, not paired
    budget = dict(fault_budget(stamp_sets))
    assert budget["worker (one request cycle; the fork too without a zygote)"] == 275.0  # median of 3 x 250 and 3 x 300
    assert budget["child (its whole life)"] == 425.0
    assert fault_budget([]) == []


def test_the_zygotes_cpu_and_faults_are_paired_per_worker_and_a_new_zygote_is_skipped() -> None:
    # Each worker's zygote uses 0.3 ms and takes 12 faults per cycle; worker 1's zygote is replaced
    # midway (its counters start again near 0): that pair is left out, not counted as negative.
    stamp_sets = []
    z = {0: [10_000_000, 100], 1: [90_000_000, 9_000]}
    for i in range(10):
        w = i % 2
        if w == 1 and i == 5:
            z[1] = [1_000, 3]
        else:
            z[w][0] += 300_000
            z[w][1] += 12
        stamp_sets.append({"e_worker": w, "z_cpu_ns": z[w][0], "z_minflt": z[w][1], "w_minflt": 0, "w_cminflt": 0})
    assert math.isclose(dict(cpu_budget(stamp_sets))["zygote (forks the worker's next child)"], 0.3)
    assert dict(fault_budget(stamp_sets))["zygote (forks the worker's next child)"] == 12.0


def test_machine_load_is_busy_ticks_per_evaluation_and_share_of_all_ticks() -> None:
    import os

    from reasearch._bench import cpu_ticks
    from reasearch._bench.sandbox import machine_load

    hz = os.sysconf("SC_CLK_TCK")
    # 100 evaluations while the machine's CPUs ticked 4 * hz times, 3 * hz of them busy.
    load = machine_load((1000, 5000), (1000 + 3 * hz, 5000 + 4 * hz), 100)
    assert load is not None
    cpu_ms, share = load
    assert math.isclose(cpu_ms, 30.0) and math.isclose(share, 0.75)
    # Nothing to divide by, or a reading missing: no figure rather than a made-up one.
    assert machine_load((0, 10), (5, 10), 100) is None
    assert machine_load(None, (5, 20), 100) is None
    assert machine_load((0, 10), (5, 20), 0) is None
    now = cpu_ticks()  # this suite runs on Linux: /proc/stat is there
    assert now is not None and 0 <= now[0] <= now[1]


def test_busy_cpus_is_the_busy_share_of_all_ticks_times_the_cpus() -> None:
    import os

    from reasearch._bench import busy_cpus

    cpus = os.cpu_count() or 1
    got = busy_cpus((1000, 5000), (1000 + 300, 5000 + 400))  # 300 of 400 ticks of every CPU busy
    assert got is not None and math.isclose(got, 0.75 * cpus)
    assert busy_cpus(None, (1, 2)) is None and busy_cpus((5, 10), (6, 10)) is None
