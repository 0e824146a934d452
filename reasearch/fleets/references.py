"""Published per-method results of the shipped tasks (``references.json``), shown beside a comparison's
measured rows as references: published, not measured here.

Trust boundary: reads a data file shipped with the package; nothing here is measured or believed as a score.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from reasearch.errors import ConfigError

__all__ = ["REFERENCES_PATH", "is_score", "load_references", "references_for"]

REFERENCES_PATH = Path(__file__).with_name("references.json")
_REQUIRED = ("task", "method", "score", "source", "budget")
_OPTIONAL = ("metric", "as_published", "note", "params")


def load_references(path: str | Path | None = None) -> tuple[dict[str, Any], ...]:
    """The rows of ``path`` (default: the shipped ``references.json``), checked.

    Raises:
        ConfigError: a row without a required key, with an unknown key, with a score that is not a finite number,
            with a metric, as_published or note that is not non-empty text, or with params that are not an object
            of plain values; the message names the row (its index, and its task and method when it has them).
    """
    return _shipped() if path is None else _load(str(path))


@cache
def _shipped() -> tuple[dict[str, Any], ...]:
    return _load(str(REFERENCES_PATH))


def _load(path: str) -> tuple[dict[str, Any], ...]:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        raise ConfigError(f"{path}: no 'rows' list")
    out = []
    for i, row in enumerate(rows):
        where = f"{path}: row {i}"
        if not isinstance(row, dict):
            raise ConfigError(f"{where} is not an object")
        if isinstance(row.get("task"), str) and isinstance(row.get("method"), str):
            where += f" ({row['task']}: {row['method']})"
        missing = [k for k in _REQUIRED if k not in row]
        unknown = sorted(set(row) - set(_REQUIRED) - set(_OPTIONAL))
        if missing or unknown:
            raise ConfigError(f"{where}: " + "; ".join(
                ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(unknown)}"] if unknown
                                                                          else [])))
        score = row["score"]
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise ConfigError(f"{where}: score must be a finite number, not {score!r}")
        texts = ("task", "method", "source", "budget", "metric", "as_published", "note")
        bad = [k for k in texts if k in row and not (isinstance(row[k], str) and row[k].strip())]
        if bad:
            raise ConfigError(f"{where}: {', '.join(bad)} must be non-empty text")
        params = row.get("params", {})
        plain = (str, int, float, bool, type(None))
        if not isinstance(params, dict) or not all(isinstance(v, plain) for v in params.values()):
            raise ConfigError(f"{where}: params must be an object of plain values (text, numbers, true/false)")
        out.append({"metric": "score", **row, "score": float(score)})
    return tuple(out)


def is_score(ref: Mapping[str, Any]) -> bool:
    """Whether a reference row's figure is in the task's own score (else it is another metric: shown, never ranked,
    never in a score column)."""
    return ref.get("metric", "score") == "score"


def references_for(task_id: str, params: Mapping[str, Any] | None = None,
                   rows: tuple[dict[str, Any], ...] | None = None) -> list[dict[str, Any]]:
    """The reference rows of ``task_id`` whose ``params`` conditions ``params`` meets (each row a fresh dict)."""
    have = dict(params or {})
    return [dict(r) for r in (load_references() if rows is None else rows) if r["task"] == task_id
            and all(k in have and have[k] == v for k, v in r.get("params", {}).items())]
