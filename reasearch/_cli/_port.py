"""A look at a TCP port before a server (dashboard, MCP over HTTP) is started, or a run is made for it."""

from __future__ import annotations

import errno
import socket

from reasearch.errors import ConfigError


def check_port_free(host: str, port: int, flag: str = "--port") -> None:
    """Raises a one-line ConfigError when ``host:port`` cannot be bound (in use, or not an address here).

    Binds as the server will (``SO_REUSEADDR``, as uvicorn does) and lets go at once; port 0 always passes.
    """
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OverflowError:
        raise ConfigError(f"{flag} {port} is not a port (0-65535)") from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"port {port} on {host} is already in use (another server?): choose another with "
                              f"{flag} N; nothing was started") from None
        raise ConfigError(f"cannot listen on {host}:{port} ({exc.strerror}): check --host and {flag}") from None
