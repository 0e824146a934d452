"""``reasearch sandbox check`` shows network isolation without sending anything off this machine (issue 36).

Where isolation were broken, a probe that connects to a public address would be real traffic to a third
party. The probe may only touch the host's own loopback: checked statically (no address but loopback in
the probe or anywhere in the engine and the sandbox command) and by an audit hook that records every
``socket.connect`` the probe makes, in nsjail mode (through the check's own jail) and without a network
namespace (process mode, where the host's listener must be reached: the verdict can fail).
"""

from __future__ import annotations

import ast
import ipaddress
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reasearch.cli import main
from reasearch.engine._netprobe import NETWORK_PROBE, loopback_listener, network_isolation
from tests.engine.conftest import needs_mode

ROOT = Path(__file__).resolve().parents[2]
_IPV4 = re.compile(r"(?<![\w.])(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})(?![\w.])")

# Every connect the probe makes is printed at exit: the audit event fires before the connect is tried.
_AUDITED = ("import sys, atexit\n"
            "_seen = []\n"
            "sys.addaudithook(lambda ev, args: _seen.append(args[1]) if ev == 'socket.connect' else None)\n"
            "atexit.register(lambda: print('CONNECTS', repr(_seen)))\n" + NETWORK_PROBE)


def _connects(out: str) -> list[object]:
    line = [ln for ln in out.splitlines() if ln.startswith("CONNECTS ")]
    assert len(line) == 1, out
    return list(ast.literal_eval(line[0][len("CONNECTS "):]))


def _loopback_only(addresses: list[object]) -> None:
    assert addresses, "the probe made no connect at all: nothing was shown"
    for addr in addresses:
        assert isinstance(addr, tuple) and ipaddress.ip_address(addr[0]).is_loopback, addr


def test_no_address_but_loopback_in_the_probe_or_the_sandbox_command() -> None:
    sources = [NETWORK_PROBE] + [p.read_text() for p in sorted((ROOT / "reasearch" / "engine").glob("*.py"))]
    sources.append((ROOT / "reasearch" / "_cli" / "sandbox.py").read_text())
    found = {ip for text in sources for ip in _IPV4.findall(text)}
    outside = sorted(ip for ip in found if not ipaddress.ip_address(ip).is_loopback)
    assert outside == [], f"non-loopback addresses in the sandbox check's code: {outside}"
    assert "127.0.0.1" in NETWORK_PROBE and "connect" in NETWORK_PROBE


def test_process_mode_reaches_the_host_listener_and_is_not_called_isolated() -> None:
    """No network namespace: the probe reaches the host's loopback listener (and only it), so the verdict
    can fail and says why."""
    def unjailed(args: list[str]) -> tuple[bool, str]:
        cp = subprocess.run([sys.executable, "-c", _AUDITED, *args], capture_output=True, text=True, timeout=120,
                            stdin=subprocess.DEVNULL, check=False)
        unjailed.out = cp.stdout + cp.stderr  # type: ignore[attr-defined]
        return cp.returncode == 0, cp.stdout + cp.stderr

    ran, verdict = network_isolation(unjailed)
    assert ran, verdict.detail
    _loopback_only(_connects(unjailed.out))  # type: ignore[attr-defined]
    assert not verdict.isolated and verdict.jail_reached is True and verdict.host_accepted >= 1
    assert "loopback listener was reached" in verdict.detail


def test_nsjail_mode_has_lo_only_and_cannot_reach_the_host_listener() -> None:
    needs_mode("nsjail")
    from reasearch.engine._jail import _run_probe
    from reasearch.engine._runtime import build_runtime

    runtime = build_runtime()
    outs: list[str] = []

    def jailed(args: list[str]) -> tuple[bool, str]:
        good, out = _run_probe(runtime, _AUDITED, args)
        outs.append(out)
        return good, out

    ran, verdict = network_isolation(jailed)
    assert ran, verdict.detail
    _loopback_only(_connects(outs[0]))
    assert verdict.isolated, verdict.detail
    assert verdict.interfaces == ("lo",) and verdict.outside_routes == 0
    assert verdict.jail_reached is False and verdict.host_accepted == 0


def test_the_host_side_counts_a_connection_whatever_the_jail_says() -> None:
    """A probe that lies ("unreachable") after reaching the listener is still caught by the host's count."""
    import socket

    def liar(args: list[str]) -> tuple[bool, str]:
        with socket.create_connection(("127.0.0.1", int(args[0])), timeout=5):
            pass
        return True, "uid 0 ifaces lo routes 0 hostloop unreachable python 3 numpy 2\n"

    ran, verdict = network_isolation(liar)
    assert ran and not verdict.isolated and verdict.host_accepted == 1 and verdict.jail_reached is False
    with loopback_listener() as (port, accepted):  # and a listener nobody reached counts nothing
        assert port > 0 and accepted() == 0


def test_sandbox_check_says_how_it_showed_isolation(capsys: pytest.CaptureFixture[str]) -> None:
    needs_mode("nsjail")
    assert main(["sandbox", "check", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    checks = {c["name"]: (c["ok"], c["detail"]) for c in doc["checks"]}
    ok, detail = checks["no network in jail"]
    assert ok and "host loopback listener unreachable" in detail and "lo only" in detail
