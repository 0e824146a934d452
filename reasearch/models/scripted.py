"""``ScriptedModel``: replays scripted or recorded replies (for tests, benchmarks and trajectory replays)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from reasearch.models.messages import ModelReply, ModelRequest, StopReason, Usage, estimate_tokens
from reasearch.models.base import Price
from reasearch.errors import ModelError

__all__ = ["ScriptItem", "ScriptedModel", "call", "say"]

ScriptItem = ModelReply | Mapping[str, Any] | Callable[[ModelRequest], ModelReply]
_ids = itertools.count(1)


def call(name: str, /, **arguments: Any) -> dict[str, Any]:
    """A ``tool_use`` block calling ``name`` with ``arguments`` (for :func:`say`)."""
    return {"type": "tool_use", "id": f"toolu_{next(_ids):06d}", "name": name, "input": arguments}


def say(text: str = "", *calls: Mapping[str, Any], stop: StopReason | str | None = None) -> ModelReply:
    """A scripted reply: optional text, then tool calls. ``stop`` defaults to tool_use/end_turn."""
    blocks: list[Mapping[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks.extend(calls)
    if stop is None:
        stop = StopReason.TOOL_USE if calls else StopReason.END_TURN
    return ModelReply(tuple(blocks), StopReason(stop))


class ScriptedModel:
    """Answers each request with the next scripted item.

    An item is a :class:`ModelReply`, its ``to_dict()`` form, or a callable ``request -> reply`` (for
    replies that depend on what the harness sent). Replies that report no usage get an estimate
    (4 characters a token) so the token ledger and compaction threshold behave as with a real model.

    Args:
        script: the replies, in order.
        name: the model name recorded in provenance.
        price: dollars per million tokens applied to the (estimated) usage; None = free.
        estimate_usage: fill in usage for replies that carry none.

    Attributes:
        requests: every request received, in order (for assertions).
    """

    def __init__(self, script: Iterable[ScriptItem], *, name: str = "scripted", price: Price | None = None,
                 estimate_usage: bool = True) -> None:
        self._script = list(script)
        self._pos = 0
        self._name = name
        self._price = price
        self._estimate = estimate_usage
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return self._name

    def advance(self, n: int) -> None:
        """Skips ``n`` replies (a resumed run already holds them in its journal)."""
        self._pos = min(self._pos + max(n, 0), len(self._script))

    @property
    def remaining(self) -> int:
        return len(self._script) - self._pos

    def complete(self, request: ModelRequest) -> ModelReply:
        """The next scripted reply."""
        self.requests.append(request)
        if self._pos >= len(self._script):
            raise ModelError(f"scripted model {self._name!r} has no reply left (script of {len(self._script)} used up)")
        item = self._script[self._pos]
        self._pos += 1
        if callable(item) and not isinstance(item, ModelReply):
            reply = item(request)
        elif isinstance(item, ModelReply):
            reply = item
        else:
            reply = ModelReply.from_dict(item)
        usage = reply.usage
        if self._estimate and usage.total == 0:
            usage = Usage(input_tokens=estimate_tokens(request.system) + estimate_tokens(list(request.messages))
                          + estimate_tokens([t.to_dict() for t in request.tools]),
                          output_tokens=max(1, estimate_tokens(list(reply.content))))
        cost = self._price.cost(usage) if self._price else reply.cost_usd
        return ModelReply(reply.content, reply.stop_reason, usage, cost, reply.model or self._name)

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> ScriptedModel:
        """Loads a JSON list of reply dicts (``ModelReply.to_dict()`` form), or ``{"replies": [...]}``."""
        data = json.loads(Path(path).read_text())
        replies = data["replies"] if isinstance(data, dict) else data
        if not isinstance(replies, list):
            raise ModelError(f"{path}: a script is a JSON list of replies (or {{'replies': [...]}})")
        kwargs.setdefault("name", f"scripted:{Path(path).name}")
        return cls([ModelReply.from_dict(r) for r in replies], **kwargs)
