"""EPLB: DeepSeek's hierarchical expert-parallel load balancer, reimplemented (compiled + a loop twin).

``rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus)`` places ``R`` physical
expert slots (``num_replicas``) for each of ``L`` MoE layers with ``E`` logical experts:

1. **Groups to nodes.** The ``E`` experts form ``num_groups`` contiguous groups; each group's load
   is the sum of its experts' loads. Groups are packed onto ``num_nodes`` nodes, the same number
   per node, greedily: heaviest group first, into the lightest node that still has room.
2. **Replication inside each node.** A node starts with one slot per expert it hosts; each extra
   slot goes to the expert with the largest load per replica (``load / count``; first expert on
   ties) until the node has ``R / num_nodes`` slots.
3. **Replicas to GPUs.** Each replica carries ``load / count``; a node's replicas are packed onto
   its GPUs (``R / num_gpus`` per GPU) with the same greedy rule as step 1.

When ``num_groups`` is not a multiple of ``num_nodes`` the *global* policy runs instead: the same
three steps with one group and one node (replication over all experts, packing over all GPUs).

Exactness: the published PyTorch code converts the loads to float32 and compares float32 values;
so does this code, so every choice (and every tie) comes out the same. Its descending sort is
PyTorch's CPU ``sort``, i.e. libstdc++'s introsort, which is **not stable**: among equal values
(the replicas of one expert always are) it decides which replica rank sits on which GPU, and so the
published ``log2phy``. Both implementations here reproduce that order (a stable sort gets
``log2phy`` wrong on 5 of the 6 golden cases). The one float32 quantity computed differently is a
group's load: summed in float64 (exact for integer loads below 2**53 in total), then rounded
once, where PyTorch's vectorized float32 sum may round differently in the last bit; only two groups
tied to within one float32 ulp could be placed differently because of it.

Implementations, held equal by tests:

* :func:`rebalance_experts`: the compiled kernel (:mod:`reasearch.native._eplb`), for scoring,
  benchmarks and the candidates' library;
* :func:`rebalance_experts_reference`: straightforward Python loops over float32 scalars, the
  readable definition.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from reasearch.errors import ConfigError
from reasearch.native import _eplb

__all__ = [
    "argsort_desc_torch",
    "argsort_desc_torch_reference",
    "balanced_packing",
    "balanced_packing_reference",
    "rebalance_experts",
    "rebalance_experts_reference",
    "replicate_experts",
    "replicate_experts_reference",
    "validate_layout",
]

_SORT_THRESHOLD = 16  # libstdc++'s _S_threshold: runs this short are left to the insertion sort


def validate_layout(num_experts: int, num_replicas: int, num_groups: int, num_nodes: int, num_gpus: int) -> bool:
    """Checks a placement configuration; returns True for the hierarchical policy, False for global.

    Raises:
        ConfigError: a count is not a positive integer, or the counts do not divide as the
            algorithm needs (the message says which).
    """
    counts = {"num_experts": num_experts, "num_replicas": num_replicas, "num_groups": num_groups,
              "num_nodes": num_nodes, "num_gpus": num_gpus}
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    if num_experts % num_groups:
        raise ConfigError(f"num_experts={num_experts} must be a multiple of num_groups={num_groups}")
    if num_replicas < num_experts:
        raise ConfigError(f"num_replicas={num_replicas} must be at least num_experts={num_experts} "
                          "(every expert needs a slot)")
    if num_replicas % num_gpus:
        raise ConfigError(f"num_replicas={num_replicas} must be a multiple of num_gpus={num_gpus}")
    hierarchical = num_groups % num_nodes == 0
    if hierarchical and num_gpus % num_nodes:
        raise ConfigError(f"num_gpus={num_gpus} must be a multiple of num_nodes={num_nodes}")
    return hierarchical


_MAX_LOAD = 1e30  # float32 sums of a few hundred such values stay finite (float32 max ~3.4e38)


def _check_magnitude(w: np.ndarray, what: str) -> None:
    """Finite and below 1e30 in magnitude, so that no float32 pack total can overflow to infinity."""
    if w.size and not (np.isfinite(w).all() and np.abs(w).max() < _MAX_LOAD):
        raise ConfigError(f"{what} must be finite and below {_MAX_LOAD:g} in magnitude (after conversion to float32)")


def _as_loads(weight: Any) -> np.ndarray:
    """The loads as a C-contiguous float32 [L, E] array (torch tensors and lists accepted)."""
    if hasattr(weight, "detach") and hasattr(weight, "cpu"):  # a torch tensor, without importing torch
        weight = weight.detach().cpu().numpy()
    arr = np.asarray(weight)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ConfigError(f"weight must be a non-empty [layers, experts] array, got shape {arr.shape}")
    if arr.dtype.kind not in "iuf":
        raise ConfigError(f"weight must be numeric, got dtype {arr.dtype}")
    w = np.ascontiguousarray(arr, dtype=np.float32)
    _check_magnitude(w, "weight")
    return w


def _log2phy(phy2log: np.ndarray, phyrank: np.ndarray, logcnt: np.ndarray) -> np.ndarray:
    """``log2phy[l, e, k]`` = the slot holding replica ``k`` of expert ``e``; -1 pads to the max count (twin)."""
    num_layers, num_slots = phy2log.shape
    num_experts, maxcnt = logcnt.shape[1], int(logcnt.max())
    out = np.full(num_layers * num_experts * maxcnt, -1, dtype=np.int64)
    flat = (phy2log + np.arange(num_layers)[:, None] * num_experts) * maxcnt + phyrank  # 1-D indexing is fastest
    out[flat.ravel()] = np.tile(np.arange(num_slots, dtype=np.int64), num_layers)
    return out.reshape(num_layers, num_experts, maxcnt)


def rebalance_experts(
    weight: Any, num_replicas: int, num_groups: int, num_nodes: int, num_gpus: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Places experts on GPU slots with the published hierarchical policy (compiled).

    Args:
        weight: ``[L, E]`` load of each logical expert per layer (NumPy array, list or torch tensor).
        num_replicas: ``R``, physical slots per layer; a multiple of ``num_gpus``, at least ``E``.
        num_groups: expert groups (``E`` must be a multiple); hierarchical when a multiple of
            ``num_nodes``, otherwise the global policy runs.
        num_nodes: server nodes.
        num_gpus: GPUs (``R / num_gpus`` slots each).

    Returns:
        ``(phy2log [L, R], log2phy [L, E, maxcnt], logcnt [L, E])``, int64; ``log2phy`` is -1 padded.

    Raises:
        ConfigError: bad shapes, non-finite loads or counts that do not divide.
    """
    w = _as_loads(weight)
    hierarchical = validate_layout(w.shape[1], num_replicas, num_groups, num_nodes, num_gpus)
    groups, nodes = (num_groups, num_nodes) if hierarchical else (1, 1)
    phy2log, phyrank, logcnt = _eplb.rebalance_kernel(w, int(num_replicas), int(groups), int(nodes), int(num_gpus))
    return phy2log, _eplb.log2phy_rows(phy2log, phyrank, logcnt), logcnt


def argsort_desc_torch(keys: Any) -> np.ndarray:
    """Per row of ``keys`` (``[M, n]``, compared as float32), the descending order in PyTorch's tie order.

    This is ``torch.sort(keys, dim=-1, descending=True).indices`` on CPU without needing torch:
    libstdc++'s introsort, not a stable sort.
    """
    k = np.ascontiguousarray(np.asarray(keys, dtype=np.float32))
    if k.ndim != 2:
        raise ConfigError(f"keys must be a 2-D array, got shape {k.shape}")
    if not np.isfinite(k).all():  # NaN has no place in a descending order
        raise ConfigError("keys must be finite")
    return _eplb.argsort_desc_rows(k)


def _as_rows(weight: Any, what: str) -> np.ndarray:
    """A C-contiguous, finite float32 ``[M, n]`` array."""
    w = np.ascontiguousarray(np.asarray(weight, dtype=np.float32))
    if w.ndim != 2:
        raise ConfigError(f"{what} must be a 2-D [rows, items] array, got shape {w.shape}")
    _check_magnitude(w, what)
    return w


def balanced_packing(weight: Any, num_packs: int) -> tuple[np.ndarray, np.ndarray]:
    """Steps 1 and 3 on every row: pack ``n`` weighted items into ``num_packs`` packs of ``n / num_packs``.

    Greedy, as published: items in descending weight (PyTorch's tie order), each into the pack with
    the smallest float32 total that still has room (the first such pack on ties). With one item per
    pack, item ``i`` goes to pack ``i``.

    Args:
        weight: ``[M, n]`` item weights (compared as float32).
        num_packs: number of packs; must divide ``n``.

    Returns:
        ``(pack, rank)``: int64 ``[M, n]``, each item's pack and its position in that pack.
    """
    w = _as_rows(weight, "weight")
    if isinstance(num_packs, bool) or not isinstance(num_packs, (int, np.integer)) or num_packs <= 0:
        raise ConfigError(f"num_packs must be a positive integer, got {num_packs!r}")
    if w.shape[1] % num_packs:
        raise ConfigError(f"{w.shape[1]} items cannot fill {num_packs} packs equally")
    return _eplb.balanced_packing_rows(w, int(num_packs))


def replicate_experts(weight: Any, num_slots: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 2 on every row: give ``n`` experts ``num_slots`` replicas, minimizing the max load per replica.

    Slot ``i < n`` holds expert ``i``; each further slot goes to the expert with the largest float32
    ``load / count`` (the first such expert on ties).

    Args:
        weight: ``[M, n]`` expert loads (float32).
        num_slots: ``S >= n`` slots per row.

    Returns:
        ``(slot_expert [M, S], slot_rank [M, S], count [M, n])``, int64; ``slot_rank`` numbers the
        replicas of an expert 0, 1, ... in the order they were created.
    """
    w = _as_rows(weight, "weight")
    if isinstance(num_slots, bool) or not isinstance(num_slots, (int, np.integer)) or num_slots < w.shape[1]:
        raise ConfigError(f"num_slots must be an integer >= the number of experts ({w.shape[1]}), got {num_slots!r}")
    return _eplb.replicate_rows(w, int(num_slots))


# ------------------------------------------------------------------------------- the loop twins


def argsort_desc_torch_reference(keys: Sequence[float] | Sequence[np.float32] | np.ndarray) -> list[int]:
    """Loop twin of :func:`argsort_desc_torch` for one row: libstdc++ ``std::sort``, step by step."""
    key = [float(np.float32(x)) for x in keys]  # float32 values, compared exactly as doubles
    idx = list(range(len(key)))

    def swap(a: int, b: int) -> None:
        key[a], key[b] = key[b], key[a]
        idx[a], idx[b] = idx[b], idx[a]

    def linear_insert(last: int) -> None:  # the caller guarantees a smaller-or-equal item to the left
        k, v = key[last], idx[last]
        while k > key[last - 1]:
            key[last], idx[last] = key[last - 1], idx[last - 1]
            last -= 1
        key[last], idx[last] = k, v

    def insertion_sort(first: int, last: int) -> None:
        for i in range(first + 1, last):
            if key[i] > key[first]:
                k, v = key[i], idx[i]
                key[first + 1:i + 1], idx[first + 1:i + 1] = key[first:i], idx[first:i]
                key[first], idx[first] = k, v
            else:
                linear_insert(i)

    def adjust_heap(first: int, hole: int, length: int, k: float, v: int) -> None:
        top = child = hole
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if key[first + child] > key[first + child - 1]:
                child -= 1
            key[first + hole], idx[first + hole] = key[first + child], idx[first + child]
            hole = child
        if length % 2 == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            key[first + hole], idx[first + hole] = key[first + child - 1], idx[first + child - 1]
            hole = child - 1
        parent = (hole - 1) // 2
        while hole > top and key[first + parent] > k:
            key[first + hole], idx[first + hole] = key[first + parent], idx[first + parent]
            hole = parent
            parent = (hole - 1) // 2
        key[first + hole], idx[first + hole] = k, v

    def heap_sort(first: int, last: int) -> None:
        length = last - first
        for parent in range((length - 2) // 2, -1, -1):
            adjust_heap(first, parent, length, key[first + parent], idx[first + parent])
        while last - first > 1:
            last -= 1
            k, v = key[last], idx[last]
            key[last], idx[last] = key[first], idx[first]
            adjust_heap(first, 0, last - first, k, v)

    def median_to_first(res: int, a: int, b: int, c: int) -> None:
        if key[a] > key[b]:
            swap(res, b if key[b] > key[c] else c if key[a] > key[c] else a)
        else:
            swap(res, a if key[a] > key[c] else c if key[b] > key[c] else b)

    def partition(first: int, last: int, pivot: int) -> int:
        while True:
            while key[first] > key[pivot]:
                first += 1
            last -= 1
            while key[pivot] > key[last]:
                last -= 1
            if first >= last:
                return first
            swap(first, last)
            first += 1

    def introsort(first: int, last: int, depth: int) -> None:
        while last - first > _SORT_THRESHOLD:
            if depth == 0:
                heap_sort(first, last)
                return
            depth -= 1
            median_to_first(first, first + 1, first + (last - first) // 2, last - 1)
            cut = partition(first + 1, last, first)
            introsort(cut, last, depth)
            last = cut

    n = len(key)
    if n > 1:
        introsort(0, n, 2 * (n.bit_length() - 1))  # 2 * floor(log2(n)), as std::__lg
        if n > _SORT_THRESHOLD:
            insertion_sort(0, _SORT_THRESHOLD)
            for i in range(_SORT_THRESHOLD, n):
                linear_insert(i)
        else:
            insertion_sort(0, n)
    return idx


def _pack_reference(loads: list[np.float32], num_packs: int) -> tuple[list[int], list[int]]:
    """Step 1/3 packing: each item (heaviest first) into the lightest pack with room; (pack, rank)."""
    n = len(loads)
    per_pack = n // num_packs
    if per_pack == 1:
        return list(range(n)), [0] * n
    pack_load = [np.float32(0.0)] * num_packs
    pack_size = [0] * num_packs
    pack, rank = [0] * n, [0] * n
    for item in argsort_desc_torch_reference(loads):
        open_packs = [p for p in range(num_packs) if pack_size[p] < per_pack]
        best = min(open_packs, key=lambda p: pack_load[p])  # min() keeps the first on ties
        pack[item], rank[item] = best, pack_size[best]
        pack_load[best] = np.float32(pack_load[best] + loads[item])
        pack_size[best] += 1
    return pack, rank


def _replicate_reference(load: list[np.float32], num_slots: int) -> tuple[list[int], list[int], list[int]]:
    """Step 2 for one row: (slot_expert, slot_rank, count)."""
    n = len(load)
    count = [1] * n
    slot_expert, slot_rank = list(range(n)), [0] * n
    for _ in range(n, num_slots):
        per_replica = [load[j] / np.float32(count[j]) for j in range(n)]
        best = max(range(n), key=lambda j: per_replica[j])  # max() keeps the first on ties
        slot_expert.append(best)
        slot_rank.append(count[best])
        count[best] += 1
    return slot_expert, slot_rank, count


def balanced_packing_reference(weight: Any, num_packs: int) -> tuple[np.ndarray, np.ndarray]:
    """Loop twin of :func:`balanced_packing`."""
    w = _as_rows(weight, "weight")
    out = [_pack_reference([np.float32(x) for x in row], num_packs) for row in w]
    return (np.array([p for p, _ in out], dtype=np.int64).reshape(w.shape),
            np.array([r for _, r in out], dtype=np.int64).reshape(w.shape))


def replicate_experts_reference(weight: Any, num_slots: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Loop twin of :func:`replicate_experts`."""
    w = _as_rows(weight, "weight")
    out = [_replicate_reference([np.float32(x) for x in row], num_slots) for row in w]
    return (np.array([o[0] for o in out], dtype=np.int64).reshape(len(w), num_slots),
            np.array([o[1] for o in out], dtype=np.int64).reshape(len(w), num_slots),
            np.array([o[2] for o in out], dtype=np.int64).reshape(w.shape))


def rebalance_experts_reference(
    weight: Any, num_replicas: int, num_groups: int, num_nodes: int, num_gpus: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Loop twin of :func:`rebalance_experts` (same arguments and results), one layer at a time."""
    w = _as_loads(weight)
    num_layers, num_experts = w.shape
    if not validate_layout(num_experts, num_replicas, num_groups, num_nodes, num_gpus):
        num_groups = num_nodes = 1
    group_size = num_experts // num_groups
    groups_per_node = num_groups // num_nodes
    experts_per_node = num_experts // num_nodes
    slots_per_node = num_replicas // num_nodes
    slots_per_gpu = num_replicas // num_gpus
    phy2log = np.zeros((num_layers, num_replicas), dtype=np.int64)
    phyrank = np.zeros((num_layers, num_replicas), dtype=np.int64)
    logcnt = np.zeros((num_layers, num_experts), dtype=np.int64)
    for layer in range(num_layers):
        row = [np.float32(x) for x in w[layer]]
        # Step 1: groups to nodes. node_expert[m] = the expert in the m-th place of the node order.
        group_load = []
        for g in range(num_groups):
            total = 0.0  # float64, added in expert order (as the compiled kernel does)
            for x in row[g * group_size:(g + 1) * group_size]:
                total += float(x)
            group_load.append(np.float32(total))
        gpack, grank = _pack_reference(group_load, num_nodes)
        node_expert = [0] * num_experts
        for e in range(num_experts):
            g = e // group_size
            node_expert[(gpack[g] * groups_per_node + grank[g]) * group_size + e % group_size] = e
        for node in range(num_nodes):
            experts = node_expert[node * experts_per_node:(node + 1) * experts_per_node]
            load = [row[e] for e in experts]
            # Step 2: replicate inside the node.
            slot_expert, slot_rank, count = _replicate_reference(load, slots_per_node)
            # Step 3: the node's replicas onto its GPUs.
            slot_load = [load[j] / np.float32(count[j]) for j in slot_expert]
            gpu, pos = _pack_reference(slot_load, num_gpus // num_nodes)
            for i, j in enumerate(slot_expert):
                slot = node * slots_per_node + gpu[i] * slots_per_gpu + pos[i]
                phy2log[layer, slot] = experts[j]
                phyrank[layer, slot] = slot_rank[i]
            for j, e in enumerate(experts):
                logcnt[layer, e] = count[j]
    return phy2log, _log2phy(phy2log, phyrank, logcnt), logcnt
