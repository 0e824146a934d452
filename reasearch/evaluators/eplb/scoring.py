"""Trusted EPLB scoring: validate one placement, then measure its balance on the next window.

Rules (TASKS.md; the formulas follow skydiscover's ``benchmarks/ADRS/eplb`` evaluator):

* each expert's load in the next window is split evenly over its replicas;
* ``bal_expert = sum_l mean_s(load[l, s]) / sum_l max_s(load[l, s])`` over the ``R`` physical slots;
* ``bal_gpu`` the same over per-GPU sums (consecutive ``R / num_gpus`` slots form a GPU);
* a window without any load scores 0 for both, as in the reference.

Loads are float64 here (the reference accumulates float32); the difference is below 1e-7 relative.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Placement", "WindowScore", "parse_placement", "window_balance"]

_MAX_INT = np.iinfo(np.int64).max


@dataclass(frozen=True, slots=True)
class Placement:
    """A validated placement: int64 ``phy2log [L, R]``, ``log2phy [L, E, K]``, ``logcnt [L, E]``."""

    phy2log: np.ndarray
    log2phy: np.ndarray
    logcnt: np.ndarray


@dataclass(frozen=True, slots=True)
class WindowScore:
    """Balance of one placement on the window it is scored on."""

    bal_expert: float
    bal_gpu: float
    worst_layer: int  # the layer with the lowest GPU balance
    worst_layer_bal_gpu: float


def _int_array(data: Mapping[str, Any], name: str) -> np.ndarray | str:
    try:
        arr = np.asarray(data[name])
    except (TypeError, ValueError) as exc:
        return f"{name} is not an array: {exc}"
    if arr.dtype.kind not in "iu":
        return f"{name} must hold integers (int64), got dtype {arr.dtype}; cast it with .astype(np.int64)"
    if arr.dtype.kind == "u" and arr.size and arr.max() > _MAX_INT:
        return f"{name} holds values beyond int64"
    return arr.astype(np.int64, copy=False)


def parse_placement(
    data: Any, *, num_layers: int, num_experts: int, num_replicas: int, next_load: np.ndarray | None = None
) -> Placement | str:
    """Checks a candidate's answer for one window; returns the placement or the reason it is invalid.

    Checks, in order: the three arrays exist and hold integers; ``phy2log`` is ``[L, R]`` with expert
    ids in ``[0, E)``; ``logcnt`` is ``[L, E]``, ``>= 0``, sums to ``R`` in every layer and counts each
    expert's slots in ``phy2log``; ``log2phy`` is ``[L, E, K]`` with ``K >= max(logcnt)``, its first
    ``logcnt[l, e]`` entries are distinct slots holding expert ``e`` and the rest are -1; no expert
    with load in ``next_load`` is left without a replica.
    """
    if not isinstance(data, Mapping) or not all(k in data for k in ("phy2log", "log2phy", "logcnt")):
        return "the answer must be (phy2log, log2phy, logcnt) as returned by rebalance_experts"
    arrays = {}
    for name in ("phy2log", "log2phy", "logcnt"):
        arr = _int_array(data, name)
        if isinstance(arr, str):
            return arr
        arrays[name] = arr
    phy2log, log2phy, logcnt = arrays["phy2log"], arrays["log2phy"], arrays["logcnt"]
    L, E, R = num_layers, num_experts, num_replicas
    if phy2log.ndim != 2 or phy2log.shape[0] != L or phy2log.shape[1] != R:
        return f"phy2log must have shape ({L}, {R}) (phy2log.shape[1] == R == {R}), got {phy2log.shape}"
    if logcnt.shape != (L, E):
        return f"logcnt must have shape ({L}, {E}), got {logcnt.shape}"
    # Each check is one vectorized pass; np.argwhere (slow) runs only to name the first culprit.
    wrong = (phy2log < 0) | (phy2log >= E)
    if wrong.any():
        lay, s = np.argwhere(wrong)[0]
        return f"layer {lay}: phy2log[{lay}, {s}] = {phy2log[lay, s]} is not an expert id in [0, {E})"
    wrong = logcnt < 0
    if wrong.any():
        lay, e = np.argwhere(wrong)[0]
        return f"layer {lay}: logcnt[{lay}, {e}] = {logcnt[lay, e]} is negative"
    sums = logcnt.sum(axis=1)
    if (sums != R).any():
        lay = int(np.flatnonzero(sums != R)[0])
        return f"layer {lay}: logcnt sums to {sums[lay]}, must be {R} (logcnt.sum(1) == R in every layer)"
    counted = np.bincount((phy2log + np.arange(L)[:, None] * E).ravel(), minlength=L * E).reshape(L, E)
    wrong = counted != logcnt
    if wrong.any():
        lay, e = np.argwhere(wrong)[0]
        return (f"layer {lay}: logcnt[{lay}, {e}] = {logcnt[lay, e]} but expert {e} holds {counted[lay, e]} "
                "slots in phy2log")
    if log2phy.ndim != 3 or log2phy.shape[:2] != (L, E):
        return f"log2phy must have shape ({L}, {E}, max replicas), got {log2phy.shape}"
    K = log2phy.shape[2]
    if K > R:
        return f"log2phy.shape[2] = {K}: an expert cannot have more than R = {R} replicas"
    top = int(logcnt.max())
    if K < top:
        return f"log2phy has room for {K} replicas per expert but logcnt holds {top}"
    used = np.arange(K)[None, None, :] < logcnt[:, :, None]
    wrong = ~used & (log2phy != -1)
    if wrong.any():
        lay, e, k = np.argwhere(wrong)[0]
        return (f"layer {lay}: log2phy[{lay}, {e}, {k}] = {log2phy[lay, e, k]}, expected -1 padding past "
                f"logcnt[{lay}, {e}] = {logcnt[lay, e]}")
    # The used entries, in (layer, expert, replica) order: L * R of them (the counts sum to R).
    slots = log2phy[used]
    layer_of = np.repeat(np.arange(L), R)
    expert_of = np.repeat(np.tile(np.arange(E), L), logcnt.ravel())
    wrong = (slots < 0) | (slots >= R)
    if wrong.any():
        i = int(np.flatnonzero(wrong)[0])
        lay, e, k = np.argwhere(used)[i]
        return f"layer {lay}: log2phy[{lay}, {e}, {k}] = {log2phy[lay, e, k]} is not a slot in [0, {R})"
    wrong = phy2log[layer_of, slots] != expert_of
    if wrong.any():
        i = int(np.flatnonzero(wrong)[0])
        lay, e, k = np.argwhere(used)[i]
        return (f"layer {lay}: log2phy[{lay}, {e}, {k}] = {log2phy[lay, e, k]} but that slot holds expert "
                f"{phy2log[lay, log2phy[lay, e, k]]} in phy2log")
    hits = np.bincount(layer_of * R + slots, minlength=L * R)
    if (hits != 1).any():
        lay, s = divmod(int(np.flatnonzero(hits != 1)[0]), R)
        return f"layer {lay}: slot {s} appears {hits[lay * R + s]} times in log2phy (each slot once)"
    if next_load is not None:
        wrong = (next_load > 0) & (logcnt == 0)
        if wrong.any():
            bad = np.argwhere(wrong)
            lay, e = bad[0]
            return (f"layer {lay}: expert {e} has load {int(next_load[lay, e])} in the next window but no replica "
                    f"({len(bad)} such experts in all)")
    return Placement(phy2log, log2phy, logcnt)


def window_balance(placement: Placement, load: np.ndarray, num_gpus: int) -> WindowScore:
    """Balance of ``placement`` under ``load`` (``[L, E]``): each expert's load split over its replicas."""
    phy2log, logcnt = placement.phy2log, placement.logcnt
    L, R = phy2log.shape
    load = np.asarray(load, dtype=np.float64)
    count = np.take_along_axis(logcnt, phy2log, axis=1)
    slot_load = np.take_along_axis(load, phy2log, axis=1) / count  # every slot's expert has count >= 1
    gpu_load = slot_load.reshape(L, num_gpus, R // num_gpus).sum(axis=2)
    expert_max, gpu_max = slot_load.max(axis=1).sum(), gpu_load.max(axis=1).sum()
    bal_expert = float(slot_load.mean(axis=1).sum() / expert_max) if expert_max > 0 else 0.0
    bal_gpu = float(gpu_load.mean(axis=1).sum() / gpu_max) if gpu_max > 0 else 0.0
    gmax = gpu_load.max(axis=1)
    per_layer = np.divide(gpu_load.mean(axis=1), gmax, out=np.zeros(L), where=gmax > 0)
    worst = int(per_layer.argmin())
    return WindowScore(bal_expert, bal_gpu, worst, float(per_layer[worst]))
