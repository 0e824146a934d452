"""``AnthropicModel``: the Messages API through the official SDK (imported lazily: it costs ~1.5 s)."""

from __future__ import annotations

import os
from typing import Any

from reasearch.agent.messages import ModelReply, ModelRequest, StopReason, Usage
from reasearch.agent.models.base import RETRY_STATUS, ModelSpec, Price, RetryPolicy
from reasearch.errors import ModelError

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
        self.retry = retry or RetryPolicy()
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

    def complete(self, request: ModelRequest) -> ModelReply:
        """One reply; retries overload and rate limits; raises ModelError on anything else."""
        import anthropic

        client, params = self._sdk(), self._params(request)
        for attempt in range(self.retry.max_attempts):
            try:
                message = client.messages.create(**params)
                return self._reply(message)
            except anthropic.APIStatusError as exc:
                status = getattr(exc, "status_code", None)
                if status not in RETRY_STATUS or attempt + 1 == self.retry.max_attempts:
                    raise ModelError(f"Anthropic API error {status}: {exc.message}") from exc
                self.retry.sleep(self.retry.delay(attempt, _retry_after(exc)))
            except (anthropic.APIConnectionError, anthropic.APITimeoutError) as exc:
                if attempt + 1 == self.retry.max_attempts:
                    raise ModelError(f"cannot reach the Anthropic API at {self._base_url or 'the default URL'}: {exc}") from exc
                self.retry.sleep(self.retry.delay(attempt))
        raise ModelError("unreachable")  # the loop always returns or raises

    def _reply(self, message: Any) -> ModelReply:
        blocks: list[dict[str, Any]] = []
        for block in message.content:
            if block.type == "text":
                blocks.append({"type": "text", "text": block.text})
            elif block.type == "tool_use":
                blocks.append({"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input or {})})
        u = message.usage
        usage = Usage(
            input_tokens=int(getattr(u, "input_tokens", 0) or 0),
            output_tokens=int(getattr(u, "output_tokens", 0) or 0),
            cache_read_tokens=int(getattr(u, "cache_read_input_tokens", 0) or 0),
            cache_write_tokens=int(getattr(u, "cache_creation_input_tokens", 0) or 0),
        )
        cost = self._price.cost(usage) if self._price else 0.0
        return ModelReply(tuple(blocks), StopReason.parse(message.stop_reason), usage, cost, str(message.model))


def _retry_after(exc: Any) -> float | None:
    try:
        value = exc.response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None
