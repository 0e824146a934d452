"""The EPLB kernels: golden outputs of the published algorithm, the loop twins, PyTorch's tie order."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasearch.errors import ConfigError
from reasearch.native.eplb import (
    argsort_desc_torch,
    argsort_desc_torch_reference,
    balanced_packing,
    balanced_packing_reference,
    rebalance_experts,
    rebalance_experts_reference,
    replicate_experts,
    replicate_experts_reference,
    validate_layout,
)

IMPLEMENTATIONS = [rebalance_experts, rebalance_experts_reference]


@pytest.fixture(scope="module")
def golden(shared_data):
    return json.loads((shared_data / "eplb" / "golden_rebalance.json").read_text())["cases"]


def _args(case):
    return (np.array(case["weight"], dtype=np.int64), case["num_replicas"], case["num_groups"], case["num_nodes"],
            case["num_gpus"])


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("index", range(6))
def test_reproduces_the_published_algorithm(golden, impl, index):
    case = golden[index]
    phy2log, log2phy, logcnt = impl(*_args(case))
    np.testing.assert_array_equal(phy2log, np.array(case["phy2log"]))
    np.testing.assert_array_equal(logcnt, np.array(case["logcnt"]))
    np.testing.assert_array_equal(log2phy, np.array(case["log2phy"]))
    assert phy2log.dtype == log2phy.dtype == logcnt.dtype == np.int64


def test_golden_covers_both_policies(golden):
    policies = {c["num_groups"] % c["num_nodes"] == 0 for c in golden}
    assert policies == {True, False}  # hierarchical and global


def test_a_stable_sort_would_not_reproduce_log2phy(golden):
    """Why the introsort emulation exists: replicas tie, and PyTorch's CPU sort is not stable."""
    keys = np.array([[1, 3, 3, 2, 3, 1] * 3], dtype=np.float32)
    # torch 2.13 CPU: torch.tensor(keys).sort(descending=True).indices
    expected = [1, 2, 16, 4, 14, 7, 8, 13, 10, 9, 15, 3, 11, 12, 0, 6, 5, 17]
    assert argsort_desc_torch(keys)[0].tolist() == expected
    assert argsort_desc_torch_reference(keys[0]) == expected
    assert np.argsort(-keys[0], kind="stable").tolist() != expected


def test_short_rows_sort_stably():
    keys = np.array([[2, 5, 5, 1, 5, 2, 0, 5]], dtype=np.float32)  # <= 16 items: insertion sort only
    assert argsort_desc_torch(keys)[0].tolist() == np.argsort(-keys[0], kind="stable").tolist()


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_sort_twin(data):
    n = data.draw(st.integers(0, 120))
    distinct = data.draw(st.integers(1, 6))
    keys = data.draw(st.lists(st.integers(0, distinct), min_size=n, max_size=n))
    row = np.array([keys], dtype=np.float32).reshape(1, n)
    assert argsort_desc_torch(row)[0].tolist() == argsort_desc_torch_reference(row[0])
    assert sorted(argsort_desc_torch(row)[0].tolist()) == list(range(n))


def test_sort_matches_torch_on_random_ties():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    for n in (17, 33, 72, 100, 288, 1000):
        keys = rng.integers(0, max(2, n // 8), size=(5, n)).astype(np.float32)
        expected = torch.from_numpy(keys).sort(dim=-1, descending=True).indices.numpy()
        np.testing.assert_array_equal(argsort_desc_torch(keys), expected)


def _median_of_three_killer(n: int) -> np.ndarray:
    """Musser's sequence: median-of-three quicksort degrades on it, so introsort falls back to heapsort."""
    k = n // 2
    a = [0] * n
    for i in range(1, k + 1):
        if i % 2 == 1:
            a[i - 1] = i
            a[i] = k + i
        a[k + i - 1] = 2 * i
    return np.array(a, dtype=np.float32)


@pytest.mark.parametrize("n", [100, 200, 512])
def test_sort_past_the_depth_limit(n):
    """(Checked with an instrumented twin: these sizes reach introsort's heapsort fallback.)"""
    for keys in (_median_of_three_killer(n), -_median_of_three_killer(n)):
        ref = argsort_desc_torch_reference(keys)
        assert argsort_desc_torch(keys[None, :])[0].tolist() == ref
        assert [keys[i] for i in ref] == sorted(keys.tolist(), reverse=True)
        try:
            import torch
        except ImportError:
            continue
        assert torch.from_numpy(keys).sort(descending=True).indices.tolist() == ref


_layouts = st.sampled_from([
    # (experts, replicas, groups, nodes, gpus)
    (16, 24, 4, 2, 4), (16, 16, 4, 2, 4), (12, 18, 3, 3, 3), (8, 12, 2, 2, 2), (64, 80, 8, 2, 8),
    (60, 64, 5, 2, 8), (20, 30, 5, 3, 6), (8, 8, 4, 4, 8), (6, 9, 1, 1, 3), (32, 36, 8, 4, 4),
])


@settings(max_examples=60, deadline=None)
@given(layout=_layouts, layers=st.integers(1, 3), data=st.data())
def test_rebalance_twin(layout, layers, data):
    experts, replicas, groups, nodes, gpus = layout
    high = data.draw(st.sampled_from([3, 100, 10**9]))  # few distinct loads: many ties
    loads = data.draw(st.lists(st.integers(0, high), min_size=layers * experts, max_size=layers * experts))
    weight = np.array(loads, dtype=np.int64).reshape(layers, experts)
    fast = rebalance_experts(weight, replicas, groups, nodes, gpus)
    slow = rebalance_experts_reference(weight, replicas, groups, nodes, gpus)
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(a, b)
    phy2log, log2phy, logcnt = fast
    assert (logcnt.sum(axis=1) == replicas).all() and (logcnt >= 1).all()
    for layer in range(layers):
        np.testing.assert_array_equal(np.bincount(phy2log[layer], minlength=experts), logcnt[layer])
        for e in range(experts):
            slots = log2phy[layer, e, : logcnt[layer, e]]
            assert (phy2log[layer, slots] == e).all()
            assert (log2phy[layer, e, logcnt[layer, e]:] == -1).all()


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_packing_and_replication_twins(data):
    packs = data.draw(st.integers(1, 6))
    per = data.draw(st.integers(1, 12))
    rows = data.draw(st.integers(1, 3))
    values = data.draw(st.lists(st.floats(0, 1e6, width=32), min_size=rows * packs * per,
                                max_size=rows * packs * per))
    w = np.array(values, dtype=np.float32).reshape(rows, packs * per)
    for a, b in zip(balanced_packing(w, packs), balanced_packing_reference(w, packs), strict=True):
        np.testing.assert_array_equal(a, b)
    pack, rank = balanced_packing(w, packs)
    for r in range(rows):
        assert np.bincount(pack[r], minlength=packs).tolist() == [per] * packs
        assert sorted(zip(pack[r], rank[r], strict=False)) == [(p, k) for p in range(packs) for k in range(per)]
    slots = packs * per + data.draw(st.integers(0, 10))
    for a, b in zip(replicate_experts(w, slots), replicate_experts_reference(w, slots), strict=True):
        np.testing.assert_array_equal(a, b)


def test_packing_by_hand():
    # Descending: 9 (A), 7 (B), 4 (C), 3 (D) into 2 packs of 2 -> 9 to pack 0, 7 to pack 1, 4 to pack 1
    # (7 < 9), 3 to pack 0 (pack 1 is full).
    pack, rank = balanced_packing(np.array([[3, 9, 4, 7]], dtype=np.float32), 2)
    assert pack.tolist() == [[0, 0, 1, 1]]
    assert rank.tolist() == [[1, 0, 1, 0]]


def test_replication_by_hand():
    # loads 10, 4, 3 with 5 slots: 10 -> 10/2 = 5 -> 5 > 4 so 10 again (10/3).
    slot, rank, count = replicate_experts(np.array([[10, 4, 3]], dtype=np.float32), 5)
    assert slot.tolist() == [[0, 1, 2, 0, 0]]
    assert rank.tolist() == [[0, 0, 0, 1, 2]]
    assert count.tolist() == [[3, 1, 1]]


def test_accepts_torch_tensors():
    torch = pytest.importorskip("torch")
    w = np.random.default_rng(0).integers(0, 1000, size=(2, 16))
    for a, b in zip(
        rebalance_experts(torch.from_numpy(w), 24, 4, 2, 4), rebalance_experts(w, 24, 4, 2, 4), strict=True
    ):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("shape", "layout", "match"),
    [
        ((2, 16), (24, 3, 2, 4), "multiple of num_groups"),
        ((2, 16), (8, 4, 2, 4), "at least num_experts"),
        ((2, 16), (24, 4, 2, 5), "multiple of num_gpus"),
        ((2, 16), (24, 4, 2, 3), "multiple of num_nodes"),
        ((2, 16), (24, 4, 0, 4), "positive integer"),
        ((16,), (24, 4, 2, 4), "layers, experts"),
    ],
)
def test_bad_layouts_raise(shape, layout, match):
    with pytest.raises(ConfigError, match=match):
        rebalance_experts(np.ones(shape), *layout)


def test_non_finite_loads_raise():
    w = np.ones((1, 16))
    w[0, 3] = np.nan
    with pytest.raises(ConfigError, match="finite"):
        rebalance_experts(w, 24, 4, 2, 4)


def test_global_policy_is_chosen_when_groups_do_not_split_over_nodes():
    assert validate_layout(256, 288, 8, 4, 32) is True
    assert validate_layout(60, 64, 5, 2, 8) is False


_SIGNED_VALUES = st.one_of(st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5]), st.floats(-1e6, 1e6, width=32))


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_vector_steps_match_the_twins_on_ties_signs_and_widths(data):
    """The SSE steps (first lightest of <= 8 packs kept in registers, first largest load per replica)
    against the loop twins: pack counts on both sides of 8 (9 and up take the scalar loop), rows
    whose width is not a multiple of 4, negative loads, signed zeros and many ties."""
    packs = data.draw(st.sampled_from([1, 2, 3, 4, 5, 7, 8, 9, 12]))
    per = data.draw(st.integers(1, 9))
    rows = data.draw(st.integers(1, 3))
    values = data.draw(st.lists(_SIGNED_VALUES, min_size=rows * packs * per, max_size=rows * packs * per))
    w = np.array(values, dtype=np.float32).reshape(rows, packs * per)
    for a, b in zip(balanced_packing(w, packs), balanced_packing_reference(w, packs), strict=True):
        np.testing.assert_array_equal(a, b)
    slots = packs * per + data.draw(st.integers(0, 20))
    for a, b in zip(replicate_experts(w, slots), replicate_experts_reference(w, slots), strict=True):
        np.testing.assert_array_equal(a, b)


def test_vector_steps_pick_the_first_of_equal_extremes():
    """Ties between packs and between experts go to the first one, signed zeros included."""
    pack, rank = balanced_packing(np.array([[-0.0, 0.0, 0.0, -0.0, 0.0, -0.0, 0.0, 0.0]], np.float32), 8)
    assert pack.tolist() == [[0, 1, 2, 3, 4, 5, 6, 7]] and rank.tolist() == [[0] * 8]
    # 16 equal items into 8 packs: the sort's order, then packs 0..7 in turn, twice
    w = np.full((1, 16), 3.0, np.float32)
    np.testing.assert_array_equal(balanced_packing(w, 8)[0], balanced_packing_reference(w, 8)[0])
    assert sorted(balanced_packing(w, 8)[0][0].tolist()) == [p for p in range(8) for _ in range(2)]
    item, srank, count = replicate_experts(np.array([[1.0, 4.0, 2.0, 4.0, 0.0, -0.0, 4.0]], np.float32), 9)
    assert item[0, 7:].tolist() == [1, 3]  # 4.0 at 1, 3 and 6: the first, then the next first
    assert count[0].tolist() == [1, 2, 1, 2, 1, 1, 1] and srank[0, 7:].tolist() == [1, 1]


def test_sort_matches_the_twin_across_mask_words_signed_zeros_and_runs():
    """The compiled partition reads its scans' stops from bit masks, 64 items a word: rows across one
    to several words, with few distinct keys, signed zeros and sorted runs, against the plain twin."""
    rng = np.random.default_rng(11)
    rows = []
    for n in (17, 63, 64, 65, 72, 127, 128, 129, 200, 513):
        rows.append(rng.integers(0, 3, size=n).astype(np.float32))  # nearly all ties
        rows.append(rng.choice(np.array([0.0, -0.0, 1.0], dtype=np.float32), size=n))  # -0.0 == 0.0
        rows.append(np.arange(n, dtype=np.float32))  # ascending: every item on the wrong side
        rows.append(np.arange(n, dtype=np.float32)[::-1].copy())  # already in order
        rows.append(rng.standard_normal(n).astype(np.float32))  # distinct
    for keys in rows:
        got = argsort_desc_torch(keys[None, :])[0].tolist()
        assert got == argsort_desc_torch_reference(keys), (len(keys), keys[:8])
