"""The MCP server over streamable HTTP on 127.0.0.1, driven by the SDK's own HTTP client; the token and Host rules."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from reasearch.runs import Run, RunState, Unit, open_store
from tests.agent.mcp_helpers import BETTER, SEED_SCORE, TASK, open_dir, text, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
TOKEN = "s3cret-token-for-the-test"


@pytest.fixture()
def http_server() -> Iterator[tuple[str, Path, subprocess.Popen[bytes]]]:
    run_dir = open_dir()
    log = run_dir / "server.log"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "REASEARCH_MCP_TOKEN": TOKEN}
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "reasearch.cli", "mcp", TASK, "--budget", "3", "--http",
                                 "--port", "0", "--run-dir", str(run_dir)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        url = wait_for(lambda: (m := re.search(r"serving MCP at (\S+)", log.read_text())) and m.group(1),
                       timeout=180, what="the server to listen")
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
        yield url, run_dir, proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(run_dir, ignore_errors=True)


def test_a_session_over_http_with_a_token(http_server: tuple[str, Path, subprocess.Popen[bytes]]) -> None:
    url, run_dir, proc = http_server
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    assert httpx2.post(url, json=body, headers=headers).status_code == 401
    assert httpx2.post(url, json=body, headers={**headers, "authorization": "Bearer wrong"}).status_code == 401
    # DNS rebinding: a page on another name that resolves to 127.0.0.1 is refused, even with the token.
    rebound = httpx2.post(url, json=body, headers={**headers, "authorization": f"Bearer {TOKEN}",
                                                   "host": "evil.example:80"})
    assert rebound.status_code >= 400

    async def session() -> None:
        client = httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"},
                                    timeout=httpx2.Timeout(30.0, read=300.0))
        async with client, streamable_http_client(url, http_client=client) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                statement = (await s.read_resource("reasearch://task")).contents[0].text
                assert "n=26" in statement
                seed = await s.call_tool("evaluate", {})
                assert seed.structured_content["evaluation"]["score"] == pytest.approx(SEED_SCORE, abs=1e-9)
                better = await s.call_tool("evaluate", {"code": BETTER})
                assert better.structured_content["evaluation"]["score"] > SEED_SCORE + 0.3, text(better)
                escape = await s.call_tool("read_file", {"path": "/etc/passwd"})
                assert escape.is_error and "root:" not in text(escape)
                done = await s.call_tool("finish", {"reason": "better"})
                assert not done.is_error, text(done)

    anyio.run(session)
    store = open_store(run_dir)
    (record,) = store.list_runs()
    run = Run.open(store, record.id)
    assert run.state is RunState.FINISHED and run.config["mcp"]["transport"] == "http"
    assert run.used()[Unit.EVALUATIONS] == 2
    assert proc.poll() is None  # the server outlives a client's session


def test_a_non_loopback_address_needs_a_token() -> None:
    from reasearch.agent.mcp import http_app, is_loopback
    from reasearch.errors import ConfigError

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.10") and not is_loopback("example.org")
    with pytest.raises(ConfigError, match="without a token"):
        http_app(None, host="0.0.0.0", token=None)  # type: ignore[arg-type]


class _Announced(Exception):
    pass


class _AnyServer:
    def streamable_http_app(self, host: str) -> object:
        async def app(scope: object, receive: object, send: object) -> None:
            raise AssertionError("no request is served in this test")
        return app


def test_the_announced_address_already_accepts_connections() -> None:
    """A client that connects the moment the address is printed is queued, not refused (it was, once, in CI)."""
    import socket
    from urllib.parse import urlsplit

    from reasearch.agent.mcp import serve_http

    outcome: dict[str, object] = {}

    def connect_at_once(url: str) -> None:
        parts = urlsplit(url)
        try:
            socket.create_connection((parts.hostname, parts.port), timeout=5).close()
            outcome["connected"] = url
        except OSError as exc:
            outcome["error"] = exc
        raise _Announced  # stops serve_http before uvicorn runs

    with pytest.raises(_Announced):
        serve_http(_AnyServer(), port=0, on_ready=connect_at_once)  # type: ignore[arg-type]
    assert "error" not in outcome, outcome
    assert str(outcome["connected"]).startswith("http://127.0.0.1:")
