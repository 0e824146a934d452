"""The compiled transaction simulator against golden makespans, hand-computed cases and its twins."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reasearch.native._txn import TxnSimulator, TxnState
from reasearch.native.txn import (
    PyTxnSimulator,
    compile_workload,
    lock_list_makespan,
    parse_workload,
)

NAMES = ("workload_1", "workload_2", "workload_3")


def native(txns):
    c = compile_workload(txns)
    return TxnSimulator(c.txn_ptr, c.op_key, c.op_pos, c.op_write, c.txn_len, c.num_keys)


def twin(txns):
    return PyTxnSimulator(compile_workload(txns))


@pytest.fixture(scope="module")
def parsed(shared_data: Path) -> dict[str, list]:
    data = json.loads((shared_data / "txn" / "workloads.json").read_text())
    return {name: parse_workload(data[name]) for name in NAMES}


@pytest.fixture(scope="module")
def golden(shared_data: Path) -> list[dict]:
    return json.loads((shared_data / "txn" / "golden_makespans.json").read_text())["cases"]


@pytest.fixture(scope="module")
def sims(parsed) -> dict[str, TxnSimulator]:
    return {name: native(txns) for name, txns in parsed.items()}


# ---------------------------------------------------------------- golden data (the reference model's output)

def test_golden_file_covers_full_schedules_and_prefixes(golden):
    assert len(golden) == 186
    lengths = {len(c["schedule"]) for c in golden}
    assert 100 in lengths and min(lengths) < 10


@pytest.mark.parametrize("model", ["native", "twin", "lock_list"])
def test_every_golden_makespan_is_reproduced_exactly(model, parsed, sims, golden):
    twins = {name: twin(txns) for name, txns in parsed.items()}
    wrong = []
    for case in golden:
        name, seq = case["workload"], case["schedule"]
        if model == "native":
            got = sims[name].get_opt_seq_cost(seq)
        elif model == "twin":
            got = twins[name].get_opt_seq_cost(seq)
        else:
            got = lock_list_makespan(parsed[name], seq)
        if got != case["makespan"]:
            wrong.append((name, len(seq), case["makespan"], got))
    assert wrong == []


def test_sequential_order_and_published_figures(sims, parsed):
    assert [sims[n].get_opt_seq_cost(list(range(100))) for n in NAMES] == [452, 38, 47]
    assert [max(t[0][3] for t in parsed[n]) for n in NAMES] == [16, 21, 9]


def test_golden_incremental_matches_every_prefix(sims, golden):
    for case in golden[::7]:
        sim, seq = sims[case["workload"]], case["schedule"]
        state = sim.new_state()
        for t in seq:
            state_before = state.makespan
            peeked = sim.peek(state, t)
            assert state.makespan == state_before  # peek leaves the state alone
            assert sim.extend(state, t) == peeked
        assert state.makespan == case["makespan"]
        assert state.sequence == seq and len(state) == len(seq)


# ---------------------------------------------------------------- hand-computed cases

HAND = {
    # T0 writes x at 1 (ends 3); T1 reads x at 3 (after the write); T2 reads x at 2 (slotted between:
    # a read behind a read only waits for the latest write); T3 writes x after the latest lock (3) -> 4.
    "mid_read": (["w-x * *", "* * r-x", "r-x", "w-x"], [(1, 3), (2, 3), (3, 3), (4, 4)]),
    # a never-written key: the second read may run anywhere, a write must follow the latest lock.
    "shared_read": (["* * r-y", "r-y"], [(1, 3), (2, 3)]),
    "write_after_read": (["* * r-y", "w-y"], [(1, 3), (2, 4)]),
    # ops of one transaction do not wait for each other; the next read waits for the write at 2.
    "same_txn": (["r-z w-z", "r-z"], [(1, 2), (2, 3)]),
    # keys are strings: '01' and '1' are different keys.
    "string_keys": (["w-01", "w-1"], [(1, 1), (2, 1)]),
    # a transaction of only no-ops counts with length 0 (as published): it never raises the makespan.
    "noop_only": (["* * * *", "w-a *"], [(1, 0), (2, 2)]),
    # the write of T1 at pos 2 must follow x's lock at 1 -> start 1 (op at 2); T2's write must follow 2.
    "offset_write": (["w-x", "* w-x", "w-x * * * *"], [(1, 1), (2, 2), (3, 7)]),
}


@pytest.mark.parametrize("case", sorted(HAND))
def test_hand_computed_prefix_makespans(case):
    texts, expected = HAND[case]
    txns = parse_workload(texts)
    sim, py = native(txns), twin(txns)
    order = list(range(len(texts)))
    for k, makespan in expected:
        assert sim.get_opt_seq_cost(order[:k]) == makespan
        assert py.get_opt_seq_cost(order[:k]) == makespan
        assert lock_list_makespan(txns, order[:k]) == makespan


def test_placements_hand_computed_and_consistent(parsed, golden):
    txns = parse_workload(HAND["mid_read"][0])
    assert twin(txns).placements([0, 1, 2, 3]) == [(1, 3), (1, 3), (2, 2), (4, 4)]
    case = next(c for c in golden if c["workload"] == "workload_2" and len(c["schedule"]) == 100)
    py = twin(parsed["workload_2"])
    spans = py.placements(case["schedule"])
    assert max(end for _, end in spans) == case["makespan"]
    for k in (1, 10, 50):
        assert max(end for _, end in spans[:k]) == py.get_opt_seq_cost(case["schedule"][:k])
    for t, (start, end) in zip(case["schedule"], spans, strict=False):
        assert start >= 1 and end - start + 1 == parsed["workload_2"][t][0][3]


def test_parse_published_rules():
    txns = parse_workload('{"txn0": "w-17 * r-5", "txn1": "* *"}')
    assert txns == [[("w", "17", 1, 3), ("r", "5", 3, 3)], []]
    assert parse_workload(["r-3"]) == [[("r", "3", 1, 1)]]
    for bad in ("x-3", "r3", "r-", "r-1-2"):
        with pytest.raises(ValueError, match="op 1"):
            parse_workload([bad])


# ---------------------------------------------------------------- index semantics of get_opt_seq_cost

def test_sequence_types_and_indices(sims):
    sim = sims["workload_2"]
    ref = sim.get_opt_seq_cost([5, 17, 99, 0])
    assert sim.get_opt_seq_cost((5, 17, 99, 0)) == ref
    assert sim.get_opt_seq_cost(np.array([5, 17, 99, 0], dtype=np.int32)) == ref
    assert sim.get_opt_seq_cost(np.array([5, 17, 99, 0], dtype=np.uint8)) == ref
    assert sim.get_opt_seq_cost(iter([5, 17, 99, 0])) == ref
    assert sim.get_opt_seq_cost([np.int64(5), 17, -1, 0]) == ref  # negatives count from the end, like list indexing
    assert sim.get_opt_seq_cost([]) == 0
    assert sim.get_opt_seq_cost(range(100)) == 38
    with pytest.raises(IndexError, match="100"):
        sim.get_opt_seq_cost([1, 100])
    with pytest.raises(IndexError):
        sim.get_opt_seq_cost(np.array([-101]))
    with pytest.raises(TypeError):
        sim.get_opt_seq_cost([1.0])
    with pytest.raises(TypeError):
        sim.get_opt_seq_cost(["3"])
    # after an error the scratch buffer is reset by the next call
    assert sim.get_opt_seq_cost([5, 17, 99, 0]) == ref


def test_reentrant_iteration_does_not_corrupt_the_result(sims):
    sim = sims["workload_1"]
    seq = [3, 1, 4, 15, 9, 26, 5, 35]
    inner = []

    def gen():
        for t in seq:
            inner.append(sim.get_opt_seq_cost(seq[::-1]))  # re-enters while the outer call runs
            yield t

    assert sim.get_opt_seq_cost(gen()) == sim.get_opt_seq_cost(seq)
    assert set(inner) == {sim.get_opt_seq_cost(seq[::-1])}


def test_state_belongs_to_its_simulator(sims):
    state = sims["workload_1"].new_state()
    assert isinstance(state, TxnState)
    with pytest.raises(TypeError, match="new_state"):
        sims["workload_2"].peek(state, 0)
    with pytest.raises(TypeError):
        sims["workload_1"].extend(object(), 0)
    with pytest.raises(IndexError):
        sims["workload_1"].extend(state, 100)
    assert len(state) == 0 and state.makespan == 0


def test_copy_is_independent_and_grows_past_initial_capacity(sims):
    sim = sims["workload_3"]
    state = sim.new_state()
    long_seq = [t % 100 for t in range(300)]  # repeats are simulated as given
    for t in long_seq:
        sim.extend(state, t)
    assert state.makespan == sim.get_opt_seq_cost(long_seq)
    clone = state.copy()
    assert copy.deepcopy(state).sequence == copy.copy(state).sequence == long_seq
    sim.extend(clone, 7)
    assert len(clone) == 301 and len(state) == 300
    assert clone.sequence == long_seq + [7] and state.sequence == long_seq
    assert clone.makespan == sim.get_opt_seq_cost(long_seq + [7])
    assert state.makespan == sim.get_opt_seq_cost(long_seq)


def test_constructor_rejects_inconsistent_arrays():
    with pytest.raises(ValueError):
        TxnSimulator([0, 2], [0], [1, 2], [1, 0], [2], 1)  # 2 ops claimed, 1 key id
    with pytest.raises(ValueError, match="key id"):
        TxnSimulator([0, 1], [3], [1], [1], [1], 1)
    with pytest.raises(ValueError, match="1-based"):
        TxnSimulator([0, 1], [0], [0], [1], [1], 1)


# ---------------------------------------------------------------- property tests: compiled == twins

@st.composite
def workloads(draw):
    """Small random workloads: few keys (many conflicts), no-op slots, repeated keys in a transaction."""
    n = draw(st.integers(1, 8))
    keys = draw(st.lists(st.sampled_from(["1", "2", "3", "10", "01"]), min_size=1, max_size=4, unique=True))
    op = st.one_of(st.just("*"), st.builds(lambda t, k: f"{t}-{k}", st.sampled_from("rw"), st.sampled_from(keys)))
    texts = [" ".join(draw(st.lists(op, min_size=1, max_size=6))) for _ in range(n)]
    return parse_workload(texts)


@st.composite
def workload_and_sequence(draw):
    txns = draw(workloads())
    n = len(txns)
    seq = draw(st.lists(st.integers(0, n - 1), max_size=3 * n))
    return txns, seq


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload_and_sequence())
def test_native_equals_twins_on_random_workloads(case):
    txns, seq = case
    expected = lock_list_makespan(txns, seq)
    assert twin(txns).get_opt_seq_cost(seq) == expected
    assert native(txns).get_opt_seq_cost(seq) == expected


@settings(max_examples=60, deadline=None)
@given(perm=st.permutations(range(100)), cut=st.integers(1, 100), which=st.sampled_from(NAMES))
def test_native_equals_twins_on_random_schedules(parsed, sims, perm, cut, which):
    seq = list(perm)[:cut]
    expected = lock_list_makespan(parsed[which], seq)
    assert twin(parsed[which]).get_opt_seq_cost(seq) == expected
    assert sims[which].get_opt_seq_cost(seq) == expected
    assert sims[which].get_opt_seq_cost(np.asarray(seq)) == expected


@settings(max_examples=60, deadline=None)
@given(perm=st.permutations(range(100)), which=st.sampled_from(NAMES), fork=st.integers(0, 99))
def test_incremental_equals_full_recomputation(sims, parsed, perm, which, fork):
    sim, py = sims[which], twin(parsed[which])
    seq = list(perm)
    state, py_state = sim.new_state(), py.new_state()
    saved = None
    for i, t in enumerate(seq):
        if i == fork:
            saved = state.copy()
        if i % 17 == 0:
            full = [sim.get_opt_seq_cost(seq[:i] + [u]) for u in range(100)]
            assert sim.peek_all(state) == full
            assert py.peek_all(py_state) == full
        expected = sim.get_opt_seq_cost(seq[: i + 1])
        assert sim.peek(state, t) == expected
        assert sim.extend(state, t) == expected
        assert py.extend(py_state, t) == expected
    assert saved is not None and saved.sequence == seq[:fork]
    assert saved.makespan == sim.get_opt_seq_cost(seq[:fork])
    tail = seq[fork:]
    for t in tail:
        sim.extend(saved, t)
    assert saved.makespan == state.makespan
