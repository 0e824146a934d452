# reasearch: jail (imported inside the sandbox: see reasearch/engine/_runtime.py)
"""Runs inside the sandbox, once per timed call: hands one window's loads to ``rebalance_experts``.

Nothing here is trusted with the score: the parent validates and scores the three arrays this returns
against the next window (which never enters the sandbox), and bounds the time reported here by its
own measurements (see ``reasearch.evaluators.eplb._timing``).

Three kinds of call, chosen by the parent's payload:

* ``{"setup": True, "seed": s, "weight_type": "torch"|"numpy"}`` (once, untimed): inspects the
  entry point's signature, sets the C allocator to keep freed memory (``reasearch.native.alloc``: a
  NumPy program's temporaries would otherwise be page-faulted in afresh on every call), imports torch
  when the candidate uses it (outside every timed call: torch's import takes seconds) and seeds
  ``random``, ``numpy.random`` and torch from the evaluation seed;
* a window (``{"weight": ..., "num_replicas": ..., ...}``): calls the candidate with the arguments its
  signature asks for (published programs take them positionally) and returns the placement plus
  ``t_ns``, the call's duration on a clock captured when this module was imported (before any
  candidate code ran);
* ``{"echo": [[shape, dtype], ...], "wait_ns": w, <window>}``: the path of a timed call with the
  candidate's call replaced by building arrays of those shapes and busy-waiting ``w`` ns, so that the
  parent can measure what the transport of such an answer costs; besides ``t_ns`` it reports
  ``t_cpu_ns``, the CPU time of that busy-wait (less than ``t_ns`` when the process was preempted), so
  that the worker's per-call CPU less it is the harness's own CPU. The replays the timing relies on run
  in the parent's own calibration session, never with a candidate's code; a few untimed ones also open
  the candidate's session (the same warm-up on both sides, see ``session.warm_up``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from reasearch.evaluators._entry_call import EntryArgs, bind_entry, seed_everything
from reasearch.native.alloc import keep_freed_memory

__all__ = ["ENTRY_ARGS", "compact", "rebalance", "warmup"]

_NAMES = ("phy2log", "log2phy", "logcnt")
_CLOCK = time.perf_counter_ns  # bound at import, before the candidate is loaded
_CPU_CLOCK = time.thread_time_ns  # an echo's own CPU while it busy-waits (the evaluator's session only)
_ARGS = ("weight", "num_replicas", "num_groups", "num_nodes", "num_gpus")

ENTRY_ARGS: EntryArgs = EntryArgs(
    {
        "weight": ("weight", "weights", "load", "expert_load"),
        "num_replicas": ("num_replicas", "num_physical_experts", "num_slots"),
        "num_groups": ("num_groups", "n_groups"),
        "num_nodes": ("num_nodes", "n_nodes"),
        "num_gpus": ("num_gpus", "num_ranks", "n_gpus"),
    },
    positional=_ARGS,
    required=_ARGS,
    forms=("(weight, num_replicas, num_groups, num_nodes, num_gpus)",),
)
"""The published signature (vLLM/DeepSeek ``rebalance_experts``), matched by name, else by position.

No ``seed`` is offered: the evaluation seed selects the synthetic trace, which the candidate must not
learn (the generators are seeded from it all the same)."""

_callers: dict[int, tuple[Callable[..., Any], Callable[[Mapping[str, Any]], Any]]] = {}
_state: dict[str, Any] = {"weight_type": "numpy"}


def compact(arr: np.ndarray) -> np.ndarray:
    """The narrowest of int16/int32/int64 that holds an integer array's values exactly (others: a copy).

    The answer travels back on every call, so it travels small: a ``log2phy`` of slot ids fits int16
    (a quarter of the bytes); the parent reads any integer dtype.
    """
    if arr.dtype.kind in "iu" and arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        for dtype in (np.int16, np.int32, np.int64):
            info = np.iinfo(dtype)
            if info.min <= lo and hi <= info.max:
                return np.ascontiguousarray(arr, dtype=dtype)
    return np.array(arr, copy=True, order="C")


def _plain(value: Any, name: str) -> np.ndarray:
    """A compact NumPy copy of an array or tensor; non-numeric data is refused (the parent reports it)."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        value = value.detach().cpu().numpy()
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be an integer array, got dtype {arr.dtype}")
    return compact(arr)


def _caller(entry: Callable[..., Any]) -> Callable[[Mapping[str, Any]], Any]:
    """The entry point's bound caller, built once per function (the signature is inspected once)."""
    got = _callers.get(id(entry))
    if got is None or got[0] is not entry:
        got = (entry, bind_entry(entry, ENTRY_ARGS))
        _callers[id(entry)] = got
    return got[1]


def _setup(entry: Callable[..., Any], payload: Mapping[str, Any]) -> dict[str, Any]:
    _caller(entry)  # the signature is inspected here, not before the first timed call
    allocator = keep_freed_memory()  # each call's arrays reuse the last call's pages, not fresh ones
    weight_type = "torch" if payload.get("weight_type") == "torch" else "numpy"
    if weight_type == "torch":
        import torch  # noqa: F401 - imported here so that no timed call pays for it

    _state["weight_type"] = weight_type
    seed_everything(payload.get("seed"))
    return {"ready": True, "weight_type": weight_type, "allocator": allocator}


def _arguments(payload: Mapping[str, Any], weight_type: str) -> dict[str, Any]:
    """The call's arguments from a window payload (the same work before a timed call and an echo)."""
    weight: Any = np.asarray(payload["weight"], dtype=np.int64)  # sent compact, always handed over as int64
    if weight_type == "torch":
        import torch

        weight = torch.from_numpy(weight)
    values: dict[str, Any] = {"weight": weight}
    for name in _ARGS[1:]:
        values[name] = int(payload[name])
    return values


def _answer(out: Any, t_ns: int) -> dict[str, Any]:
    """The three arrays in their compact wire form, and the timed duration (the same work after a
    timed call and an echo)."""
    result: dict[str, Any] = {name: _plain(value, name) for name, value in zip(_NAMES, out, strict=False)}
    result["t_ns"] = int(t_ns)
    return result


def _source_array(shape: Any, dtype: Any) -> np.ndarray:
    """An array that :func:`compact` turns into ``dtype``: int64 for an integer wire dtype (what
    published programs return: the echo pays the same narrowing they do), else ``dtype`` itself."""
    dims = tuple(max(int(s), 0) for s in shape)
    wire = np.dtype(str(dtype))
    if wire.kind != "i":
        return np.zeros(dims, dtype=wire)
    fill = {1: 0, 2: 0, 4: 1 << 16, 8: 1 << 40}[wire.itemsize]
    return np.full(dims, fill, dtype=np.int64)


def _echo(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A replay: the path of a timed call, with arrays of the answer's shapes built and a busy-wait
    of ``wait_ns`` (standing in for the algorithm) where the candidate's call would be."""
    if "weight" in payload:
        _arguments(payload, "numpy")
    wait = int(payload.get("wait_ns") or 0)
    c0 = _CPU_CLOCK()
    t0 = _CLOCK()
    arrays = [_source_array(shape, dtype) for shape, dtype in payload["echo"]]
    while wait > 0 and _CLOCK() - t0 < wait:
        pass
    t1 = _CLOCK()
    c1 = _CPU_CLOCK()
    return {**_answer(arrays, t1 - t0), "t_cpu_ns": c1 - c0}


def rebalance(entry: Callable[..., Any], payload: Mapping[str, Any]) -> dict[str, Any]:
    """One call of the session (see the module docstring): setup, a timed window, or a calibration echo."""
    if payload.get("setup"):
        return _setup(entry, payload)
    if "echo" in payload:
        return _echo(payload)
    call = _caller(entry)
    values = _arguments(payload, payload.get("weight_type", _state["weight_type"]))
    t0 = _CLOCK()
    out = call(values)
    t1 = _CLOCK()
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        raise TypeError(
            f"{getattr(entry, '__name__', 'rebalance_experts')}() must return (phy2log, log2phy, logcnt), "
            f"got {type(out).__name__}" + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else "")
        )
    return _answer(out, t1 - t0)


def warmup() -> None:
    """Loads the compiled EPLB kernels in the worker, so candidates that import them pay nothing."""
    from reasearch.native.eplb import rebalance_experts

    rebalance_experts(np.arange(16, dtype=np.int64).reshape(1, 16), 24, 4, 2, 4)
