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

__all__ = ["REFERENCES_PATH", "load_references", "references_for"]

REFERENCES_PATH = Path(__file__).with_name("references.json")
_REQUIRED = ("task", "method", "score", "source", "budget")
_OPTIONAL = ("metric", "as_published", "note", "params")


def load_references(path: str | Path | None = None) -> tuple[dict[str, Any], ...]:
    """The rows of ``path`` (default: the shipped ``references.json``), checked.

    Raises:
        ConfigError: a row without a required key, with an unknown key, or with a score that is not a finite number.
    """
    return _shipped() if path is None else _load(str(path))


@cache
def _shipped() -> tuple[dict[str, Any], ...]:
    return _load(str(REFERENCES_PATH))


def _load(path: str) -> tuple[dict[str, Any], ...]:
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        raise ConfigError(f"{path}: no 'rows' list")
    out = []
    for i, row in enumerate(rows):
        where = f"{path}: row {i}"
        if not isinstance(row, dict):
            raise ConfigError(f"{where} is not an object")
        missing = [k for k in _REQUIRED if k not in row]
        unknown = sorted(set(row) - set(_REQUIRED) - set(_OPTIONAL))
        if missing or unknown:
            raise ConfigError(f"{where}: " + "; ".join(
                ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(unknown)}"] if unknown
                                                                          else [])))
        score = row["score"]
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise ConfigError(f"{where}: score must be a finite number, not {score!r}")
        if not all(isinstance(row[k], str) and row[k].strip() for k in ("task", "method", "source", "budget")):
            raise ConfigError(f"{where}: task, method, source and budget must be non-empty text")
        if not isinstance(row.get("params", {}), dict):
            raise ConfigError(f"{where}: params must be an object")
        out.append({"metric": "score", **row, "score": float(score)})
    return tuple(out)


def references_for(task_id: str, params: Mapping[str, Any] | None = None,
                   rows: tuple[dict[str, Any], ...] | None = None) -> list[dict[str, Any]]:
    """The reference rows of ``task_id`` whose ``params`` conditions ``params`` meets (each row a fresh dict)."""
    have = dict(params or {})
    return [dict(r) for r in (load_references() if rows is None else rows) if r["task"] == task_id
            and all(k in have and have[k] == v for k, v in r.get("params", {}).items())]
