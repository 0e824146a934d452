# reasearch: jail (imported inside the sandbox by spec.py: see reasearch/engine/_runtime.py)
"""The one home of the rules about scores: which of two is better, the best so far, how long since it
improved, and how a score reads as text.

Everything that ranks or prints scores (the run's status, the agent's snapshot and tools, the console,
reports, baseline methods) calls these, so a rule changes in one place. Pure functions over numbers and
status strings; nothing here runs a candidate. A score counts only when its evaluation's status is ``OK``
(a ``Status`` member or the stored string ``"OK"``, which compare equal: ``Status`` is str-valued).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

__all__ = ["best_index", "fmt_score", "heldout_text", "is_better", "ok_score", "running_best", "since_best"]

Direction = Literal["maximize", "minimize"]
# ``Status.OK``'s value. Not imported from ``reasearch.engine.protocol``: ``spec.py`` imports this module, and
# it sits on the CLI's cold-start path and in the jail, where loading the engine package costs time.
_OK = "OK"


def is_better(direction: str, a: float, b: float | None) -> bool:
    """True when score ``a`` beats ``b`` under ``direction`` (None is beaten by anything)."""
    if b is None:
        return True
    return a > b if direction == "maximize" else a < b


def ok_score(status: str, score: float | None) -> float | None:
    """The score of an evaluation that counts for "best so far": its score when ``OK``, else None."""
    return score if status == _OK and score is not None else None


def best_index(scores: Sequence[float | None], direction: str) -> int | None:
    """Index of the first evaluation reaching the best score (None entries never count); None when none."""
    best: int | None = None
    for i, s in enumerate(scores):
        if s is not None and (best is None or is_better(direction, s, scores[best])):
            best = i
    return best


def since_best(scores: Sequence[float | None], direction: str) -> int:
    """Evaluations after the one that last improved the best score (all of them when none scored)."""
    best = best_index(scores, direction)
    return len(scores) if best is None else len(scores) - 1 - best


def running_best(scores: Iterable[float | None], direction: str) -> list[float | None]:
    """The best score so far after each evaluation (None until one scored)."""
    best: float | None = None
    out: list[float | None] = []
    for s in scores:
        if s is not None and is_better(direction, s, best):
            best = s
        out.append(best)
    return out


def fmt_score(x: float | None, *, digits: int = 12, small: float | None = None) -> str:
    """A score for people: ``-`` for None, ``digits`` significant digits, never ``-0``.

    With ``small`` set, a nonzero score of magnitude below it is written in scientific notation
    (``1.2346e-05``), as reports print them.
    """
    if x is None:
        return "-"
    x = x + 0.0  # no "-0"
    if small is not None and x != 0 and abs(x) < small:
        return f"{x:.4e}"
    return f"{x:.{digits}g}"


def heldout_text(metrics: Mapping[str, Any]) -> str:
    """What a result's ``heldout_public`` and ``sealed`` say about the data it was scored on, in words; ``""``
    when it states neither (a task without a held-out data set of its own)."""
    public = metrics.get("heldout_public")
    if public is True:
        return "PUBLIC held-out data (a repository can carry it, a model can recite it): not sealed"
    if public is False:
        return "private held-out data: " + ("sealed" if metrics.get("sealed") is True else "not sealed")
    if "sealed" in metrics:
        return "sealed" if metrics.get("sealed") is True else "not sealed"
    return ""
