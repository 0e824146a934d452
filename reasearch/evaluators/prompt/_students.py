"""Student-model clients: OpenAI-compatible (vLLM, Ollama, OpenAI) over the standard library's HTTP,
and Anthropic through its SDK (imported lazily). Concurrent batches with a concurrency limit, retries
with backoff on 429/5xx and connection errors, timeouts.

A call never raises for a failure of the student: it ends in a :class:`StudentReply` whose ``status``
is ``OK``, ``TIMEOUT`` (the last attempt timed out) or ``CRASH`` (HTTP error, malformed answer,
connection failure after the retries), with the error text; ``REFUSED`` is given by a budgeted caller
(``reasearch.runs.students``) when a call does not fit under a cap. Only ``OK`` replies carry text
that is scored: a failed call is never a silent zero.

The usage a student reports is untrusted: a reply whose text was read is ``OK`` whatever its usage says,
and its token counts are clamped to what the request could have used (prompt tokens: one per byte of the
system prompt and input, plus a template's overhead; output tokens: the ``max_tokens`` asked), see
:mod:`reasearch.usage`. Dollars are priced from the clamped counts.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import math
import os
import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from reasearch.engine.protocol import Status
from reasearch.errors import ConfigError
from reasearch.usage import prompt_token_bound, reported_tokens

__all__ = ["StudentSpec", "StudentRequest", "StudentReply", "StudentClient", "StudentCaller", "DirectCaller",
           "OpenAICompatStudent", "AnthropicStudent", "build_student", "map_concurrently", "MAX_REPLY_CHARS"]

MAX_REPLY_CHARS = 50_000  # longer student outputs are cut (and flagged) before they are stored or scored
_MAX_BODY = 8 * 1024 * 1024  # bytes of an HTTP answer read at most
_PROVIDERS = ("openai", "anthropic")
_DEFAULT_BASE_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalized_endpoint(provider: str, base_url: str | None) -> str:
    """``provider:scheme://host:port/path`` of a student endpoint, the same for every spelling of it.

    Scheme and host lowercased, the default port written out, no trailing slash, credentials dropped,
    the query kept (it may select a deployment); None is the provider's default endpoint. Part of a
    student call's store key: two endpoints serving a model of the same name answer differently.
    """
    url = urlsplit(base_url or _DEFAULT_BASE_URLS.get(provider, ""))
    scheme = url.scheme.lower()
    try:
        port = url.port or _DEFAULT_PORTS.get(scheme, 0)
    except ValueError:
        raise ConfigError(f"student base URL has a bad port: {base_url!r}") from None
    host = (url.hostname or "").lower()
    host = f"[{host}]" if ":" in host else host
    path = url.path.rstrip("/")
    return f"{provider}:{scheme}://{host}:{port}{path}" + (f"?{url.query}" if url.query else "")

T = TypeVar("T")
R = TypeVar("R")
_UNREADABLE: Any = object()  # a usage that is not an object: its counts are the request's bounds


@dataclass(frozen=True, slots=True)
class StudentSpec:
    """Which student and how to call it.

    Attributes:
        provider: ``openai`` (any OpenAI-compatible ``/v1/chat/completions`` endpoint) or ``anthropic``.
        model: the model name sent to the endpoint.
        base_url: endpoint root (OpenAI-compatible: the ``.../v1`` URL); None: the provider's default.
        api_key_env: environment variable holding the key (never stored in a run).
        timeout_s: per-attempt socket timeout.
        retries: extra attempts after a 429, a 5xx, a timeout or a connection error.
        backoff_s: first back-off; doubles per attempt (with jitter), at most 20 s; a ``Retry-After``
            header is honoured up to that bound.
        concurrency: calls in flight at once in a batch.
        price_in: USD per million input tokens (None: unpriced, no dollars debited).
        price_out: USD per million output tokens.
    """

    provider: str
    model: str
    base_url: str | None = None
    api_key_env: str | None = None
    timeout_s: float = 60.0
    retries: int = 4
    backoff_s: float = 1.0
    concurrency: int = 8
    price_in: float | None = None
    price_out: float | None = None

    def __post_init__(self) -> None:
        if self.provider not in _PROVIDERS:
            raise ConfigError(f"student provider must be one of {list(_PROVIDERS)}, not {self.provider!r}")
        if not self.model or not isinstance(self.model, str):
            raise ConfigError("the student needs a model name")
        if not (self.timeout_s > 0) or self.retries < 0 or self.backoff_s < 0 or int(self.concurrency) < 1:
            raise ConfigError("student timeout_s must be > 0, retries and backoff_s >= 0, concurrency >= 1")
        if (self.price_in is None) != (self.price_out is None):
            raise ConfigError("give both price_in and price_out (USD per million tokens), or neither")
        for name in ("timeout_s", "backoff_s", "price_in", "price_out"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(float(value)):
                raise ConfigError(f"student {name} must be a finite number, not {value!r}")

    @classmethod
    def parse(cls, text: str, **kwargs: Any) -> StudentSpec:
        """``openai/NAME``, ``anthropic/NAME``, or a bare NAME (``claude-*``: Anthropic; else OpenAI-compatible)."""
        text = str(text).strip()
        provider, sep, name = text.partition("/")
        if not sep or provider not in _PROVIDERS:
            provider, name = ("anthropic" if text.startswith("claude") else "openai"), text
        return cls(provider=provider, model=name, **kwargs)

    @property
    def name(self) -> str:
        return f"{self.provider}/{self.model}"

    @property
    def endpoint(self) -> str:
        """The normalized endpoint (:func:`normalized_endpoint`): what a call's store key names besides the model."""
        return normalized_endpoint(self.provider, self.base_url)

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        if self.price_in is None or self.price_out is None:
            return 0.0
        return (input_tokens * self.price_in + output_tokens * self.price_out) / 1e6


@dataclass(frozen=True, slots=True)
class StudentRequest:
    """One student call: a system prompt and one input, with its sampling parameters.

    ``key(endpoint)`` identifies the call for the store: the same (endpoint, model, prompt, input,
    sampling parameters, sample index) is served from the store instead of being paid again. The
    endpoint (:attr:`StudentSpec.endpoint`) is required: a model name alone does not say who answers,
    and two runs whose students share a name on different servers must not score each other's replies.
    """

    model: str  # provider/name
    system: str
    user: str
    temperature: float = 0.0
    max_tokens: int = 1024
    sample_index: int = 0

    def token_bounds(self) -> tuple[int, int]:
        """The most (input, output) tokens this call can use: what a student reports is clamped to it."""
        sent = len(self.system.encode("utf-8", "surrogatepass")) + len(self.user.encode("utf-8", "surrogatepass"))
        return prompt_token_bound(sent), max(0, int(self.max_tokens))

    def key(self, endpoint: str) -> str:
        if not endpoint:
            raise ConfigError("a student call's key needs the student's endpoint (StudentSpec.endpoint)")
        material = json.dumps(
            [
                "v2",
                endpoint,
                self.model,
                self.system,
                self.user,
                float(self.temperature),
                int(self.max_tokens),
                int(self.sample_index),
            ],
            ensure_ascii=False,
            separators=(",", ":"),
        )
        return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class StudentReply:
    """What one call gave: status, text (``OK`` only), tokens, dollars, error, attempts, cached."""

    status: Status
    text: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    error: str = ""
    attempts: int = 1
    cached: bool = False
    wall_s: float = 0.0
    truncated: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.status, Status):
            object.__setattr__(self, "status", Status(self.status))
        if self.status is not Status.OK and self.text:
            raise ValueError("only an OK reply carries text")

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def with_(self, **changes: Any) -> StudentReply:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status.value, "text": self.text, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "cost_usd": self.cost_usd, "error": self.error,
                "attempts": self.attempts, "cached": self.cached, "wall_s": self.wall_s, "truncated": self.truncated}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StudentReply:
        return cls(Status(d["status"]), str(d.get("text", "")), int(d.get("input_tokens", 0)),
                   int(d.get("output_tokens", 0)), float(d.get("cost_usd", 0.0)), str(d.get("error", "")),
                   int(d.get("attempts", 1)), bool(d.get("cached", False)), float(d.get("wall_s", 0.0)),
                   bool(d.get("truncated", False)))


class StudentCaller(Protocol):
    """Anything that answers a batch of student requests in order (a client, or a budgeted ledger)."""

    def call_batch(self, requests: Sequence[StudentRequest]) -> list[StudentReply]: ...


def map_concurrently(fn: Callable[[T], R], items: Sequence[T], concurrency: int) -> list[R]:
    """``[fn(x) for x in items]`` with at most ``concurrency`` calls in flight; order kept."""
    items = list(items)
    if not items:
        return []
    workers = max(1, min(int(concurrency), len(items)))
    if workers == 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="student") as pool:
        return list(pool.map(fn, items))


class _Attempt(Exception):
    """One failed attempt: retryable or not, with what to report."""

    def __init__(self, message: str, *, retry: bool, timeout: bool = False, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry, self.timeout, self.retry_after = retry, timeout, retry_after


class StudentClient(ABC):
    """A student endpoint. Subclasses implement :meth:`_attempt` (one HTTP call)."""

    def __init__(self, spec: StudentSpec, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.spec = spec
        self._sleep = sleep

    @property
    def name(self) -> str:
        return self.spec.name

    @abstractmethod
    def _attempt(self, request: StudentRequest) -> tuple[str, Any, Any]:
        """(text, input tokens, output tokens) of one attempt, the counts as the endpoint reported them (any
        value: :meth:`complete` bounds them); raises :class:`_Attempt` on failure."""

    def complete(self, request: StudentRequest) -> StudentReply:
        """One call with retries; never raises for a failure of the student (see module docs)."""
        spec = self.spec
        t0 = time.monotonic()
        last: _Attempt | None = None
        for attempt in range(1, spec.retries + 2):
            try:
                text, raw_in, raw_out = self._attempt(request)
            except _Attempt as exc:
                last = exc
                if not exc.retry or attempt > spec.retries:
                    break
                delay = min(20.0, spec.backoff_s * (2 ** (attempt - 1)) * (0.5 + random.random()))
                if exc.retry_after is not None:
                    delay = min(20.0, max(delay, exc.retry_after))
                self._sleep(delay)
                continue
            bound_in, bound_out = request.token_bounds()
            tin, tout = reported_tokens(raw_in, bound_in), reported_tokens(raw_out, bound_out)
            truncated = len(text) > MAX_REPLY_CHARS
            return StudentReply(Status.OK, text[:MAX_REPLY_CHARS], tin, tout, spec.cost(tin, tout), attempts=attempt,
                                wall_s=time.monotonic() - t0, truncated=truncated)
        assert last is not None
        status = Status.TIMEOUT if last.timeout else Status.CRASH
        return StudentReply(status, "", error=str(last)[:2000], attempts=attempt, wall_s=time.monotonic() - t0)

    def call_batch(self, requests: Sequence[StudentRequest]) -> list[StudentReply]:
        return map_concurrently(self.complete, requests, self.spec.concurrency)

    def close(self) -> None:  # noqa: B027 (a no-op default on purpose: a client without connections keeps it)
        """Releases connections."""


def _status_error(code: int, body: bytes, retry_after: str | None) -> _Attempt:
    snippet = body[:300].decode("utf-8", "replace")
    after: float | None = None
    if retry_after:
        try:
            after = float(retry_after)
        except ValueError:
            after = None
    retry = code == 429 or code >= 500
    return _Attempt(f"HTTP {code}: {snippet}", retry=retry, retry_after=after)


class OpenAICompatStudent(StudentClient):
    """``POST {base_url}/chat/completions`` (OpenAI, vLLM, Ollama, llama.cpp servers), one persistent
    connection per thread."""

    def __init__(self, spec: StudentSpec, **kwargs: Any) -> None:
        super().__init__(spec, **kwargs)
        url = urlsplit(spec.base_url or "https://api.openai.com/v1")
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ConfigError(f"student base URL must be http(s)://host[:port]/path, not {spec.base_url!r}")
        self._scheme, self._host, self._port = url.scheme, url.hostname, url.port
        self._path = url.path.rstrip("/") + "/chat/completions"
        env = spec.api_key_env or "OPENAI_API_KEY"
        self._key = os.environ.get(env, "")
        self._local = threading.local()

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
            conn = cls(self._host, self._port, timeout=self.spec.timeout_s)
            self._local.conn = conn
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _attempt(self, request: StudentRequest) -> tuple[str, Any, Any]:
        body = json.dumps({
            "model": self.spec.model,
            "messages": [{"role": "system", "content": request.system}, {"role": "user", "content": request.user}],
            "temperature": request.temperature, "max_tokens": request.max_tokens,
            "seed": request.sample_index,
        }).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        try:
            conn = self._conn()
            conn.request("POST", self._path, body, headers)
            resp = conn.getresponse()
            data = resp.read(_MAX_BODY + 1)
            retry_after = resp.getheader("Retry-After")
            if resp.getheader("Connection", "").lower() == "close" or resp.will_close or not resp.isclosed():
                self._drop()  # closing, or a body left unread (oversized): the connection cannot be reused
        except TimeoutError as exc:
            self._drop()
            raise _Attempt(f"timed out after {self.spec.timeout_s:g} s: {exc}", retry=True, timeout=True) from None
        except (OSError, http.client.HTTPException) as exc:
            self._drop()
            raise _Attempt(f"connection failed: {type(exc).__name__}: {exc}", retry=True) from None
        if resp.status != 200:
            raise _status_error(resp.status, data, retry_after)
        if len(data) > _MAX_BODY:
            raise _Attempt(f"answer larger than {_MAX_BODY} bytes", retry=False)
        try:
            doc = json.loads(data)
            text = doc["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError, RecursionError) as exc:
            raise _Attempt(f"malformed chat completion: {type(exc).__name__}: {data[:200]!r}", retry=False) from None
        if not isinstance(text, str):
            text = "" if text is None else str(text)[:MAX_REPLY_CHARS + 1]
        usage = doc.get("usage")  # read apart from the text: a usage of any shape never fails an answered call
        if usage is None:
            return text, None, None
        if not isinstance(usage, dict):
            return text, _UNREADABLE, _UNREADABLE
        return text, usage.get("prompt_tokens"), usage.get("completion_tokens")

    def close(self) -> None:
        self._drop()


class AnthropicStudent(StudentClient):
    """The Messages API through the ``anthropic`` SDK (imported on first use; the SDK's own retries are
    off: the retry policy is this module's)."""

    def __init__(self, spec: StudentSpec, **kwargs: Any) -> None:
        super().__init__(spec, **kwargs)
        self._client: Any = None
        self._lock = threading.Lock()

    def _sdk(self) -> Any:
        with self._lock:
            if self._client is None:
                try:
                    import anthropic
                except ImportError:
                    raise ConfigError("an Anthropic student needs the SDK: pip install 'reasearch[agent]'") from None
                key = os.environ.get(self.spec.api_key_env or "ANTHROPIC_API_KEY", "")
                if not key:
                    raise ConfigError(
                        f"no API key for the Anthropic student: set ${self.spec.api_key_env or 'ANTHROPIC_API_KEY'}"
                    )
                kwargs: dict[str, Any] = {"api_key": key, "max_retries": 0, "timeout": self.spec.timeout_s}
                if self.spec.base_url:
                    kwargs["base_url"] = self.spec.base_url
                self._client = anthropic.Anthropic(**kwargs)
            return self._client

    def _attempt(self, request: StudentRequest) -> tuple[str, Any, Any]:
        import anthropic

        client = self._sdk()
        try:
            # SDK 2.x has no temperature keyword; the API still reads it from the body.
            msg = client.messages.create(model=self.spec.model, system=request.system, max_tokens=request.max_tokens,
                                         messages=[{"role": "user", "content": request.user}],
                                         extra_body={"temperature": request.temperature})
        except anthropic.APITimeoutError as exc:
            raise _Attempt(f"timed out: {exc}", retry=True, timeout=True) from None
        except anthropic.APIStatusError as exc:
            raise _status_error(exc.status_code, str(exc).encode(), exc.response.headers.get("retry-after")) from None
        except anthropic.APIConnectionError as exc:
            raise _Attempt(f"connection failed: {exc}", retry=True) from None
        try:
            texts = [getattr(b, "text", "") for b in msg.content if getattr(b, "type", "") == "text"]
        except TypeError as exc:  # content of the wrong shape
            raise _Attempt(f"malformed message: {type(exc).__name__}: {exc}"[:300], retry=False) from None
        text = "".join(t for t in texts if isinstance(t, str))
        usage = getattr(msg, "usage", None)  # the SDK does not validate it: any value may come back
        return text, getattr(usage, "input_tokens", None), getattr(usage, "output_tokens", None)


def build_student(spec: StudentSpec) -> StudentClient:
    """The client of ``spec``'s provider."""
    return AnthropicStudent(spec) if spec.provider == "anthropic" else OpenAICompatStudent(spec)


@dataclass
class DirectCaller:
    """Calls a client directly, with no store and no budget (``Task.evaluate`` outside a run)."""

    client: StudentClient
    calls: int = field(default=0)

    def call_batch(self, requests: Sequence[StudentRequest]) -> list[StudentReply]:
        replies = self.client.call_batch(requests)
        self.calls += len(replies)
        return replies
