"""A cheap look at a model's endpoint and client library before a run is created.

``check_model(spec)`` fails in about a second, with one line that says what to fix, when the client
library a provider needs is not installed or nothing answers at the endpoint (a TCP connect with a
short timeout: it costs no tokens and needs no key). A run is created only after it passes, so a down
or mistyped endpoint leaves no empty ``interrupted`` run behind.

Trust boundary: the endpoint comes from the user (flags, environment, a stored run); nothing is sent.
"""

from __future__ import annotations

import importlib.util
import socket
import sys
from urllib.parse import urlsplit

from reasearch.errors import ConfigError
from reasearch.models.base import ModelSpec, endpoint_of, why_failed

__all__ = ["check_endpoint", "check_model"]

_LIBRARIES = {"anthropic": ("anthropic", "pip install 'anthropic>=0.40'  (or: pip install -e '.[agent]')")}


def check_model(spec: ModelSpec, *, timeout_s: float = 3.0, role: str = "agent") -> None:
    """Raises a one-line :class:`ConfigError` when ``spec``'s client library is missing or its endpoint
    does not accept a connection within ``timeout_s`` seconds. Scripted and demo models pass at once."""
    library = _LIBRARIES.get(spec.provider)
    if library is not None and not _installed(library[0]):
        raise ConfigError(f"the {role} model {spec.provider}/{spec.name} needs the {library[0]!r} package, which is "
                          f"not installed: {library[1]}")
    url = endpoint_of(spec)
    if not url:
        return
    check_endpoint(url, role=f"{role} model", flag="--base-url" if spec.provider == "openai"
                   else "--base-url or $ANTHROPIC_BASE_URL", timeout_s=timeout_s)


def check_endpoint(url: str, *, role: str, flag: str, timeout_s: float = 3.0) -> None:
    """Raises a one-line :class:`ConfigError` when nothing accepts a TCP connection at ``url`` within
    ``timeout_s`` (``role`` names it, ``flag`` is the option that sets it); sends nothing."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"the {role}'s endpoint {url!r} is not an http(s) URL (e.g. http://127.0.0.1:11434/v1)")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ConfigError(f"the {role}'s endpoint {url!r} has a bad port") from None
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            pass
    except OSError as exc:
        why = why_failed(exc)
        why = f"no answer within {timeout_s:g} s" if why == "timed out" else why
        raise ConfigError(f"the {role}'s endpoint {url} does not answer ({why}): start the server or fix "
                          f"{flag}; no run was created") from None


def _installed(name: str) -> bool:
    if name in sys.modules:  # imported already, or blocked (None)
        return sys.modules[name] is not None
    return importlib.util.find_spec(name) is not None
