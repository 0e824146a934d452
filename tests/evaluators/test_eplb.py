"""The EPLB task (``eplb/v1``): trace, seed program, scoring rules and evaluation through the sandbox."""

from __future__ import annotations

import json
import resource
import sys
import types

import numpy as np
import pytest

import reasearch
from reasearch.errors import ConfigError
from reasearch.evaluators.eplb import (
    EplbTask,
    SyntheticWorkload,
    load_workload_windows,
    write_workload_json,
)
from reasearch.evaluators.eplb.harness import compact, rebalance
from reasearch.evaluators.eplb.scoring import Placement, parse_placement, window_balance
from reasearch.evaluators.eplb.task import NUM_GPUS, NUM_GROUPS, NUM_NODES, NUM_REPLICAS
from reasearch.evaluators.eplb.workload import window_sums
from reasearch.evaluators.result import Status
from reasearch.native.alloc import keep_freed_memory
from reasearch.native.eplb import rebalance_experts

CONFIG = (NUM_REPLICAS, NUM_GROUPS, NUM_NODES, NUM_GPUS)


def _seed_module() -> types.ModuleType:
    """The seed program, imported in-process (trusted test code)."""
    module = types.ModuleType("eplb_seed")
    exec(compile(EplbTask().seed_program(), "seed.py", "exec"), module.__dict__)  # noqa: S102 (our own seed)
    return module


def _balance_twin(phy2log: np.ndarray, logcnt: np.ndarray, load: np.ndarray, gpus: int) -> tuple[float, float]:
    """TASKS.md's formulas with plain loops: (bal_expert, bal_gpu)."""
    layers, slots = phy2log.shape
    per_gpu = slots // gpus
    e_mean = e_max = g_mean = g_max = 0.0
    for layer in range(layers):
        slot = [float(load[layer][e]) / int(logcnt[layer][e]) for e in phy2log[layer]]
        gpu = [sum(slot[g * per_gpu:(g + 1) * per_gpu]) for g in range(gpus)]
        e_mean += sum(slot) / slots
        e_max += max(slot)
        g_mean += sum(gpu) / gpus
        g_max += max(gpu)
    return e_mean / e_max, g_mean / g_max


def _library_answers(windows: np.ndarray) -> list[dict[str, np.ndarray]]:
    out = []
    for w in windows[:-1]:
        phy2log, log2phy, logcnt = rebalance_experts(w, *CONFIG)
        out.append({"phy2log": phy2log, "log2phy": log2phy, "logcnt": logcnt})
    return out


@pytest.fixture(autouse=True)
def _explicit_secret(monkeypatch):  # type: ignore[no-untyped-def]
    """A fixed evaluator secret: the scored trace does not depend on this machine's secret file."""
    monkeypatch.setenv("REASEARCH_SECRET", "eplb-tests-secret-0123456789abcdef")


@pytest.fixture(scope="module")
def sandbox():  # type: ignore[no-untyped-def]
    """The engine's process-wide warm pool (what ``Task.evaluate`` uses by default)."""
    from reasearch.evaluators.base import default_runner

    return default_runner()


@pytest.fixture(scope="module")
def task() -> EplbTask:
    return reasearch.make("eplb/v1", num_windows=6)


# ------------------------------------------------------------------------------------------ seed


def test_seed_program_reproduces_the_published_algorithm(shared_data):
    seed = _seed_module()
    for case in json.loads((shared_data / "eplb" / "golden_rebalance.json").read_text())["cases"]:
        out = seed.rebalance_experts(np.array(case["weight"]), case["num_replicas"], case["num_groups"],
                                     case["num_nodes"], case["num_gpus"])
        for name, got in zip(("phy2log", "log2phy", "logcnt"), out, strict=True):
            np.testing.assert_array_equal(got, np.array(case[name]), err_msg=name)


def test_seed_program_equals_the_library_on_the_trace():
    seed = _seed_module()
    windows = SyntheticWorkload(seed=3).windows(4)
    for w in windows:
        for a, b in zip(seed.rebalance_experts(w, *CONFIG), rebalance_experts(w, *CONFIG), strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("config", [(16, 24, 4, 2, 4), (64, 80, 4, 4, 8), (48, 64, 6, 4, 8), (8, 8, 2, 2, 2)])
def test_seed_program_equals_the_loop_twin_on_other_layouts(config):
    """Other shapes, the global policy (6 groups on 4 nodes), no extra slot, and many ties (zero loads)."""
    from reasearch.native.eplb import rebalance_experts_reference

    num_experts, *rest = config
    seed, rng = _seed_module(), np.random.default_rng(num_experts)
    for k in range(10):
        w = rng.integers(0, 1000, size=(3, num_experts)) * (rng.random((3, num_experts)) < 0.7) + (k % 3 == 0) * 7
        for got, want in zip(seed.rebalance_experts(w, *rest), rebalance_experts_reference(w, *rest), strict=True):
            np.testing.assert_array_equal(got, want)


def test_seed_program_imports_only_numpy_and_the_library():
    src = EplbTask().seed_program()
    imports = {line.split()[1] for line in src.splitlines() if line.startswith(("import ", "from "))}
    assert imports == {"numpy", "reasearch.native.eplb"}


# --------------------------------------------------------------------------------------- scoring


def test_window_balance_by_hand():
    load = np.array([[10.0, 30.0]])
    # expert 0 twice, expert 1 twice: slots 5, 5, 15, 15 -> bal_expert = 10 / 15
    split = Placement(np.array([[0, 0, 1, 1]]), np.array([[[0, 1], [2, 3]]]), np.array([[2, 2]]))
    s = window_balance(split, load, 2)  # GPUs {0, 1} and {2, 3}: 10 and 30
    assert s.bal_expert == pytest.approx(2 / 3, rel=1e-15)
    assert s.bal_gpu == pytest.approx(2 / 3, rel=1e-15)
    mixed = Placement(np.array([[0, 1, 0, 1]]), np.array([[[0, 2], [1, 3]]]), np.array([[2, 2]]))
    assert window_balance(mixed, load, 2).bal_gpu == 1.0  # 20 and 20


def test_window_without_load_scores_zero():
    p = Placement(np.array([[0, 1]]), np.array([[[0], [1]]]), np.array([[1, 1]]))
    s = window_balance(p, np.zeros((1, 2)), 1)
    assert (s.bal_expert, s.bal_gpu) == (0.0, 0.0)


def test_score_solution_matches_the_formulas(task):
    windows, info = task.workload_windows()
    answers = _library_answers(windows)
    res = task.score_solution({"placements": answers, "t_alg_s": [0.004] * len(answers)})
    assert res.status is Status.OK
    twins = [_balance_twin(a["phy2log"], a["logcnt"], windows[i + 1], NUM_GPUS) for i, a in enumerate(answers)]
    bal_expert = sum(t[0] for t in twins) / len(twins)
    bal_gpu = sum(t[1] for t in twins) / len(twins)
    assert res.metrics["bal_expert"] == pytest.approx(bal_expert, rel=1e-12)
    assert res.metrics["bal_gpu"] == pytest.approx(bal_gpu, rel=1e-12)
    assert res.score == pytest.approx((bal_expert + 0.002 / 0.004) / 2, rel=1e-12)
    assert res.metrics["speed_score"] == pytest.approx(0.5, rel=1e-12)
    assert res.metrics["windows_scored"] == windows.shape[0] - 1
    assert info["trace_seed"] == 0 and res.metrics["trace_params"]["num_layers"] == 58


def _mutations():  # name -> (function changing a placement dict in place, expected text)
    def shape(a):
        a["phy2log"] = a["phy2log"][:, :-1]

    def floats(a):
        a["logcnt"] = a["logcnt"].astype(np.float64)

    def negative(a):
        a["logcnt"][2, 0] = -1

    def out_of_range(a):
        a["phy2log"][4, 7] = 256

    def sums(a):
        a["logcnt"][1, 3] += 1

    def count_mismatch(a):
        e = int(a["phy2log"][5, 0])
        a["phy2log"][5, 0] = a["phy2log"][5, 1] if a["phy2log"][5, 1] != e else a["phy2log"][5, 2]

    def log2phy_points_elsewhere(a):
        l2p = a["log2phy"]
        l2p[3, 0, 0], l2p[3, 1, 0] = l2p[3, 1, 0], l2p[3, 0, 0]

    def log2phy_padding(a):
        e = int(np.argmin(a["logcnt"][6]))
        a["log2phy"][6, e, a["logcnt"][6, e]] = 0

    def log2phy_narrow(a):
        a["log2phy"] = a["log2phy"][:, :, :1]

    def missing(a):
        del a["log2phy"]

    return {
        "shape": (shape, "phy2log must have shape (58, 288)"),
        "floats": (floats, "must hold integers"),
        "negative": (negative, "layer 2: logcnt[2, 0] = -1 is negative"),
        "out_of_range": (out_of_range, "layer 4: phy2log[4, 7] = 256 is not an expert id"),
        "sums": (sums, "layer 1: logcnt sums to 289, must be 288"),
        "count_mismatch": (count_mismatch, "layer 5: logcnt"),
        "log2phy_points_elsewhere": (log2phy_points_elsewhere, "layer 3: log2phy[3, 0, 0]"),
        "log2phy_padding": (log2phy_padding, "expected -1 padding"),
        "log2phy_narrow": (log2phy_narrow, "log2phy has room for 1 replicas"),
        "missing": (missing, "must be (phy2log, log2phy, logcnt)"),
    }


@pytest.mark.parametrize("name", list(_mutations()))
def test_broken_placements_are_invalid_with_a_reason(task, name):
    windows, _ = task.workload_windows()
    answers = _library_answers(windows)
    change, text = _mutations()[name]
    change(answers[2])
    res = task.score_solution({"placements": answers, "t_alg_s": [0.001] * len(answers)})
    assert res.status is Status.INVALID and res.score is None
    assert "rebalance on window 2 (scored on window 3)" in res.feedback
    assert text in res.feedback, res.feedback


def test_a_loaded_expert_without_replica_is_invalid():
    windows = SyntheticWorkload().windows(2)
    phy2log = np.tile(np.arange(NUM_REPLICAS) % 255 + 1, (58, 1))  # expert 0 never placed
    logcnt = np.stack([np.bincount(row, minlength=256) for row in phy2log])
    log2phy = np.full((58, 256, int(logcnt.max())), -1)
    for layer in range(58):
        seen = np.zeros(256, dtype=int)
        for slot, e in enumerate(phy2log[layer]):
            log2phy[layer, e, seen[e]] = slot
            seen[e] += 1
    answer = {"phy2log": phy2log, "log2phy": log2phy, "logcnt": logcnt}
    reason = parse_placement(answer, num_layers=58, num_experts=256, num_replicas=NUM_REPLICAS,
                             next_load=windows[1])
    assert isinstance(reason, str)
    assert reason.startswith(f"layer 0: expert 0 has load {windows[1][0, 0]} in the next window but no replica")
    unloaded = windows[1].copy()
    unloaded[:, 0] = 0  # without load, no replica is fine
    assert isinstance(parse_placement(answer, num_layers=58, num_experts=256, num_replicas=NUM_REPLICAS,
                                      next_load=unloaded), Placement)


@pytest.mark.parametrize("bad", [
    {"placements": [], "t_alg_s": []},
    {"placements": "x", "t_alg_s": "y"},
])
def test_score_solution_rejects_wrong_counts(task, bad):
    assert task.score_solution(bad).status is Status.INVALID


def test_score_solution_rejects_untrusted_looking_times(task):
    windows, _ = task.workload_windows()
    answers = _library_answers(windows)
    res = task.score_solution({"placements": answers, "t_alg_s": [0.001] * (len(answers) - 1) + [0.0]})
    assert res.status is Status.INVALID and "t_alg_s" in res.feedback


# ---------------------------------------------------------------------------------------- harness


def test_harness_hands_back_compact_integers():
    w = SyntheticWorkload().windows(1)[0]
    out = rebalance(rebalance_experts, {"weight": compact(w), "num_replicas": 288, "num_groups": 8,
                                        "num_nodes": 4, "num_gpus": 32, "weight_type": "numpy"})
    assert out["log2phy"].dtype == np.int16 and out["phy2log"].dtype == np.int16
    for got, want in zip((out["phy2log"], out["log2phy"], out["logcnt"]), rebalance_experts(w, *CONFIG), strict=True):
        np.testing.assert_array_equal(got.astype(np.int64), want)
    assert compact(np.array([0, 70000])).dtype == np.int32
    assert compact(np.array([0, 2**40])).dtype == np.int64


def test_harness_refuses_a_non_placement():
    with pytest.raises(TypeError, match=r"must return \(phy2log, log2phy, logcnt\), got NoneType"):
        rebalance(lambda *a: None, {"weight": np.ones((2, 16), dtype=np.int64), "num_replicas": 24,
                                    "num_groups": 4, "num_nodes": 2, "num_gpus": 4})
    # setup and echo never call the candidate
    assert rebalance(lambda *a: 1 / 0, {"setup": True, "seed": 1, "weight_type": "numpy"})["ready"] is True
    echo = rebalance(lambda *a: 1 / 0, {"echo": [[[2, 3], "<i2"], [[2, 4, 1], "<i4"], [[2, 4], "<i8"]],
                                        "wait_ns": 200_000})
    assert echo["phy2log"].shape == (2, 3) and echo["log2phy"].shape == (2, 4, 1) and echo["t_ns"] >= 200_000
    # each array crosses the wire in the dtype it is echoing (narrowed from int64, as a published answer is)
    assert [echo[k].dtype.str for k in ("phy2log", "log2phy", "logcnt")] == ["<i2", "<i4", "<i8"]


def test_a_candidate_returning_torch_tensors(task):
    torch = pytest.importorskip("torch")

    def candidate(weight, num_replicas, num_groups, num_nodes, num_gpus):
        assert isinstance(weight, torch.Tensor) and weight.dtype == torch.int64
        return tuple(torch.from_numpy(a) for a in rebalance_experts(weight.float(), num_replicas, num_groups,
                                                                   num_nodes, num_gpus))

    windows, _ = task.workload_windows()
    answers = [rebalance(candidate, {**task._call_payload(w), "weight_type": "torch"}) for w in windows[:-1]]
    res = task.score_solution({"placements": answers, "t_alg_s": [0.002] * len(answers)})
    ref = task.score_solution({"placements": _library_answers(windows), "t_alg_s": [0.002] * len(answers)})
    assert res.status is Status.OK
    assert res.metrics["bal_expert"] == ref.metrics["bal_expert"] and res.score == ref.score


# ------------------------------------------------------------------------------------------ trace


def test_synthetic_trace_is_deterministic_and_prefix_stable():
    a = SyntheticWorkload(seed=5).windows(6)
    b = SyntheticWorkload(seed=5).windows(3)
    np.testing.assert_array_equal(a[:3], b)
    assert a.shape == (6, 58, 256) and a.dtype == np.int64
    assert not np.array_equal(a, SyntheticWorkload(seed=6).windows(6))


def test_synthetic_trace_is_heavy_tailed_and_drifts():
    w = SyntheticWorkload().windows(21).astype(np.float64)
    ratio = w[0].max(axis=1) / np.median(w[0], axis=1)
    assert ratio.min() > 5 and np.median(ratio) > 10  # the hottest expert carries many times the median
    share = w / w.sum(axis=2, keepdims=True)
    near = np.abs(share[1] - share[0]).sum(axis=1).mean()
    far = np.abs(share[20] - share[0]).sum(axis=1).mean()
    assert far > 2 * near  # popularity drifts slowly: farther windows differ more


def test_batch_entries_sum_to_their_window():
    trace = SyntheticWorkload(num_layers=3, num_experts=16, window_size=7)
    windows = trace.windows(3)
    for i in range(3):
        entries = trace.batch_loads(i)
        assert entries.shape == (7, 3, 16) and (entries >= 0).all()
        np.testing.assert_array_equal(entries.sum(axis=0), windows[i])


def test_trace_file_round_trip_and_cache(tmp_path):
    trace = SyntheticWorkload(seed=2, num_layers=2, num_experts=16, window_size=5)
    path = write_workload_json(trace, 3, tmp_path / "trace.json")
    data = json.loads(path.read_text())
    assert len(data["load_history"]) == 15 and len(data["load_history"][0]["logical_expert_load"]) == 2
    loaded = load_workload_windows(path, 5)
    np.testing.assert_array_equal(loaded, trace.windows(3))
    assert load_workload_windows(str(path), 5) is loaded  # parsed once
    np.testing.assert_array_equal(load_workload_windows(path, 4), window_sums(
        np.array([e["logical_expert_load"] for e in data["load_history"]]), 4))


def test_window_sums_keep_a_short_last_window():
    history = np.arange(5 * 1 * 2).reshape(5, 1, 2)
    sums = window_sums(history, 2)
    assert sums.shape == (3, 1, 2)
    assert sums[:, 0, 0].tolist() == [0 + 2, 4 + 6, 8]


def test_bad_trace_files_raise(tmp_path):
    (tmp_path / "a.json").write_text('{"something": []}')
    with pytest.raises(ConfigError, match="load_history"):
        load_workload_windows(tmp_path / "a.json")
    (tmp_path / "b.json").write_text('{"load_history": [{"logical_expert_load": [[1.5, 2]]}]}')
    with pytest.raises(ConfigError, match="non-negative integers"):
        load_workload_windows(tmp_path / "b.json")


def test_task_parameters_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="weight_type"):
        _ = reasearch.make("eplb/v1", weight_type="jax").spec
    with pytest.raises(ConfigError, match="num_windows"):
        _ = EplbTask(num_windows=1).spec
    trace = SyntheticWorkload(num_layers=1, num_experts=100, window_size=2)
    path = write_workload_json(trace, 2, tmp_path / "t.json")
    with pytest.raises(ConfigError, match="num_replicas=288 must be at least|multiple of num_groups"):
        EplbTask(trace_path=str(path), window_size=2).workload_windows()


def test_spec_says_timed():
    spec = reasearch.make("eplb/v1").spec
    assert spec.deterministic is False and spec.seed_score is None
    assert spec.entry_point == "rebalance_experts" and spec.direction == "maximize"


# --------------------------------------------------------------------------------- in the sandbox


def test_seed_through_the_sandbox(task, sandbox):
    res = task.evaluate(task.seed_program(), executor=sandbox)
    assert res.status is Status.OK, res.feedback
    windows, _ = task.workload_windows()
    twins = [_balance_twin(a["phy2log"], a["logcnt"], windows[i + 1], NUM_GPUS)
             for i, a in enumerate(_library_answers(windows))]
    # the time-independent figures are the published algorithm's, exactly
    assert res.metrics["bal_expert"] == pytest.approx(sum(t[0] for t in twins) / len(twins), rel=1e-12)
    assert res.metrics["bal_gpu"] == pytest.approx(sum(t[1] for t in twins) / len(twins), rel=1e-12)
    times = res.metrics["t_alg_per_window_s"]
    assert len(times) == 5 and all(t > 0 for t in times)
    assert res.score == pytest.approx((res.metrics["bal_expert"] + 0.002 / (sum(times) / 5)) / 2, rel=1e-12)
    assert res.metrics["t_transport_s"] > 0 and res.metrics["t_call_s"] > 0
    assert all(0 < t <= w for t, w in zip(times, res.metrics["t_call_per_window_s"], strict=False))
    assert res.provenance is not None and res.provenance.task_id == "eplb/v1"
    assert res.provenance.params["num_windows"] == 6


def test_stateful_candidate_that_fails_on_one_window(task, sandbox):
    src = (
        "from reasearch.native.eplb import rebalance_experts as _lib\n"
        "_calls = []\n"
        "def rebalance_experts(weight, *args):\n"
        "    _calls.append(1)\n"
        "    if len(_calls) == 4:\n"
        "        raise RuntimeError('window four breaks')\n"
        "    return _lib(weight, *args)\n"
    )
    res = task.evaluate(src, executor=sandbox)
    assert res.status is Status.CRASH and res.score is None
    assert "rebalance on window 3" in res.feedback and "window four breaks" in res.feedback


def test_invalid_answer_through_the_sandbox(task, sandbox):
    src = (
        "from reasearch.native.eplb import rebalance_experts as _lib\n"
        "def rebalance_experts(weight, *args):\n"
        "    phy2log, log2phy, logcnt = _lib(weight, *args)\n"
        "    return phy2log[:, :-9], log2phy, logcnt\n"
    )
    res = task.evaluate(src, executor=sandbox)
    assert res.status is Status.INVALID
    assert "window 0" in res.feedback and "phy2log.shape[1] == R == 288" in res.feedback


def test_slow_candidate_times_out(sandbox):
    task = EplbTask(num_windows=3, time_limit_s=1.5)
    src = "import time\ndef rebalance_experts(*args):\n    time.sleep(30)\n"
    res = task.evaluate(src, executor=sandbox)
    assert res.status is Status.TIMEOUT and res.score is None


def test_real_trace_file_through_the_sandbox(tmp_path, sandbox):
    trace = SyntheticWorkload(seed=9, num_layers=2, window_size=4)
    path = write_workload_json(trace, 3, tmp_path / "expert-load.json")
    task = EplbTask(trace_path=str(path), window_size=4)
    res = task.evaluate(task.seed_program(), executor=sandbox)
    assert res.status is Status.OK, res.feedback
    assert res.metrics["trace"] == str(path) and res.metrics["windows_scored"] == 2
    assert res.metrics["num_layers"] == 2


def test_cli_eval(tmp_path, capsys):
    from reasearch.cli import main

    path = tmp_path / "seed.py"
    path.write_text(EplbTask().seed_program())
    assert main(["eval", "eplb/v1", str(path), "-p", "num_windows=3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "OK" and out["metrics"]["windows_scored"] == 2


def test_ok_result_carries_the_worst_layers_per_gpu_load_before_and_after() -> None:
    """What reports draw: per-GPU load of the worst window's worst layer, without rebalancing and under
    the candidate's placement; both split the same total load (replicas share their expert's load)."""
    task = reasearch.make("eplb/v1", num_windows=3)
    res = task.evaluate(task.seed_program())
    assert res.status.value == "OK", res.feedback
    sol = res.solution
    assert sol is not None and set(sol) == {"worst_window", "layer", "before", "after"}
    assert len(sol["before"]) == len(sol["after"]) == 32
    windows, _ = task.workload_windows()
    load = windows[sol["worst_window"] + 1, sol["layer"]].astype(float)
    assert sum(sol["before"]) == pytest.approx(load.sum()) and sum(sol["after"]) == pytest.approx(load.sum())
    assert sol["before"][0] == pytest.approx(load[:8].sum())  # expert e on GPU e * 32 // 256
    assert max(sol["after"]) < max(sol["before"])  # the seed program balances
    assert res.metrics["bal_gpu_per_window"][sol["worst_window"]] == min(res.metrics["bal_gpu_per_window"])


def test_keep_freed_memory_stops_the_seeds_page_faults():
    """With the C allocator's defaults the seed program page-faults ~500 times per call here (its ~2.5 MB of
    temporaries are handed back to the kernel after each call); the sandbox's settings keep them."""
    if not sys.platform.startswith("linux"):
        pytest.skip("glibc allocator settings")
    assert keep_freed_memory() is True
    seed, w = _seed_module(), SyntheticWorkload().windows(1)[0]
    for _ in range(3):
        seed.rebalance_experts(w, *CONFIG)
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    for _ in range(20):
        seed.rebalance_experts(w, *CONFIG)
    assert resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before < 20 * 50


def test_the_sandbox_session_sets_the_allocator(sandbox):
    from reasearch.engine.protocol import RunRequest
    from reasearch.evaluators.eplb._timing import CALIBRATION_SOURCE

    task = EplbTask()
    session = sandbox.session(RunRequest(source=CALIBRATION_SOURCE, entry=task.spec.entries, harness=task.harness,
                                         payload={}, limits=task.limits()))
    try:
        out = session.call({"setup": True, "seed": 0, "weight_type": "numpy"}, timeout_s=30)
        assert out.status is Status.OK and out.value["allocator"] is True
    finally:
        session.close()


def test_a_signature_that_cannot_be_called_is_refused_before_the_first_timed_call(sandbox):
    res = reasearch.make("eplb/v1", num_windows=3).evaluate("def rebalance_experts(weight, seed):\n    return None\n",
                                                           executor=sandbox)
    assert res.status is Status.CRASH and res.score is None
    assert "before the first rebalance" in res.feedback and "accepted forms: rebalance_experts(weight" in res.feedback


def test_evaluator_hash_covers_the_evaluate_session(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The timed session was cut out of task.py into session.py: a change there must still change the hash."""
    import reasearch.evaluators.eplb.session as session
    from reasearch.evaluators.base import _hash_modules

    task = EplbTask()
    before = task.evaluator_hash()
    assert before == EplbTask().evaluator_hash() and len(before) == 16
    changed = tmp_path / "session.py"
    changed.write_text(open(session.__file__).read() + "\n# one more line\n")
    monkeypatch.setattr(session, "__file__", str(changed))
    _hash_modules.cache_clear()  # module hashes are cached per process
    try:
        assert task.evaluator_hash() != before
    finally:
        monkeypatch.undo()
        _hash_modules.cache_clear()
