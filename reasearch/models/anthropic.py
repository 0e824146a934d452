"""``AnthropicModel``: the Messages API through the official SDK (imported lazily: it costs ~1.5 s)."""

from __future__ import annotations

import json
import os
from typing import Any

from reasearch.errors import ModelError
from reasearch.models.base import (
    ANTHROPIC_DEFAULT_URL,
    MAX_REPLY_BYTES,
    RETRY_STATUS,
    MalformedReply,
    ModelSpec,
    Price,
    RetryPolicy,
    snippet,
    why_failed,
)
from reasearch.models.messages import ModelReply, ModelRequest, StopReason, Usage
from reasearch.usage import prompt_token_bound, reported_tokens

__all__ = ["NO_KEY_MESSAGE", "AnthropicModel"]

NO_KEY_MESSAGE = (
    "no Anthropic API key: run `export ANTHROPIC_API_KEY=sk-ant-...`, or use a local OpenAI-compatible "
    "endpoint with `--model openai/MODEL --base-url http://127.0.0.1:11434/v1`"
)
_CACHE = {"type": "ephemeral"}


class AnthropicModel:
    """A Claude model behind the Messages API.

    Prompt caching: the tool list and the system prompt (the stable prefix) carry a cache breakpoint,
    and so does the newest message, so each turn reads the previous turn's prefix from the cache.
    Overload (529), rate limits (429) and transient server errors are retried with backoff
    (``retry-after`` honoured); other API errors raise :class:`ModelError` at once.

    Args:
        spec: model name, token limit, temperature, optional base URL and prices.
        api_key: the key; default: ``$ANTHROPIC_API_KEY`` (or ``spec.api_key_env``).
        retry: backoff policy.
        timeout_s: HTTP timeout of one call.

    Raises:
        ModelError: no API key and no base URL (the message says how to set one).
    """

    def __init__(self, spec: ModelSpec, *, api_key: str | None = None, retry: RetryPolicy | None = None,
                 timeout_s: float = 600.0) -> None:
        self.spec = spec
        env = spec.api_key_env or "ANTHROPIC_API_KEY"
        key = api_key or os.environ.get(env)
        base_url = spec.base_url or os.environ.get("ANTHROPIC_BASE_URL")
        if not key:
            if not base_url:
                raise ModelError(NO_KEY_MESSAGE)
            key = "local"  # a local endpoint needs no real key, but the SDK wants one
        self._key, self._base_url, self._timeout = key, base_url, timeout_s
        self.retry = retry or RetryPolicy(max_attempts=spec.attempts)
        self._price: Price | None = spec.price
        self._client: Any = None

    @property
    def name(self) -> str:
        return self.spec.name

    def _sdk(self) -> Any:
        if self._client is None:
            import anthropic  # lazy: importing the SDK costs over a second

            self._client = anthropic.Anthropic(api_key=self._key, base_url=self._base_url,
                                               max_retries=0, timeout=self._timeout)
        return self._client

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        tools = [t.to_dict() for t in request.tools]
        if tools:
            tools[-1]["cache_control"] = _CACHE
        messages = [dict(m) for m in request.messages]
        if messages:  # breakpoint on the newest block: the next turn reads all of this from the cache
            last = dict(messages[-1])
            content = last["content"]
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            content = [dict(b) for b in content]
            content[-1]["cache_control"] = _CACHE
            last["content"] = content
            messages[-1] = last
        params: dict[str, Any] = {
            "model": self.spec.name,
            "max_tokens": request.max_tokens or self.spec.max_tokens,
            "messages": messages,
            "system": [{"type": "text", "text": request.system, "cache_control": _CACHE}],
        }
        if tools:
            params["tools"] = tools
        temperature = request.temperature if request.temperature is not None else self.spec.temperature
        if temperature is not None:  # SDK 2.x has no keyword for it; the API still reads it on older models
            params["extra_body"] = {"temperature": temperature}
        return params

    @property
    def endpoint(self) -> str:
        """Where the calls go (recorded in the run; a resume refuses to switch silently)."""
        return (self._base_url or ANTHROPIC_DEFAULT_URL).rstrip("/")

    def complete(self, request: ModelRequest) -> ModelReply:
        """One reply; retries overload, rate limits and malformed answers; raises ModelError on anything else."""
        import anthropic

        client, params = self._sdk(), self._params(request)
        sent = len(json.dumps({k: v for k, v in params.items() if k != "extra_body"}, default=str).encode())
        bounds = (prompt_token_bound(sent), int(params["max_tokens"]))  # reported usage is clamped to these
        for attempt in range(self.retry.max_attempts):
            last = attempt + 1 == self.retry.max_attempts
            try:
                with client.messages.with_streaming_response.create(**params) as raw:
                    try:
                        body = _read_capped(raw.iter_bytes())
                    except MalformedReply:
                        raise
                    except Exception as exc:  # the SDK does not wrap transport errors met while reading
                        raise _BrokenBody(f"{type(exc).__name__}: {exc}") from exc
                return self._reply(body, bounds=bounds)
            except anthropic.APIStatusError as exc:
                status = getattr(exc, "status_code", None)
                if status not in RETRY_STATUS or last:
                    raise ModelError(f"Anthropic API error {status}: {snippet(str(exc.message), 300)}") from exc
                self.retry.pause(attempt, f"HTTP {status}", _retry_after(exc))
            except (anthropic.APIConnectionError, anthropic.APITimeoutError, _BrokenBody) as exc:
                if last:
                    raise ModelError(
                        f"cannot reach the Anthropic API at {self.endpoint}: {snippet(str(exc), 300)}"
                    ) from exc
                self.retry.pause(attempt, why_failed(exc.__cause__ or exc))
            except MalformedReply as exc:
                if last:
                    raise ModelError(f"{self.endpoint} answered {self.retry.max_attempts} times with something that is "
                                     f"not a Messages API reply: {exc}") from None
                self.retry.pause(attempt, "an answer that is not a Messages API reply")
            except anthropic.AnthropicError as exc:  # anything else the SDK raises: no traceback, no retry
                raise ModelError(f"Anthropic SDK error from {self.endpoint}: {type(exc).__name__}: "
                                 f"{snippet(str(exc), 300)}") from exc
        raise ModelError("unreachable")  # the loop always returns or raises

    def _reply(self, body: bytes, *, bounds: tuple[int, int] | None = None) -> ModelReply:
        """Validates a raw Messages API body; anything else raises :class:`MalformedReply`. The usage it reports is
        clamped to ``bounds`` (the most input and output tokens the request could use; None: the body's size)."""
        if bounds is None:
            bounds = (prompt_token_bound(len(body)), self.spec.max_tokens)
        try:
            message = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise MalformedReply(f"not JSON ({exc}); it began: {snippet(body)!r}") from None
        if not isinstance(message, dict) or not isinstance(message.get("content"), list):
            raise MalformedReply(f"JSON without a content list; it began: {snippet(body)!r}")
        blocks: list[dict[str, Any]] = []
        for block in message["content"]:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and isinstance(block.get("text"), str):
                blocks.append({"type": "text", "text": block["text"]})
            elif kind == "tool_use" and isinstance(block.get("id"), str) and isinstance(block.get("name"), str) \
                    and isinstance(block.get("input", {}), dict):
                blocks.append({"type": "tool_use", "id": block["id"], "name": block["name"],
                               "input": dict(block.get("input") or {})})
            elif not isinstance(kind, str) or kind in ("text", "tool_use"):
                raise MalformedReply(f"a content block of the wrong shape: {snippet(json.dumps(block))!r}")
            # other block kinds (thinking, server tools) carry nothing the harness uses
        raw_usage = message.get("usage")
        u = raw_usage if isinstance(raw_usage, dict) else {} if raw_usage is None else {
            k: "unreadable" for k in ("input_tokens", "output_tokens")}  # a usage of the wrong shape: the bounds
        # untrusted counts (1e400, NaN, 10**12, text): clamped to what the request could use, never an exception;
        # cache reads and writes are part of the prompt, so the three input counts share its bound
        fresh = reported_tokens(u.get("input_tokens"), bounds[0])
        cache_read = reported_tokens(u.get("cache_read_input_tokens"), bounds[0] - fresh)
        cache_write = reported_tokens(u.get("cache_creation_input_tokens"), bounds[0] - fresh - cache_read)
        usage = Usage(input_tokens=fresh, output_tokens=reported_tokens(u.get("output_tokens"), bounds[1]),
                      cache_read_tokens=cache_read, cache_write_tokens=cache_write)
        stop = message.get("stop_reason")
        cost = self._price.cost(usage) if self._price else 0.0
        return ModelReply(tuple(blocks), StopReason.parse(stop if isinstance(stop, str) else None), usage, cost,
                          str(message.get("model") or self.spec.name))


class _BrokenBody(Exception):
    """The connection broke while the body was read (retried like a refused connection)."""


def _read_capped(chunks: Any) -> bytes:
    """The body, refused past ``MAX_REPLY_BYTES`` (an endpoint streaming without end is malformed)."""
    buf = bytearray()
    for chunk in chunks:
        buf += chunk
        if len(buf) > MAX_REPLY_BYTES:
            raise MalformedReply(f"a body over {MAX_REPLY_BYTES:,} bytes")
    return bytes(buf)


def _retry_after(exc: Any) -> float | None:
    try:
        value = exc.response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None
