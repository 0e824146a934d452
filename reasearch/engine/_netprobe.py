"""Shows that a jail has no network without sending anything off this machine (``reasearch sandbox check``).

The probe never names an outside address: where isolation were broken, a connect to a public resolver
would be real traffic to a third party. Instead the host opens a TCP listener on its own loopback
(``127.0.0.1``, an ephemeral port) and the jailed code

- lists its network interfaces (a jail's own network namespace has ``lo`` only),
- counts its routes that leave through anything but ``lo`` (``/proc/net/route``, ``/proc/net/ipv6_route``),
- tries to connect to the host's listener: a jail's ``127.0.0.1`` is its own loopback, not the host's, so
  the connect must fail.

The host also checks its side: the listener must have accepted nothing. Isolation is shown only when all of
these hold. Without a network namespace (``process`` mode) the same probe reaches the listener: that is how
its verdict is known to be able to fail.

Trust boundary: the jailed probe's output is read as text and matched against fixed fields; the verdict on
the listener is the host's own observation, not the jail's word.
"""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["NETWORK_PROBE", "NetworkVerdict", "loopback_listener", "network_isolation"]

NETWORK_PROBE = (
    "import os, socket, sys\n"
    "import numpy\n"
    "port = int(sys.argv[1])\n"
    "try:\n    ifaces = sorted(name for _, name in socket.if_nameindex())\n"
    "except OSError:\n    ifaces = ['?']\n"
    "def _routes(path, dev_col):\n"
    "    try:\n"
    "        with open(path) as f:\n"
    "            rows = [ln.split() for ln in f.read().splitlines()]\n"
    "    except OSError:\n"
    "        return -1\n"
    "    return sum(1 for r in rows if len(r) > dev_col and r[dev_col] not in ('lo', 'Iface'))\n"
    "routes = [_routes('/proc/net/route', 0), _routes('/proc/net/ipv6_route', -1)]\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n"
    "s.settimeout(2)\n"
    "try:\n    s.connect(('127.0.0.1', port)); reach = 'reached'\n"
    "except OSError:\n    reach = 'unreachable'\n"
    "finally:\n    s.close()\n"
    "known = [n for n in routes if n >= 0]\n"
    "print('uid', os.getuid(), 'ifaces', ','.join(ifaces) or '-', 'routes', sum(known) if known else '?',\n"
    "      'hostloop', reach, 'python', sys.version.split()[0], 'numpy', numpy.__version__)\n"
)
_LINE = re.compile(r"^uid (\S+) ifaces (\S+) routes (\S+) hostloop (reached|unreachable) python \S+ numpy \S+$",
                   re.MULTILINE)


@dataclass(frozen=True, slots=True)
class NetworkVerdict:
    """What the probe saw: ``isolated`` only when every check held."""

    isolated: bool
    detail: str
    interfaces: tuple[str, ...] = ()
    outside_routes: int | None = None  # routes through anything but lo (None: unknown)
    jail_reached: bool | None = None  # the jail's own report of its connect (None: no report)
    host_accepted: int = 0  # connections the host's listener accepted during the probe
    report: str = ""  # the probe's own report line (uid, interfaces, routes, python and numpy versions)


@contextlib.contextmanager
def loopback_listener() -> Iterator[tuple[int, Callable[[], int]]]:
    """A TCP listener on the host's ``127.0.0.1`` (ephemeral port): yields ``(port, accepted)``, where
    ``accepted()`` drains and counts the connections that reached it so far."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        srv.bind(("127.0.0.1", 0))
        srv.listen(16)
        srv.setblocking(False)
        count = 0

        def accepted() -> int:
            nonlocal count
            while True:
                try:
                    conn, _ = srv.accept()
                except (BlockingIOError, InterruptedError):
                    return count
                conn.close()
                count += 1

        yield srv.getsockname()[1], accepted
    finally:
        srv.close()


def network_isolation(run: Callable[[list[str]], tuple[bool, str]]) -> tuple[bool, NetworkVerdict]:
    """Runs :data:`NETWORK_PROBE` through ``run`` (given the probe's argv after ``python -c CODE``; returns
    ``(exited 0, output)``) against a fresh host loopback listener. Returns ``(ran, verdict)``: ``ran`` is
    False when the probe itself failed (its output is then the verdict's detail)."""
    with loopback_listener() as (port, accepted):
        good, out = run([str(port)])
        host_accepted = accepted()
    if not good:
        return False, NetworkVerdict(False, out, host_accepted=host_accepted)
    found = list(_LINE.finditer(out))
    m = found[-1] if found else None  # the last report line counts (nothing else prints one)
    if m is None:
        return True, NetworkVerdict(False, f"the probe printed no report: {out[-300:]!r}", host_accepted=host_accepted)
    ifaces = tuple(x for x in m.group(2).split(",") if x and x != "-")
    routes = None if m.group(3) == "?" else int(m.group(3))
    jail_reached = m.group(4) == "reached"
    problems = []
    if ifaces != ("lo",):
        problems.append(f"interfaces {', '.join(ifaces) or 'none'} (want lo only)")
    if routes:
        problems.append(f"{routes} routes leave through an interface other than lo")
    if jail_reached or host_accepted:
        problems.append(f"the host's loopback listener was reached ({host_accepted} connection(s) accepted)")
    routes_seen = "routes unknown" if routes is None else "no route out"
    detail = (f"lo only, {routes_seen}, host loopback listener unreachable (nothing sent off this machine)"
              if not problems else "; ".join(problems))
    return True, NetworkVerdict(not problems, detail, ifaces, routes, jail_reached, host_accepted, m.group(0))
