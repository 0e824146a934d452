"""A test double of the proposal model: the demo model's contract, for tests and benchmarks.

:class:`MutatingModel` answers a request without tools with the last fenced block of the latest user
message, mutated: in a ``python`` block one numeric literal is scaled by a factor drawn from a seeded
generator; in a ``text`` block an instruction is appended. It calls nothing and costs nothing, so a
method's behaviour under it is a pure function of the seed.
"""

from __future__ import annotations

import random
import re

from reasearch.models.messages import ModelReply, ModelRequest, StopReason, Usage, estimate_tokens, text_block
from reasearch.models.reply_text import fenced_blocks

__all__ = ["MutatingModel"]

_NUMBER = re.compile(r"(?<![\w.])(\d+\.\d*|\d*\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w.])")
_HINTS = ("Think step by step.", "End your reply with a line '#### <answer>'.", "Double-check the arithmetic.",
          "Be concise.")


class MutatingModel:
    """Mutates the last fenced block it is shown (see the module docstring).

    Args:
        seed: seeds the mutations.
        name: the name recorded in provenance.
    """

    def __init__(self, seed: int = 0, *, name: str = "mutating") -> None:
        self._rng = random.Random(seed)
        self._name = name
        self.calls = 0

    @property
    def name(self) -> str:
        return self._name

    def complete(self, request: ModelRequest) -> ModelReply:
        self.calls += 1
        user = next((m for m in reversed(list(request.messages)) if m.get("role") == "user"), None)
        content = user["content"] if user else ""
        text = content if isinstance(content, str) else "".join(b.get("text", "") for b in content
                                                                if isinstance(b, dict))
        blocks = fenced_blocks(text, closed=True)  # linear, size-capped
        if not blocks:
            return ModelReply((text_block("(nothing to mutate)"),), StopReason.END_TURN)
        tag, body = blocks[-1]
        new = self._mutate_text(body) if tag == "text" else self._mutate_code(body)
        reply = f"```{tag}\n{new}\n```"
        usage = Usage(estimate_tokens(text), estimate_tokens(reply))
        return ModelReply((text_block(reply),), StopReason.END_TURN, usage, 0.0, self._name)

    def _mutate_code(self, body: str) -> str:
        found = list(_NUMBER.finditer(body))
        if not found:
            return body
        m = self._rng.choice(found)
        literal = m.group(0)
        value = float(literal)
        factor = self._rng.choice((0.5, 0.8, 0.9, 1.1, 1.25, 2.0))
        new = value * factor if value else factor - 0.45  # a zero moves too (to 0.05 .. 1.55)
        out = str(max(1, round(new))) if re.fullmatch(r"\d+", literal) else repr(new)
        return body[:m.start()] + out + body[m.end():]

    def _mutate_text(self, body: str) -> str:
        return f"{body.rstrip()}\n{self._rng.choice(_HINTS)}"
