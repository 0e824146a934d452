"""The demo model's strategy on training tasks (``run_experiment`` on offer): pure functions over its history.

The demo reads ``TASK.md`` and ``train.py``, runs the seed repository as it is, then repeats "write a
variant of the best ``train.py`` so far, run it, wait for its result". The first variant is a task-aware
edit when the seed has the shape of the tabular seed (a ``matrix(header, rows, cols)`` builder of the
numeric columns and a ``TIME`` column it ignores): it appends squares of those columns, a trend and
weekly and yearly Fourier terms of the time column, and trains longer. Later variants perturb the
numeric literals of the best ``train.py`` (:func:`reasearch.models.demo.mutate_python`). After a NEW
BEST it commits (``git commit -am``), so the repository's head is the best state; a variant that did
not improve is never built on (the next one is written from the best source).

Trust boundary: tool results (a candidate's logs among them) are only parsed with regular expressions;
the demo executes nothing on the host.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Experiment", "experiments", "numbered_text", "seasonal_edit"]

_TIME_FEATURES = '''

def time_features(header, rows):
    """Trend, weekly and yearly seasonality from the time column (an edit of the demo model)."""
    import datetime as _dt
    j = header.index(TIME)
    t = np.zeros(len(rows))
    for i, r in enumerate(rows):
        try:
            t[i] = _dt.date.fromisoformat(r[j][:10]).toordinal()
        except ValueError:
            try:
                t[i] = float(r[j])
            except ValueError:
                t[i] = 0.0
    cols = [t / 365.25]
    for period, harmonics in ((7.0, 3), (365.25, 2)):
        for k in range(1, harmonics + 1):
            cols += [np.sin(2 * np.pi * k * t / period), np.cos(2 * np.pi * k * t / period)]
    return np.stack(cols, 1)
'''
_MATRIX = "\n\ndef matrix(header, rows, cols):"
_RETURN = "    return np.nan_to_num(x)\n"
_EPOCHS = re.compile(r"^EPOCHS = (\d+)$", re.MULTILINE)


class _StepLike(Protocol):
    """One earlier tool call and its answer (the demo's ``_Step``)."""

    @property
    def name(self) -> str: ...
    @property
    def input(self) -> Mapping[str, Any]: ...
    @property
    def result(self) -> str: ...
    @property
    def error(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Experiment:
    """One experiment the demo started: its id, the ``train.py`` it ran, its score once it ended."""

    step: int
    source: str
    ended: bool
    score: float | None


def seasonal_edit(source: str) -> str | None:
    """``source`` with time features, squared columns and 10x the epochs; None when it lacks the anchors."""
    if "def time_features" in source or source.count(_MATRIX) != 1 or source.count(_RETURN) != 1 \
            or "TIME" not in source:
        return None
    out = source.replace(_MATRIX, _TIME_FEATURES + _MATRIX, 1)
    out = out.replace(_RETURN, "    x = np.hstack([x, x ** 2, time_features(header, rows)])\n" + _RETURN, 1)
    return _EPOCHS.sub(lambda m: f"EPOCHS = {int(m.group(1)) * 15}", out, count=1)


def numbered_text(text: str) -> str:
    """``read_file``'s answer (``{n:5d}  line`` or ``n\\tline`` rows) as the file's text; "" when it is cut."""
    lines = text.splitlines()
    if lines and re.fullmatch(r"\[lines \d+-\d+ of \d+\]", lines[-1]):
        return ""  # only part of the file: never write a part back
    rows = [re.match(r"^ *\d+(?:\t|  )(.*)$", ln) for ln in lines]
    if not lines or any(m is None for m in rows):
        return text
    return "\n".join(m.group(1) for m in rows if m is not None) + "\n"


def experiments(steps: Sequence[_StepLike]) -> tuple[list[Experiment], str]:
    """The experiments of ``steps`` in order (with the ``train.py`` each ran) and ``train.py`` as it is now."""
    current = ""
    sources: dict[int, str] = {}
    results: dict[int, float | None] = {}
    for s in steps:
        path = str(s.input.get("path", "")).lstrip("./")
        if s.error:
            continue
        if s.name == "read_file" and path == "train.py":
            current = numbered_text(s.result)
        elif s.name == "write_file" and path == "train.py":
            current = str(s.input.get("content", ""))
        elif s.name in ("run_experiment", "wait_experiment"):
            m = re.match(r"experiment (\d+)", s.result)
            if m is None:
                continue
            step = int(m.group(1))
            if s.name == "run_experiment":
                sources.setdefault(step, current)
            if re.match(r"experiment \d+ \(", s.result):  # ended: "experiment N (commit): STATUS"
                score = re.search(r"^score: (-?[0-9.eE+-]+|inf|-inf|nan)$", s.result, re.MULTILINE)
                results[step] = float(score.group(1)) if score else None
    found = [Experiment(step, src, step in results, results.get(step)) for step, src in sorted(sources.items())]
    return found, current
