"""``ScriptedModel``: replays scripted or recorded replies (for tests, benchmarks and trajectory replays)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from reasearch.errors import ConfigError, ModelError
from reasearch.models.base import Price
from reasearch.models.messages import ModelReply, ModelRequest, StopReason, Usage, estimate_tokens

__all__ = ["SCRIPT_SCHEMA", "ScriptItem", "ScriptedModel", "call", "say"]

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
        """Loads a script file: a JSON list of replies, or ``{"replies": [...]}`` (schema: :data:`SCRIPT_SCHEMA`).

        Raises:
            ConfigError: the file is missing, not JSON, or an entry breaks the schema (one line naming it).
        """
        try:
            data = json.loads(Path(path).read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read the script {path}: {exc.strerror}") from None
        except ValueError as exc:
            raise ConfigError(f"{path}: not JSON ({exc})") from None
        replies = data.get("replies") if isinstance(data, dict) and set(data) == {"replies"} else data
        if not isinstance(replies, list) or not replies:
            raise ConfigError(f"{path}: a script is a non-empty JSON list of replies (or {{\"replies\": [...]}}); "
                              f"{SCRIPT_SCHEMA}")
        for i, reply in enumerate(replies, 1):
            problem = _reply_problem(reply)
            if problem:
                raise ConfigError(f"{path}: reply {i} of {len(replies)}: {problem}; {SCRIPT_SCHEMA}")
        kwargs.setdefault("name", f"scripted:{Path(path).name}")
        return cls([ModelReply.from_dict(r) for r in replies], **kwargs)


SCRIPT_SCHEMA = ('a reply is {"content": [blocks], "stop_reason"?: "end_turn"|"tool_use"|"max_tokens"|..., "usage"?: '
                 '{"input_tokens": N, "output_tokens": N}, "cost_usd"?: X, "model"?: "NAME"}; a block is '
                 '{"type": "text", "text": "..."} or {"type": "tool_use", "id": "...", "name": "TOOL", "input": {...}} '
                 "(docs/demo-and-scripted-models.md)")
_REPLY_KEYS = {"content", "stop_reason", "usage", "cost_usd", "model"}
_USAGE_KEYS = {"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"}


def _reply_problem(reply: Any) -> str:
    """What is wrong with one scripted reply ('' when it is well formed)."""
    if not isinstance(reply, dict):
        return f"expected an object, got {type(reply).__name__}"
    unknown = sorted(set(reply) - _REPLY_KEYS)
    if unknown:
        return f"unknown key {unknown[0]!r}"
    content = reply.get("content")
    if not isinstance(content, list):  # an empty list is an empty reply (tests of the harness's retries use one)
        return "'content' must be a list of blocks"
    for j, b in enumerate(content, 1):
        where = f"block {j}"
        if not isinstance(b, dict) or b.get("type") not in ("text", "tool_use"):
            return f"{where}: a block is an object of type 'text' or 'tool_use'"
        if b["type"] == "text" and (not isinstance(b.get("text"), str) or set(b) - {"type", "text"}):
            return f"{where}: a text block is {{\"type\": \"text\", \"text\": \"...\"}}"
        if b["type"] == "tool_use":
            if set(b) - {"type", "id", "name", "input"} or not isinstance(b.get("name"), str) or not b.get("name"):
                return f"{where}: a tool_use block has id, name and input"
            if not isinstance(b.get("id"), str) or not isinstance(b.get("input", {}), dict):
                return f"{where}: a tool_use block's id is text and its input an object"
    stop = reply.get("stop_reason")
    if stop is not None and stop not in {r.value for r in StopReason}:
        return f"unknown stop_reason {stop!r} (one of {', '.join(r.value for r in StopReason)})"
    usage = reply.get("usage")
    if usage is not None and (not isinstance(usage, dict) or set(usage) - _USAGE_KEYS or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in usage.values())):
        return f"'usage' holds non-negative integers under {sorted(_USAGE_KEYS)}"
    cost = reply.get("cost_usd", 0.0)
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or cost < 0:
        return "'cost_usd' is a number >= 0"
    if not isinstance(reply.get("model", ""), str):
        return "'model' is text"
    return ""
