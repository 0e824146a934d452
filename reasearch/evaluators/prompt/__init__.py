"""Prompt optimization tasks: a system prompt for a student model, scored by the student's accuracy.

``gsm8k/v1`` (GSM8K, the paper's protocol) and ``prompt/jsonl-v1`` (a user's JSONL file with input and
answer fields and a named metric). Train examples are visible to the optimizer, validation only in
aggregate, test is sealed (trusted side only). Student clients: :mod:`._students`; a local fake
student for tests: :mod:`.testing`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reasearch.evaluators.prompt._data import Example, Splits
    from reasearch.evaluators.prompt._students import (
        MAX_REPLY_CHARS,
        DirectCaller,
        StudentCaller,
        StudentClient,
        StudentReply,
        StudentRequest,
        StudentSpec,
        build_student,
        map_concurrently,
    )
    from reasearch.evaluators.prompt.metrics import METRICS
    from reasearch.evaluators.prompt.task import (
        FAILURE_KINDS,
        SPLITS,
        Gsm8kTask,
        JsonlPromptTask,
        Judgment,
        PromptTask,
    )

__all__ = [
    "Example",
    "Splits",
    "MAX_REPLY_CHARS",
    "DirectCaller",
    "StudentCaller",
    "StudentClient",
    "StudentReply",
    "StudentRequest",
    "StudentSpec",
    "build_student",
    "map_concurrently",
    "METRICS",
    "FAILURE_KINDS",
    "SPLITS",
    "Gsm8kTask",
    "JsonlPromptTask",
    "Judgment",
    "PromptTask",
    "register_all",
]


_NO_RECORD = {"direction": "maximize", "best_known": None, "best_known_source": "", "seed_score": None}


def register_all() -> None:
    from reasearch.evaluators.registry import register

    register("gsm8k/v1", "reasearch.evaluators.prompt.task:Gsm8kTask",
             summary="GSM8K: a system prompt for a student model (accuracy; 500 train / 500 validation / test sealed)",
             listing=_NO_RECORD)
    register("prompt/jsonl-v1", "reasearch.evaluators.prompt.task:JsonlPromptTask",
             summary="a system prompt for a student on your JSONL data (-p path=... input_field answer_field metric)",
             listing=_NO_RECORD)


# Lazy (PEP 562): registering the ids (every `reasearch` command that lists or makes a task) must not
# import the student clients (http.client, ssl) or the task module.
_LAZY = {
    **dict.fromkeys(("Example", "Splits"), "reasearch.evaluators.prompt._data"),
    **dict.fromkeys(("MAX_REPLY_CHARS", "DirectCaller", "StudentCaller", "StudentClient", "StudentReply",
                     "StudentRequest", "StudentSpec", "build_student", "map_concurrently"),
                    "reasearch.evaluators.prompt._students"),
    "METRICS": "reasearch.evaluators.prompt.metrics",
    **dict.fromkeys(("FAILURE_KINDS", "SPLITS", "Gsm8kTask", "JsonlPromptTask", "Judgment", "PromptTask"),
                    "reasearch.evaluators.prompt.task"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
