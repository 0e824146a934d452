"""Serving an MCP ``Server``: stdio (default) or streamable HTTP on loopback, a bearer token elsewhere."""

from __future__ import annotations

import hmac
import ipaddress
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from reasearch.errors import ConfigError

__all__ = ["is_loopback", "serve_http", "serve_stdio"]

Scope = MutableMapping[str, Any]
ASGI = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


async def _stdio(server: Server[Any]) -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_stdio(server: Server[Any]) -> None:
    """Serves one client over stdin/stdout until it disconnects (stray output of children goes to stderr)."""
    anyio.run(_stdio, server)


def is_loopback(host: str) -> bool:
    """True for a host name or address that only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _BearerToken:
    """ASGI middleware: every HTTP request needs ``Authorization: Bearer <token>`` (compared in constant time)."""

    def __init__(self, app: ASGI, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": b"missing or wrong bearer token\n"})
                return
        await self.app(scope, receive, send)


def http_app(server: Server[Any], *, host: str, token: str | None) -> ASGI:
    """The streamable HTTP app (``/mcp``); loopback hosts get the SDK's DNS-rebinding protection."""
    if not is_loopback(host) and not token:
        raise ConfigError(f"refusing to serve on {host!r} without a token: anyone who can reach it could spend "
                          "the run's budget and run commands in its sandbox. Bind 127.0.0.1 (the default) or give "
                          "--token (or REASEARCH_MCP_TOKEN)")
    app: ASGI = server.streamable_http_app(host=host)
    return _BearerToken(app, token) if token else app


_BACKLOG = 2048  # uvicorn's default


def serve_http(server: Server[Any], *, host: str = "127.0.0.1", port: int = 8765, token: str | None = None,
               on_ready: Callable[[str], None] | None = None) -> None:
    """Serves MCP over streamable HTTP at ``http://HOST:PORT/mcp`` until interrupted.

    Raises:
        ConfigError: a non-loopback host without a token, or a port that cannot be bound.
    """
    import uvicorn

    app = http_app(server, host=host, token=token)
    sock: socket.socket | None = None
    try:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        # Listening before the address is announced: a client that connects at once waits in the backlog until
        # uvicorn accepts, instead of being refused (a bound socket that does not listen refuses connections).
        sock.listen(_BACKLOG)
    except OSError as exc:
        if sock is not None:
            sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", backlog=_BACKLOG)
    userver = uvicorn.Server(config)
    with sock:
        if on_ready is not None:
            shown = f"[{host}]" if ":" in host else host
            on_ready(f"http://{shown}:{bound}/mcp")
        userver.run(sockets=[sock])
