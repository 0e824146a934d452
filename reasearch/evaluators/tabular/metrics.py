"""The metrics of ``tabular/csv-v2`` and the trusted parser of prediction files.

Trust boundary: prediction files are written by candidate code; :func:`parse_predictions` takes their
bytes (read by :func:`reasearch.evaluators.outputs.read_output`) and accepts only a CSV with the
header ``row_id,prediction``, every expected id exactly once, nothing else, finite numbers.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

__all__ = ["DIRECTIONS", "METRICS", "PredictionError", "accuracy", "mae", "parse_predictions", "pearson", "rmse"]


class PredictionError(ValueError):
    """A prediction file that breaks the format (the message says how)."""


def pearson(pred: np.ndarray, truth: np.ndarray) -> float:
    """Pearson correlation; 0.0 when either side is constant (no linear signal to measure)."""
    p, t = pred.astype(np.float64) - pred.mean(), truth.astype(np.float64) - truth.mean()
    denom = math.sqrt(float(p @ p) * float(t @ t))
    return float(p @ t) / denom if denom > 0 else 0.0


def rmse(pred: np.ndarray, truth: np.ndarray) -> float:
    return float(np.sqrt(np.mean((pred.astype(np.float64) - truth) ** 2)))


def mae(pred: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean(np.abs(pred.astype(np.float64) - truth)))


def accuracy(pred: np.ndarray, truth: np.ndarray) -> float:
    """Share of rows whose prediction equals the class label (labels and predictions are numbers)."""
    return float(np.mean(pred == truth))


METRICS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "pearson": pearson, "rmse": rmse, "mae": mae, "accuracy": accuracy}
DIRECTIONS: dict[str, Literal["maximize", "minimize"]] = {
    "pearson": "maximize", "rmse": "minimize", "mae": "minimize", "accuracy": "maximize"}


def parse_predictions(data: bytes, ids: Sequence[int], what: str) -> np.ndarray:
    """The predictions of ``data`` (CSV ``row_id,prediction``) in the order of ``ids``.

    Raises:
        PredictionError: not UTF-8, wrong header, a malformed row, an unknown, missing or repeated id, a
            prediction that is not a finite number.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise PredictionError(f"{what} is not UTF-8 text") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if header is None or [h.strip() for h in header] != ["row_id", "prediction"]:
        raise PredictionError(f"{what} must start with the header 'row_id,prediction', not {header!r:.80}")
    pos = {i: k for k, i in enumerate(ids)}
    out = np.full(len(ids), np.nan)
    seen = np.zeros(len(ids), dtype=bool)
    for lineno, row in enumerate(reader, 2):
        if not row:
            continue
        if len(row) != 2:
            raise PredictionError(f"{what}:{lineno}: {len(row)} fields, expected row_id,prediction")
        try:
            rid = int(row[0].strip())
        except ValueError:
            raise PredictionError(f"{what}:{lineno}: row_id {row[0][:30]!r} is not an integer") from None
        k = pos.get(rid)
        if k is None:
            raise PredictionError(f"{what}:{lineno}: row_id {rid} is not one of the rows to predict")
        if seen[k]:
            raise PredictionError(f"{what}:{lineno}: row_id {rid} appears twice")
        try:
            value = float(row[1])
        except ValueError:
            raise PredictionError(f"{what}:{lineno}: prediction {row[1][:30]!r} is not a number") from None
        if not math.isfinite(value):
            raise PredictionError(f"{what}:{lineno}: prediction {row[1][:30]!r} is not finite")
        out[k] = value
        seen[k] = True
    if not seen.all():
        missing = [ids[k] for k in np.flatnonzero(~seen)[:5]]
        raise PredictionError(f"{what} lacks {int((~seen).sum())} of its {len(ids)} rows (e.g. row_id {missing})")
    return out
