"""Token counts an endpoint reports (a student's or the agent's model's ``usage``): hostile numbers made
finite and bounded before anything is debited or priced.

Trust boundary: a reported count is untrusted (a server can send ``1e400``, ``NaN``, ``-5``, ``10**12``, text
or nested objects). :func:`reported_tokens` never raises: absent (``None``) is 0, a number (or a short
numeric text) is clamped into ``[0, bound]``, anything else (NaN, lists, objects, booleans, other text)
counts as the bound. :func:`prompt_token_bound` is the most prompt tokens a request of a given size could
have used: at most one token per byte of what was sent, plus a chat template's overhead.

Imported by the model clients (``reasearch.models``) and the student clients (``reasearch.evaluators``):
it imports nothing of the package.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["PROMPT_OVERHEAD_TOKENS", "prompt_token_bound", "reported_tokens"]

PROMPT_OVERHEAD_TOKENS = 1024  # a chat template's tokens around the messages (role markers, BOS, a system preamble)
_MAX_TEXT = 40  # a numeric text longer than this is junk, not a count


def prompt_token_bound(sent_bytes: int) -> int:
    """The most prompt tokens a request of ``sent_bytes`` bytes (its text, or its JSON body) can have used."""
    return max(0, int(sent_bytes)) + PROMPT_OVERHEAD_TOKENS


def reported_tokens(raw: Any, bound: int) -> int:
    """A reported token count as an integer in ``[0, bound]`` (see the module docs); never raises."""
    bound = max(0, int(bound))
    if raw is None:
        return 0
    if isinstance(raw, str) and len(raw) <= _MAX_TEXT:
        try:
            raw = float(raw.strip())
        except ValueError:
            return bound
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return bound
    if isinstance(raw, float) and math.isnan(raw):
        return bound
    if raw <= 0:
        return 0
    return bound if raw >= bound else int(raw)
