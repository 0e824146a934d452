"""The ``Model`` protocol, model specs, prices and the retry policy every client shares."""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from reasearch.errors import ConfigError
from reasearch.models.messages import ModelReply, ModelRequest, Usage, estimate_tokens

__all__ = ["PRICES", "PROVIDERS", "MalformedReply", "Model", "ModelSpec", "Price", "RetryPolicy", "call_ceiling",
           "endpoint_of", "fit_call", "price_for", "snippet", "why_failed"]


PROVIDERS = ("anthropic", "openai", "scripted", "demo")


@runtime_checkable
class Model(Protocol):
    """Anything that answers a :class:`ModelRequest` with a :class:`ModelReply`."""

    @property
    def name(self) -> str: ...

    def complete(self, request: ModelRequest) -> ModelReply: ...


@dataclass(frozen=True, slots=True)
class Price:
    """Dollars per million tokens."""

    input: float
    output: float
    cache_write: float | None = None  # default 1.25 x input (Anthropic's 5-minute cache)
    cache_read: float | None = None  # default 0.1 x input

    def cost(self, usage: Usage) -> float:
        cw = self.cache_write if self.cache_write is not None else 1.25 * self.input
        cr = self.cache_read if self.cache_read is not None else 0.1 * self.input
        return (usage.input_tokens * self.input + usage.output_tokens * self.output
                + usage.cache_write_tokens * cw + usage.cache_read_tokens * cr) / 1e6


# Public list prices (USD per million tokens), matched by the longest prefix of the model name.
PRICES: dict[str, Price] = {
    "claude-opus-4-5": Price(5.0, 25.0),
    "claude-opus-4-1": Price(15.0, 75.0),
    "claude-opus-4": Price(15.0, 75.0),
    "claude-sonnet-4": Price(3.0, 15.0),
    "claude-3-7-sonnet": Price(3.0, 15.0),
    "claude-3-5-sonnet": Price(3.0, 15.0),
    "claude-haiku-4-5": Price(1.0, 5.0),
    "claude-3-5-haiku": Price(0.8, 4.0),
    "claude-3-haiku": Price(0.25, 1.25),
}


def price_for(model: str) -> Price | None:
    """The list price of ``model`` (longest matching prefix), or None when unknown."""
    best = max((p for p in PRICES if model.startswith(p)), key=len, default=None)
    return PRICES[best] if best else None


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """How to build one model client; stored in the run's config (provenance) and used on resume.

    Attributes:
        provider: ``anthropic``, ``openai`` (any OpenAI-compatible endpoint), ``scripted`` or ``demo``
            (the offline demo model, :mod:`reasearch.models.demo`).
        name: the model name sent to the provider (for ``scripted``: the script file, or empty).
        base_url: endpoint override (required for ``openai``; optional for ``anthropic``).
        max_tokens: output token limit of one reply.
        temperature: sampling temperature (None: the provider's default).
        price_in: dollars per million input tokens (overrides the built-in table).
        price_out: dollars per million output tokens.
        api_key_env: environment variable holding the key.
        attempts: HTTP attempts per call: overload, rate limits, refused connections and malformed
            answers are retried with backoff up to this many times.
    """

    provider: str = "anthropic"
    name: str = "claude-sonnet-4-6"
    base_url: str | None = None
    max_tokens: int = 8192
    temperature: float | None = None
    price_in: float | None = None
    price_out: float | None = None
    api_key_env: str = ""
    attempts: int = 6

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise ConfigError(f"model provider must be anthropic, openai, scripted or demo, not {self.provider!r}")
        if self.provider == "openai" and not self.base_url:
            raise ConfigError("an openai-compatible model needs a base URL, e.g. --base-url http://127.0.0.1:11434/v1")
        if self.attempts < 1:
            raise ConfigError(f"attempts must be >= 1, not {self.attempts}")
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, not {self.max_tokens}")
        if (self.price_in is None) != (self.price_out is None):
            raise ConfigError("give both price_in and price_out, or neither")

    @property
    def price(self) -> Price | None:
        if self.price_in is not None and self.price_out is not None:
            return Price(self.price_in, self.price_out)
        if self.provider == "demo":
            return Price(0.0, 0.0)  # runs on this machine: free, and a dollar cap still binds
        return price_for(self.name) if self.provider == "anthropic" else None

    @classmethod
    def parse(cls, text: str, **overrides: Any) -> ModelSpec:
        """``"claude-sonnet-4-6"``, ``"anthropic/NAME"``, ``"openai/NAME"``, ``"scripted/FILE"`` or ``"demo"``."""
        if text == "demo":
            return cls(provider="demo", name="demo", **overrides)
        provider, sep, name = text.partition("/")
        if not sep or provider not in PROVIDERS:
            if not text.startswith("claude-"):  # `demoo`, `gpt5`: never sent to Anthropic as a model name
                raise ConfigError(unknown_model_message(text))
            provider, name = "anthropic", text
        return cls(provider=provider, name=name, **overrides)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ModelSpec:
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ConfigError(f"unknown model spec keys {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}")
        return cls(**d)


def unknown_model_message(text: str) -> str:
    """One line for a model name that names no provider and no Claude model: the choices, and the closest."""
    import difflib

    close = difflib.get_close_matches(text, ["demo", *PRICES, "claude-sonnet-4-6"], n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return (f"unknown model {text!r}: give demo (offline), a Claude model (claude-sonnet-4-6, claude-opus-4-5, "
            f"claude-haiku-4-5, ...), anthropic/NAME, openai/NAME with --base-url URL (any OpenAI-compatible endpoint) "
            f"or scripted/FILE.{hint}")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with jitter for overload and rate-limit answers (never for bad requests)."""

    max_attempts: int = 6
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)
    notify: Callable[[str], None] | None = field(default=None, compare=False, repr=False)  # None: a line on stderr

    def pause(self, attempt: int, why: str, retry_after: float | None = None) -> None:
        """Says why and when the next attempt comes ("model endpoint: connection refused, retry 2/6 in 4 s"),
        then waits: a retrying run is never silent."""
        delay = self.delay(attempt, retry_after)
        line = f"model endpoint: {why}, retry {attempt + 2}/{self.max_attempts} in {delay:.2g} s"
        if self.notify is not None:
            self.notify(line)
        else:
            print(f"reasearch: {line}", file=sys.stderr, flush=True)
        self.sleep(delay)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (``retry-after`` wins when the server gives one)."""
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.max_delay_s)
        base = min(self.base_delay_s * 2 ** attempt, self.max_delay_s)
        return base * (0.5 + random.random() / 2)


RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


ANTHROPIC_DEFAULT_URL = "https://api.anthropic.com"
MAX_REPLY_BYTES = 32 << 20  # a larger answer is malformed (a reply of max_tokens is far smaller)


def call_ceiling(request: ModelRequest, spec: ModelSpec | None) -> tuple[int, float]:
    """``(tokens, dollars)`` one call of ``request`` can cost at most: the prompt's estimate (system,
    messages, tools) plus the reply's max tokens (the request's, else the spec's, else the default), at
    the spec's price (no price: 0 dollars). What a caller reserves against its caps before the call."""
    tokens_in = (estimate_tokens(request.system) + estimate_tokens(list(request.messages))
                 + estimate_tokens([t.to_dict() for t in request.tools]))
    tokens_out = int(request.max_tokens or (spec.max_tokens if spec is not None else ModelSpec().max_tokens))
    price = spec.price if spec is not None else None
    dollars = price.cost(Usage(input_tokens=tokens_in, output_tokens=tokens_out)) if price is not None else 0.0
    return tokens_in + tokens_out, dollars


def fit_call(request: ModelRequest, spec: ModelSpec | None, *, tokens_left: float | None = None,
             dollars_left: float | None = None) -> tuple[ModelRequest, int, float] | None:
    """The request with its reply limit lowered so that its worst case fits in what is left of a token
    and a dollar cap (None: uncapped), with that worst case ``(tokens, dollars)``; None when even a
    one-token reply does not fit (the prompt alone would spend the cap)."""
    tokens, _ = call_ceiling(request, spec)
    default_out = int(request.max_tokens or (spec.max_tokens if spec is not None else ModelSpec().max_tokens))
    tokens_in = tokens - default_out
    out = default_out
    if tokens_left is not None:
        out = min(out, int(tokens_left) - tokens_in)
    price = spec.price if spec is not None else None
    if dollars_left is not None and price is not None and price.output > 0:
        in_cost = price.cost(Usage(input_tokens=tokens_in))
        out = min(out, int((dollars_left - in_cost) * 1e6 / price.output))
    if out < 1:
        return None
    if out != default_out:
        from dataclasses import replace

        request = replace(request, max_tokens=out)
    tokens, dollars = call_ceiling(request, spec)
    return request, tokens, dollars


def endpoint_of(spec: ModelSpec) -> str | None:
    """The endpoint a spec sends its calls to, as resolved now (flag, else environment, else default).

    None for scripted models (they call nothing). Recorded when a run starts; a resume compares.
    """
    import os

    if spec.provider in ("scripted", "demo"):
        return None
    if spec.provider == "openai":
        return (spec.base_url or "").rstrip("/")
    return (spec.base_url or os.environ.get("ANTHROPIC_BASE_URL") or ANTHROPIC_DEFAULT_URL).rstrip("/")


class MalformedReply(Exception):
    """A 200 answer that is not a valid message (bad JSON, wrong shape, an HTML page): retried like an
    overload, then reported as a :class:`~reasearch.errors.ModelError`. Internal to the clients."""


def why_failed(exc: BaseException) -> str:
    """A short reason for a retry notice: ``connection refused``, ``timed out``, ``HTTP 529``."""
    text = str(getattr(exc, "reason", "") or exc).lower()
    if "refused" in text:
        return "connection refused"
    if "timed out" in text or "timeout" in text or isinstance(exc, TimeoutError):
        return "timed out"
    if "name or service not known" in text or "nodename nor servname" in text or "temporary failure in name" in text:
        return "host name not found"
    return snippet(str(exc) or type(exc).__name__, 80)


def snippet(body: bytes | str, limit: int = 160) -> str:
    """The first bytes of a body on one line (for error messages that must stay one line)."""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else str(body)
    text = " ".join(text.split())
    return text[:limit] + ("..." if len(text) > limit else "")
