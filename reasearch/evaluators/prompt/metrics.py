"""Answer extraction and the named metrics of prompt tasks (exact, normalized exact, numeric, token F1).

Every metric maps ``(prediction text, reference text)`` to a value in ``[0, 1]``; an example counts as
correct when the value is 1. Extraction is deterministic and never raises on any input.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from decimal import Decimal, InvalidOperation
from typing import Callable

__all__ = ["METRICS", "extract_final_number", "extract_prediction", "normalize_text", "number_value",
           "exact", "normalized_exact", "numeric", "token_f1"]

_NUMBER = re.compile(r"-?\$?\s?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_MAX_SCAN = 100_000  # characters of a reply that extraction looks at (the tail: answers come last)


def number_value(text: str) -> Decimal | None:
    """The value of a number written as in GSM8K answers (``1,234``, ``$5``, ``-3.50``); None if none."""
    cleaned = text.replace(",", "").replace("$", "").replace(" ", "").strip()
    if cleaned.endswith("."):
        cleaned = cleaned[:-1]
    try:
        value = Decimal(cleaned)
    except (InvalidOperation, ValueError):
        return None
    return value if value.is_finite() else None


def extract_final_number(text: str, marker: str = "####") -> Decimal | None:
    """The final number of a reply: the first number after the last ``marker``, else the last number."""
    text = str(text)[-_MAX_SCAN:]
    if marker and marker in text:
        tail = text.rsplit(marker, 1)[1]
        found = _NUMBER.findall(tail)
        if found:
            return number_value(found[0])
        return None
    found = _NUMBER.findall(text)
    return number_value(found[-1]) if found else None


def extract_prediction(text: str, prefix: str = "Answer:") -> str:
    """The answer part of a reply: what follows the last ``prefix`` (to the end of that line), else the
    last non-empty line."""
    text = str(text)[-_MAX_SCAN:]
    if prefix and prefix in text:
        after = text.rsplit(prefix, 1)[1].strip()
        return after.splitlines()[0].strip() if after else ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def normalize_text(text: str) -> str:
    """SQuAD-style normalization: lower case, no punctuation, no articles, single spaces."""
    text = str(text).lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact(prediction: str, reference: str) -> float:
    return 1.0 if str(prediction).strip() == str(reference).strip() else 0.0


def normalized_exact(prediction: str, reference: str) -> float:
    return 1.0 if normalize_text(prediction) == normalize_text(reference) else 0.0


def numeric(prediction: str, reference: str) -> float:
    """1 when the last number of the prediction equals the reference's number exactly (decimal)."""
    ref = extract_final_number(reference, marker="")
    pred = extract_final_number(prediction, marker="")
    return 1.0 if ref is not None and pred is not None and pred == ref else 0.0


def token_f1(prediction: str, reference: str) -> float:
    """Token-level F1 of the normalized texts (1 when both are empty)."""
    p, r = normalize_text(prediction).split(), normalize_text(reference).split()
    if not p or not r:
        return 1.0 if p == r else 0.0
    common = sum((Counter(p) & Counter(r)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(r)
    return 2 * precision * recall / (precision + recall)


METRICS: dict[str, Callable[[str, str], float]] = {
    "exact": exact,
    "normalized_exact": normalized_exact,
    "numeric": numeric,
    "token_f1": token_f1,
}
