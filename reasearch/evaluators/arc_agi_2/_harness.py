# reasearch: jail (imported inside the sandbox: see reasearch/engine/_runtime.py)
"""The harness that runs inside the sandbox around an ARC candidate (stdlib only, import-light).

It receives the input grids only (train inputs while optimizing, test inputs on submit), calls
``transform_grid_attempt_1`` and ``transform_grid_attempt_2`` on a fresh copy of every input, and
returns each attempt's output as plain lists, or a marker saying why there is none. The trusted side
re-validates everything it gets back: whatever this code reports is a convenience, never believed.
Before the first call it seeds ``random`` (and ``numpy.random`` and torch when loaded) from the
payload's seed, so one source and one seed give one result.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from typing import Any

from reasearch.evaluators._entry_call import seed_everything

ATTEMPTS = ("transform_grid_attempt_1", "transform_grid_attempt_2")
_MAX_SIDE = 30
_TRACE_CHARS = 1500  # traceback tail kept per failed attempt


def _plain(value: Any) -> Any:
    """NumPy arrays and scalars to lists and ints; a grid too large to be valid is not copied back."""
    if hasattr(value, "tolist") and not isinstance(value, (list, tuple)):
        shape = getattr(value, "shape", None)
        if shape is not None and any(int(s) > _MAX_SIDE for s in shape):
            return {"kind": "malformed", "error": f"{'x'.join(str(int(s)) for s in shape)} array exceeds 30x30"}
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        if len(value) > _MAX_SIDE or any(_length(r) > _MAX_SIDE for r in value):
            cols = _length(value[0]) if value else 0
            return {"kind": "malformed", "error": f"{len(value)}x{cols} grid exceeds 30x30"}
        return [_plain_row(r) for r in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return {"kind": "malformed", "error": f"returned {type(value).__name__}, not a list of rows"}


def _length(row: Any) -> int:
    try:
        return len(row) if isinstance(row, (list, tuple)) or hasattr(row, "tolist") else 0
    except TypeError:  # a 0-d array
        return 0


def _cell(v: Any) -> Any:
    """A cell as plain data; anything the trusted side could not even print is described instead."""
    if isinstance(v, bool) or v is None or isinstance(v, float):
        return v
    if isinstance(v, int):
        return v if -(10**9) < v < 10**9 else f"an int of {v.bit_length()} bits"
    if isinstance(v, str):
        return v[:40]
    return repr(v)[:40]


def _plain_row(row: Any) -> Any:
    if hasattr(row, "tolist") and not isinstance(row, (list, tuple)):
        row = row.tolist()
    if isinstance(row, (list, tuple)):
        return [_cell(v) for v in row]
    return _cell(row)


def _call(fn: Callable[[Any], Any], grid: list[list[int]]) -> Any:
    try:
        out = fn([list(row) for row in grid])  # a fresh copy: an attempt may mutate its input
    except MemoryError:
        raise  # the sandbox reports OOM from this; the evaluation is over
    except Exception as exc:  # noqa: BLE001 - any candidate error fails this attempt only
        tail = traceback.format_exc()[-_TRACE_CHARS:]
        return {"kind": "error", "error": f"{type(exc).__name__}: {exc}"[:300], "traceback": tail}
    return _plain(out)


def run_attempts(entry_fn: Callable[[Any], Any], payload: dict[str, Any]) -> dict[str, Any]:
    """Runs both attempts on every input of ``payload["inputs"]``.

    Returns:
        ``{"attempts": [[out_1, out_2], ...]}``, one row per input; an ``out`` is a grid (lists) or
        ``{"kind": "error" | "missing" | "malformed", "error": text}``.
    """
    seed_everything(payload.get("seed"), import_numpy=False)  # stays import-light; NumPy is preloaded
    namespace = getattr(entry_fn, "__globals__", None) or vars(sys.modules.get("candidate", object()))
    fns: list[Callable[[Any], Any] | None] = []
    for name in ATTEMPTS:
        fn = namespace.get(name)
        fns.append(fn if callable(fn) else None)
    if fns[0] is None:
        fns[0] = entry_fn
    rows = []
    for grid in payload["inputs"]:
        row = []
        for name, fn in zip(ATTEMPTS, fns, strict=True):
            if fn is None:
                row.append({"kind": "missing", "error": f"no function named {name}"})
            else:
                row.append(_call(fn, grid))
        rows.append(row)
    return {"attempts": rows}
