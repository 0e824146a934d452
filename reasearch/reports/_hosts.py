"""Host names the dashboard answers to: loopback addresses and names, and the name in a ``Host`` header.

Shared by the read path (:mod:`reasearch.reports.serve`) and the write path
(:mod:`reasearch.reports.steer_web`), which both refuse a foreign ``Host`` (DNS rebinding).
"""

from __future__ import annotations

import ipaddress

__all__ = ["LOOPBACK_NAMES", "host_of", "is_loopback"]

LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and the usual loopback names."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_of(header: str) -> str:
    """The host name of a Host header (port removed, IPv6 brackets kept off)."""
    header = header.strip()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header
