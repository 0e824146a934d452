"""Helpers of the MCP tests: run folders the sandbox can reach, server commands, candidate programs."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from mcp import StdioServerParameters

TASK = "circle_packing/n26-v1"
SEED_SCORE = 2.1666666645  # the seed's square grid

BETTER = '''"""Staggered rows (5, 6, 5, 5, 5), radii from the LP."""

import numpy as np

from reasearch.native.lp import optimal_radii


def run():
    rows = [5, 6, 5, 5, 5]
    centers = np.array([((i + 0.5) / k, (j + 0.5) / len(rows)) for j, k in enumerate(rows) for i in range(k)])
    return centers, optimal_radii(centers)
'''

# sleeps long enough that the kill (sent once its reservation shows) lands mid-evaluation
SLOW_BETTER = BETTER.replace("def run():\n", "def run():\n    import time\n    time.sleep(4)\n")


def open_dir() -> Path:
    """A fresh folder under /var/tmp that the sandbox uid can reach (pytest's tmp folders are 0700)."""
    base = Path("/var/tmp/reasearch-tests")
    base.mkdir(exist_ok=True)
    os.chmod(base, 0o755)
    path = Path(tempfile.mkdtemp(prefix="mcp-", dir=base))
    os.chmod(path, 0o755)
    return path


def fresh_dir() -> Iterator[Path]:
    """:func:`open_dir`, removed after the test (``yield from fresh_dir()`` in a fixture)."""
    path = open_dir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def server_params(*args: str) -> StdioServerParameters:
    """``python -m reasearch.cli mcp ARGS`` as the SDK's stdio client spawns it (this worktree first on the path)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    return StdioServerParameters(command=sys.executable, args=["-m", "reasearch.cli", "mcp", *args], env=env)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], Any], timeout: float = 120.0, what: str = "a condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def text(result: Any) -> str:
    """All text of a CallToolResult."""
    return "\n".join(getattr(c, "text", "") for c in result.content)


def call_through_server(provider: Any, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Each call's result through the MCP server (the SDK's in-process client on ``build_server(provider)``)."""
    import anyio
    from mcp import Client

    from reasearch.agent.mcp import build_server

    out: list[Any] = []

    async def go() -> None:
        async with Client(build_server(provider)) as c:
            for name, args in calls:
                out.append(await c.call_tool(name, args))

    anyio.run(go)
    return out


def drive(server: Any, calls: list[tuple[str, dict[str, Any]]], uris: Sequence[str] = ()) -> list[Any]:
    """The tool list, then each call's result (and each resource's text), through the SDK's in-process client."""
    import anyio
    from mcp import Client

    out: list[Any] = []

    async def go() -> None:
        async with Client(server) as c:
            out.append(await c.list_tools())
            for name, args in calls:
                out.append(await c.call_tool(name, args))
            for uri in uris:
                out.append((await c.read_resource(uri)).contents[0].text)

    anyio.run(go)
    return out
