"""``OpenAICompatibleModel``: any ``/v1/chat/completions`` endpoint (vLLM, Ollama, llama.cpp, ...).

Plain ``urllib`` (no extra dependency). Messages are translated from the internal Anthropic shape:
``tool_use`` blocks become ``tool_calls`` and ``tool_result`` blocks become ``role: tool`` messages.
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from reasearch.errors import ModelError
from reasearch.models.base import (
    MAX_REPLY_BYTES,
    RETRY_STATUS,
    MalformedReply,
    ModelSpec,
    RetryPolicy,
    snippet,
    why_failed,
)
from reasearch.models.messages import ModelReply, ModelRequest, StopReason, Usage
from reasearch.usage import prompt_token_bound, reported_tokens

__all__ = ["OpenAICompatibleModel", "to_openai_messages"]

_FINISH = {"stop": StopReason.END_TURN, "tool_calls": StopReason.TOOL_USE, "function_call": StopReason.TOOL_USE,
           "length": StopReason.MAX_TOKENS, "content_filter": StopReason.REFUSAL}


def to_openai_messages(system: str, messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Internal (Anthropic-shaped) conversation -> OpenAI chat messages."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for m in messages:
        content = m["content"]
        if isinstance(content, str):
            out.append({"role": m["role"], "content": content})
            continue
        texts = [b["text"] for b in content if b.get("type") == "text"]
        if m["role"] == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
            calls = [{"id": b["id"], "type": "function",
                      "function": {"name": b["name"], "arguments": json.dumps(b.get("input") or {})}}
                     for b in content if b.get("type") == "tool_use"]
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
            continue
        for b in content:  # tool results first (they answer the previous assistant message)
            if b.get("type") == "tool_result":
                text = b["content"] if isinstance(b["content"], str) else json.dumps(b["content"])
                out.append({"role": "tool", "tool_call_id": b["tool_use_id"],
                            "content": ("ERROR: " + text) if b.get("is_error") else text})
        if texts:
            out.append({"role": "user", "content": "\n".join(texts)})
    return out


def _seconds(value: str | None) -> float | None:
    """A ``retry-after`` header in seconds (None when absent or an HTTP date)."""
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class OpenAICompatibleModel:
    """A model served behind an OpenAI-compatible chat completions endpoint.

    Args:
        spec: ``base_url`` (e.g. ``http://127.0.0.1:8000/v1``), model name, token limit, optional prices.
        api_key: bearer token; default ``$OPENAI_API_KEY`` (or ``spec.api_key_env``); local servers need none.
        retry: backoff for 429/5xx answers and refused connections.
        timeout_s: HTTP timeout of one call.
    """

    def __init__(self, spec: ModelSpec, *, api_key: str | None = None, retry: RetryPolicy | None = None,
                 timeout_s: float = 600.0) -> None:
        if not spec.base_url:
            raise ModelError("an OpenAI-compatible model needs --base-url, e.g. http://127.0.0.1:11434/v1")
        self.spec = spec
        self._url = spec.base_url.rstrip("/") + "/chat/completions"
        self._key = api_key or os.environ.get(spec.api_key_env or "OPENAI_API_KEY", "")
        self.retry = retry or RetryPolicy(max_attempts=spec.attempts)
        self._timeout = timeout_s

    @property
    def name(self) -> str:
        return self.spec.name

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.spec.name,
            "messages": to_openai_messages(request.system, request.messages),
            "max_tokens": request.max_tokens or self.spec.max_tokens,
        }
        if request.tools:
            body["tools"] = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                               "parameters": dict(t.input_schema)}}
                             for t in request.tools]
        temperature = request.temperature if request.temperature is not None else self.spec.temperature
        if temperature is not None:
            body["temperature"] = temperature
        return body

    @property
    def endpoint(self) -> str:
        """Where the calls go (recorded in the run; a resume refuses to switch silently)."""
        return (self.spec.base_url or "").rstrip("/")

    def complete(self, request: ModelRequest) -> ModelReply:
        """One reply; retries overload, rate limits and malformed answers; raises ModelError on anything else."""
        body_doc = self._body(request)
        data = json.dumps(body_doc).encode()
        bounds = (prompt_token_bound(len(data)), int(body_doc["max_tokens"]))  # reported usage is clamped to these
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        for attempt in range(self.retry.max_attempts):
            last = attempt + 1 == self.retry.max_attempts
            req = urllib.request.Request(self._url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self._timeout) as resp:
                    body = resp.read(MAX_REPLY_BYTES + 1)
                if len(body) > MAX_REPLY_BYTES:
                    raise MalformedReply(f"a body over {MAX_REPLY_BYTES:,} bytes")
                return self._reply(body, bounds=bounds)
            except urllib.error.HTTPError as exc:
                try:
                    detail = snippet(exc.read()[:500], 300)
                except (OSError, http.client.HTTPException):
                    detail = ""
                if exc.code not in RETRY_STATUS or last:
                    raise ModelError(f"{self._url} answered HTTP {exc.code}: {detail}") from exc
                self.retry.pause(
                    attempt, f"HTTP {exc.code}", _seconds(exc.headers.get("retry-after") if exc.headers else None)
                )
            except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException, OSError) as exc:
                if last:
                    raise ModelError(f"cannot reach {self._url}: {snippet(str(exc), 300)}") from exc
                self.retry.pause(attempt, why_failed(exc))
            except MalformedReply as exc:
                if last:
                    raise ModelError(
                        f"{self._url} answered {self.retry.max_attempts} times with something that is not "
                        f"a chat completion: {exc}"
                    ) from None
                self.retry.pause(attempt, "an answer that is not a chat completion")
        raise ModelError("unreachable")

    def _reply(self, body: bytes | Mapping[str, Any], *, bounds: tuple[int, int] | None = None) -> ModelReply:
        """Validates a chat completion body; anything else raises :class:`MalformedReply`. The usage it reports is
        clamped to ``bounds`` (the most input and output tokens the request could use; None: its body's size)."""
        if isinstance(body, Mapping):
            payload: Any = body
        else:
            try:
                payload = json.loads(body)
            except (ValueError, UnicodeDecodeError, RecursionError) as exc:
                raise MalformedReply(f"not JSON ({type(exc).__name__}); it began: {snippet(body)!r}") from None
        if bounds is None:
            bounds = (prompt_token_bound(len(body) if isinstance(body, bytes) else 0), self.spec.max_tokens)
        try:
            return self._parse(payload, bounds)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise MalformedReply(f"JSON of the wrong shape ({type(exc).__name__}: {exc}); it began: "
                                 f"{snippet(json.dumps(payload, default=str))!r}") from None

    def _parse(self, payload: Mapping[str, Any], bounds: tuple[int, int]) -> ModelReply:
        choice = payload["choices"][0]
        msg = choice["message"]
        if not isinstance(msg, Mapping):
            raise TypeError("message is not an object")
        blocks: list[dict[str, Any]] = []
        content = msg.get("content")
        if content is not None and not isinstance(content, str):
            raise TypeError("message content is not a string")
        if content:
            blocks.append({"type": "text", "text": content})
        calls = msg.get("tool_calls") or []
        if not isinstance(calls, list):
            raise TypeError("tool_calls is not a list")
        for call in calls:
            fn = call.get("function") or {}
            raw = fn.get("arguments") or "{}"
            try:
                args = json.loads(raw) if isinstance(raw, str) else raw
            except json.JSONDecodeError:
                # Arguments cut off or malformed: kept as one string so validation reports it to the model.
                args = {"__unparsed_arguments__": raw}
            name = fn.get("name", "")
            if not isinstance(name, str):
                raise TypeError("a tool call name is not a string")
            blocks.append({"type": "tool_use", "id": str(call.get("id") or f"call_{len(blocks)}"),
                           "name": name, "input": args if isinstance(args, dict) else {"value": args}})
        u = payload.get("usage")
        raw_in, raw_out = (u.get("prompt_tokens"), u.get("completion_tokens")) if isinstance(u, Mapping) else (
            (None, None) if u is None else ("unreadable", "unreadable"))  # a usage of the wrong shape: the bounds
        # untrusted counts (1e400, NaN, 10**12, text): clamped to what the request could use, never an exception
        usage = Usage(input_tokens=reported_tokens(raw_in, bounds[0]),
                      output_tokens=reported_tokens(raw_out, bounds[1]))
        price = self.spec.price
        stop = _FINISH.get(choice.get("finish_reason") or "", StopReason.OTHER)
        if stop is StopReason.END_TURN and any(b["type"] == "tool_use" for b in blocks):
            stop = StopReason.TOOL_USE
        return ModelReply(tuple(blocks), stop, usage, price.cost(usage) if price else 0.0,
                          str(payload.get("model") or self.spec.name))
