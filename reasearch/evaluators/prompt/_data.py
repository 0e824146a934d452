"""Loading prompt-task data (GSM8K, a user's JSONL) and the fixed-seed train/validation/test splits.

Everything here runs on the trusted side. Files are read with size caps and every record is checked,
so a malformed or hostile file fails with a message naming the line, never with a traceback.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasearch.errors import ConfigError

__all__ = [
    "Example",
    "Splits",
    "GSM8K_ENV",
    "context_text",
    "read_jsonl",
    "gsm8k_dir",
    "gsm8k_reference",
    "make_splits",
]

GSM8K_ENV = "REASEARCH_GSM8K_DATA"
MAX_FILE_BYTES = 512 * 1024 * 1024
MAX_RECORD_CHARS = 200_000


@dataclass(frozen=True, slots=True)
class Example:
    """One problem: ``id`` (split-local, e.g. ``train-17``), the input text, the reference answer the
    metric compares with, and the full reference (e.g. GSM8K's worked solution; shown for train only)."""

    id: str
    input: str
    answer: str
    reference: str = ""


@dataclass(frozen=True, slots=True)
class Splits:
    train: tuple[Example, ...]
    validation: tuple[Example, ...]
    test: tuple[Example, ...]


def read_jsonl(path: str | os.PathLike[str], input_field: str, answer_field: str, *,
               context_field: str | None = None) -> list[tuple[str, str]]:
    """``(input, answer)`` pairs of a JSONL file; blank lines are skipped. With ``context_field`` the input is
    that field's text (:func:`context_text`), a blank line and ``Question: <input>``.

    Raises:
        ConfigError: missing file, oversized file or record, bad JSON, missing or non-text fields.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"no such data file: {p}")
    size = p.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ConfigError(f"{p} is {size} bytes; the limit is {MAX_FILE_BYTES}")
    rows: list[tuple[str, str]] = []
    with p.open("r", encoding="utf-8", errors="strict") as fh:
        try:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                if len(line) > MAX_RECORD_CHARS:
                    raise ConfigError(
                        f"{p}:{lineno}: record of {len(line)} characters; the limit is {MAX_RECORD_CHARS}"
                    )
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{p}:{lineno}: not JSON ({exc.msg})") from None
                if not isinstance(rec, dict):
                    raise ConfigError(f"{p}:{lineno}: each line must be a JSON object, not {type(rec).__name__}")
                question = _field(rec, input_field, p, lineno)
                if context_field:
                    if context_field not in rec:
                        raise ConfigError(f"{p}:{lineno}: no field {context_field!r} (fields: {sorted(rec)[:10]})")
                    question = f"{context_text(rec[context_field], f'{p}:{lineno}')}\n\nQuestion: {question}"
                rows.append((question, _field(rec, answer_field, p, lineno)))
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{p}: not UTF-8 text ({exc.reason})") from None
    if not rows:
        raise ConfigError(f"{p} holds no records")
    return rows


def context_text(value: Any, where: str) -> str:
    """Supporting context as text: a string; a list of strings; HotpotQA's ``[[title, [sentences]], ...]``
    or its ``{"title": [...], "sentences": [[...], ...]}`` form (one ``[title] sentences`` line per paragraph).

    Raises:
        ConfigError: any other shape (the message names ``where``).
    """
    def para(title: Any, sentences: Any) -> str:
        if (
            not isinstance(title, str)
            or not isinstance(sentences, list)
            or not all(isinstance(x, str) for x in sentences)
        ):
            raise ConfigError(f"{where}: a context paragraph must be [title, [sentence, ...]] of text")
        return f"[{title}] " + "".join(sentences).strip()

    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) >= {"title", "sentences"}:
        titles, sents = value["title"], value["sentences"]
        if not isinstance(titles, list) or not isinstance(sents, list) or len(titles) != len(sents):
            raise ConfigError(f"{where}: context title and sentences must be lists of the same length")
        return "\n".join(para(t, s) for t, s in zip(titles, sents, strict=True))
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        return "\n".join(value)
    if isinstance(value, list) and all(isinstance(x, list) and len(x) == 2 for x in value):
        return "\n".join(para(t, s) for t, s in value)
    raise ConfigError(f"{where}: the context must be text, a list of text, or HotpotQA's [[title, [sentences]], ...] "
                      f"or {{'title': [...], 'sentences': [...]}}, not {type(value).__name__}")


def _field(rec: dict[str, Any], name: str, path: Path, lineno: int) -> str:
    if name not in rec:
        raise ConfigError(f"{path}:{lineno}: no field {name!r} (fields: {sorted(rec)[:10]})")
    value = rec[name]
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigError(f"{path}:{lineno}: field {name!r} must be text or a number, not {type(value).__name__}")
    return str(value)


def gsm8k_dir(data_dir: str | None) -> Path:
    """The GSM8K folder (``train.jsonl``, ``test.jsonl``): ``data_dir`` > ``$REASEARCH_GSM8K_DATA`` >
    ``$REASEARCH_SHARED_DATA/gsm8k`` > ``../shared/data/gsm8k`` beside a source checkout."""
    candidates: list[Path] = []
    if data_dir:
        candidates.append(Path(data_dir))
    else:
        if os.environ.get(GSM8K_ENV):
            candidates.append(Path(os.environ[GSM8K_ENV]))
        if os.environ.get("REASEARCH_SHARED_DATA"):
            candidates.append(Path(os.environ["REASEARCH_SHARED_DATA"]) / "gsm8k")
        candidates.append(Path(__file__).resolve().parents[4] / "shared" / "data" / "gsm8k")
    for c in candidates:
        if (c / "train.jsonl").is_file() and (c / "test.jsonl").is_file():
            return c
    raise ConfigError(
        "GSM8K data not found: pass -p data_dir=DIR (a folder with train.jsonl and test.jsonl from "
        f"github.com/openai/grade-school-math) or set ${GSM8K_ENV}; looked in: " + ", ".join(map(str, candidates)))


def gsm8k_reference(answer: str) -> str:
    """The final number of a GSM8K worked answer (the text after ``####``, commas removed)."""
    if "####" not in answer:
        raise ConfigError(f"a GSM8K answer must end with '#### <number>': {answer[-80:]!r}")
    return answer.rsplit("####", 1)[1].strip().replace(",", "")


def make_splits(pool: list[tuple[str, str, str]], test: list[tuple[str, str, str]] | None, *, n_train: int,
                n_validation: int, n_test: int | None, seed: int) -> Splits:
    """Shuffles ``pool`` (input, answer, reference) with ``seed``; the first ``n_train`` are train, the next
    ``n_validation`` validation; test is ``test`` in file order, or (``test`` None) the rest of the
    shuffled pool; its first ``n_test`` when given."""
    if n_train < 1 or n_validation < 1:
        raise ConfigError(f"n_train and n_validation must be >= 1 (got {n_train}, {n_validation})")
    if n_train + n_validation > len(pool):
        raise ConfigError(f"n_train + n_validation = {n_train + n_validation} but the data holds {len(pool)} examples")
    order = list(range(len(pool)))
    random.Random(seed).shuffle(order)
    train = tuple(Example(f"train-{i}", *pool[j]) for i, j in enumerate(order[:n_train]))
    val = tuple(Example(f"val-{i}", *pool[j]) for i, j in enumerate(order[n_train:n_train + n_validation]))
    if n_test is not None and n_test < 1:
        raise ConfigError(f"n_test must be >= 1 or None (all), not {n_test}")
    if test is None:
        test = [pool[j] for j in order[n_train + n_validation:]]
        if not test:
            raise ConfigError(f"no examples are left for the test split after {n_train} train and {n_validation} "
                              "validation examples; lower them or give test_path")
    chosen = test if n_test is None else test[:n_test]
    return Splits(train, val, tuple(Example(f"test-{i}", *row) for i, row in enumerate(chosen)))
