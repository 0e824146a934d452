"""Conversation records shared by every model client: requests, replies, usage, tool calls.

Messages use the Anthropic Messages shape (``{"role": ..., "content": [blocks]}`` with ``text``,
``tool_use`` and ``tool_result`` blocks) as the one internal format; the OpenAI-compatible client
translates at its edge. Everything here is plain JSON so it can go into the run's event log as is.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ModelReply",
    "ModelRequest",
    "StopReason",
    "ToolCall",
    "ToolSchema",
    "Usage",
    "estimate_tokens",
    "text_block",
    "tool_result_block",
]


class StopReason(str, enum.Enum):
    """Why a model stopped writing."""

    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_TOKENS = "max_tokens"  # cut off at the token limit: the harness recovers
    STOP_SEQUENCE = "stop_sequence"
    REFUSAL = "refusal"
    OTHER = "other"

    @classmethod
    def parse(cls, value: str | None) -> StopReason:
        try:
            return cls(value or "other")
        except ValueError:
            return cls.OTHER


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens of one model call (cache reads and writes are part of the input, counted apart)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def context_tokens(self) -> int:
        """Size of the prompt the model saw plus what it wrote (what the next call starts from)."""
        return self.total

    def to_dict(self) -> dict[str, int]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cache_read_tokens": self.cache_read_tokens, "cache_write_tokens": self.cache_write_tokens}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Usage:
        d = d or {}
        return cls(int(d.get("input_tokens", 0)), int(d.get("output_tokens", 0)),
                   int(d.get("cache_read_tokens", 0)), int(d.get("cache_write_tokens", 0)))


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the model asked for."""

    id: str
    name: str
    input: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolSchema:
    """What a model is told about a tool: name, description and JSON schema of the arguments."""

    name: str
    description: str
    input_schema: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": dict(self.input_schema)}


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One call to a model: system prompt, conversation, the tools on offer."""

    system: str
    messages: Sequence[Mapping[str, Any]]
    tools: Sequence[ToolSchema] = ()
    max_tokens: int | None = None  # None: the model's configured default
    temperature: float | None = None


@dataclass(frozen=True, slots=True)
class ModelReply:
    """A model's answer, as plain content blocks, with its cost.

    Attributes:
        content: ``text`` and ``tool_use`` blocks, in order.
        stop_reason: why the model stopped.
        usage: tokens of this call.
        cost_usd: dollars of this call (0.0 where the model has no price, e.g. a local endpoint).
        model: the model that answered.
    """

    content: tuple[Mapping[str, Any], ...]
    stop_reason: StopReason = StopReason.END_TURN
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    model: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", tuple(dict(b) for b in self.content))

    @property
    def text(self) -> str:
        return "".join(b.get("text", "") for b in self.content if b.get("type") == "text")

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [ToolCall(str(b["id"]), str(b["name"]), dict(b.get("input") or {}))
                for b in self.content if b.get("type") == "tool_use"]

    @property
    def is_empty(self) -> bool:
        """No tool call and no visible text."""
        return not self.tool_calls and not self.text.strip()

    @property
    def truncated(self) -> bool:
        return self.stop_reason is StopReason.MAX_TOKENS

    def as_message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation."""
        # The Messages API rejects empty and whitespace-only text blocks.
        blocks = [dict(b) for b in self.content if b.get("type") != "text" or str(b.get("text", "")).strip()]
        return {"role": "assistant", "content": blocks or [text_block("(no reply)")]}

    def to_dict(self) -> dict[str, Any]:
        return {"content": [dict(b) for b in self.content], "stop_reason": self.stop_reason.value,
                "usage": self.usage.to_dict(), "cost_usd": self.cost_usd, "model": self.model}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ModelReply:
        return cls(tuple(d.get("content") or ()), StopReason.parse(d.get("stop_reason")),
                   Usage.from_dict(d.get("usage")), float(d.get("cost_usd", 0.0)), str(d.get("model", "")))


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def tool_result_block(tool_use_id: str, content: str, *, is_error: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}
    if is_error:
        block["is_error"] = True
    return block


def estimate_tokens(obj: Any) -> int:
    """Rough token count (4 characters a token) for models that report none, and for thresholds."""
    text = obj if isinstance(obj, str) else json.dumps(obj, default=str, separators=(",", ":"))
    return (len(text) + 3) // 4
