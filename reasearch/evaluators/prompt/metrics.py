"""Answer extraction, the named metrics and the answer rules of prompt tasks.

Every metric maps ``(prediction text, reference text)`` to a value in ``[0, 1]``; an example counts as
correct when the value is 1. Extraction is deterministic and never raises on any input.

Trust boundary: replies are a student's output (hostile). A number in a reply is an answer only when it is
finite and bounded: at most :data:`MAX_ANSWER_DIGITS` significant digits and a decimal exponent within
that many places (a 401-digit integer, ``1e400`` or ``NaN`` is no answer); extraction looks at a capped tail.
"""

from __future__ import annotations

import json
import math
import re
import string
from collections import Counter
from collections.abc import Callable
from decimal import Context, Decimal, InvalidOperation
from typing import Any

__all__ = ["ANSWER_RULES", "METRICS", "apply_answer_rule", "check_answer_rule", "extract_json_field", "split_code",
           "extract_final_number", "extract_prediction", "normalize_text", "number_value",
           "exact", "normalized_exact", "numeric", "token_f1", "MAX_ANSWER_DIGITS", "plain_number"]

_NUMBER = re.compile(r"-?\$?\s?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_MAX_SCAN = 100_000  # characters of a reply that extraction looks at (the tail: answers come last)
MAX_ANSWER_DIGITS = 400  # significant digits (and decimal exponent) of a number that can be an answer
_EXACT = Context(prec=MAX_ANSWER_DIGITS + 10)  # enough precision that normalizing a bounded answer never rounds


def number_value(text: str) -> Decimal | None:
    """The value of a number written as in GSM8K answers (``1,234``, ``$5``, ``-3.50``); None if none."""
    cleaned = text.replace(",", "").replace("$", "").replace(" ", "").strip()
    if cleaned.endswith("."):
        cleaned = cleaned[:-1]
    if len(cleaned) > 2 * MAX_ANSWER_DIGITS + 20:
        return None
    try:
        value = Decimal(cleaned)
    except (InvalidOperation, ValueError):
        return None
    return value if _bounded(value) else None


def _bounded(value: Decimal) -> bool:
    """Finite, at most MAX_ANSWER_DIGITS significant digits, and an exponent within that many places."""
    if not value.is_finite():
        return False
    if not value:
        return True
    if abs(value.adjusted()) > MAX_ANSWER_DIGITS:  # checked first: normalizing 1E+999999999 would overflow
        return False
    return len(value.normalize(_EXACT).as_tuple().digits) <= MAX_ANSWER_DIGITS


def plain_number(value: Decimal) -> str:
    """A bounded number written out without exponent and without trailing zeros (``1E+2`` -> ``100``)."""
    return format(value.normalize(_EXACT), "f")


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


# ---------------------------------------------------------------------------------------- answer rules
# ``-p answer=RULE`` of prompt/jsonl-v1: how the prediction is found in a reply and compared with the
# reference. Every rule reads the reply outside fenced code blocks first and looks inside them only when
# nothing is found outside (a worked solution's code is not its answer; a reply that is only a code block
# still has one), and takes the *last* answer when there are several (replies revise themselves).

ANSWER_RULES = ("after-####", "last-number", "json:FIELD", "exact", "normalized-exact", "token-f1")
_FENCE = re.compile(r"```[^\n`]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_MAX_JSON_STARTS = 200  # '{' positions tried from the end of the reply (a reply of many braces stays cheap)


def check_answer_rule(rule: str) -> str:
    """``rule`` if it names an answer rule (``json:FIELD`` with a non-empty FIELD); ValueError otherwise."""
    if rule in ANSWER_RULES and rule != "json:FIELD":
        return rule
    if rule.startswith("json:") and rule[5:].strip():
        return rule
    raise ValueError(f"answer must be one of {', '.join(ANSWER_RULES)} (json:FIELD names a field, e.g. "
                     f"json:final_answer), not {rule!r}")


def split_code(text: str) -> tuple[str, str]:
    """``(outside, inside)``: the reply without its fenced code blocks, and their contents joined."""
    text = str(text)[-_MAX_SCAN:]
    inside = "\n".join(m.group(1) for m in _FENCE.finditer(text))
    return _FENCE.sub("\n", text), inside


def _after_marker(text: str, marker: str = "####") -> Decimal | None:
    if marker not in text:
        return None
    found = _NUMBER.findall(text.rsplit(marker, 1)[1])
    return number_value(found[0]) if found else None


def _last_number(text: str) -> Decimal | None:
    found = _NUMBER.findall(text)
    return number_value(found[-1]) if found else None


def extract_json_field(text: str, field: str) -> Any:
    """The value of ``field`` in the last JSON object of ``text`` that has it (trailing text, code fences and
    several objects allowed); :data:`MISSING` when none has it."""
    decoder = json.JSONDecoder()
    starts = [i for i, ch in enumerate(text) if ch == "{"][-_MAX_JSON_STARTS:]
    for i in reversed(starts):
        try:
            obj, _ = decoder.raw_decode(text, i)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict) and field in obj:
            return obj[field]
    return MISSING


MISSING: Any = object()


def _first(extract: Callable[[str], Any], text: str) -> Any:
    outside, inside = split_code(text)
    value = extract(outside)
    if value is None or value is MISSING:
        value = extract(inside)
    return value


def _json_text(value: Any) -> str | None:
    """A JSON field's value as answer text: strings and numbers (bools, null, lists, objects are no answer)."""
    if isinstance(value, bool) or value is None or value is MISSING:
        return None
    if isinstance(value, int):  # any size (a 401-digit integer): compared by magnitude before it is written out
        return str(value) if abs(value) < 10 ** MAX_ANSWER_DIGITS else None
    if isinstance(value, float):
        return plain_number(Decimal(repr(value))) if math.isfinite(value) else None
    return value.strip() if isinstance(value, str) else None


def apply_answer_rule(rule: str, reply: str, reference: str, *, prefix: str = "Answer:") -> tuple[float, str]:
    """``(value in [0, 1], prediction)`` of ``reply`` under ``rule``; the prediction is ``""`` when the reply has
    no answer. Numeric rules compare decimals exactly (``1,000`` = ``1000.0``); ``json:FIELD`` compares numbers
    as numbers and text by normalized exact match; the text rules compare what follows the last ``prefix``
    (else the last non-empty line). Never raises."""
    if rule in ("after-####", "last-number"):
        pred = _first(_after_marker if rule == "after-####" else _last_number, reply)
        if pred is None:
            return 0.0, ""
        ref = number_value(reference)
        ref = ref if ref is not None else extract_final_number(reference, marker="####")
        return (1.0 if ref is not None and pred == ref else 0.0), plain_number(pred)
    if rule.startswith("json:"):
        text = _json_text(_first(lambda t: extract_json_field(t, rule[5:]), reply))
        if not text:
            return 0.0, ""
        a, b = number_value(text), number_value(reference)
        if a is not None and b is not None:
            return (1.0 if a == b else 0.0), text
        return normalized_exact(text, reference), text
    pred = _first(lambda t: extract_prediction(t, prefix) or None, reply) or ""
    if not pred:
        return 0.0, ""
    metric = {"exact": exact, "normalized-exact": normalized_exact, "token-f1": token_f1}[rule]
    return float(metric(pred, reference)), pred
