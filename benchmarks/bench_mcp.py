"""Overhead of an ``evaluate`` call through MCP against a direct ``Run.evaluate``, side by side.

Run: ``pytest benchmarks/bench_mcp.py --benchmark-group-by=group``. The MCP side is a real
``reasearch mcp`` server process spoken to by the SDK's own client over stdio (JSON-RPC, schema
validation, the ``mcp_call``/``mcp_result`` journal, a worker-thread hop); the direct side is a
``Run`` in this process. Both evaluate the same candidate (the task's seed) on circle_packing/n26-v1,
each in its own SQLite store with its own warm sandbox pool:

- group ``mcp_evaluate_cached``: a repeat of an evaluated candidate (a new step served from the
  cache): nothing but harness and protocol, the overhead at its most visible;
- group ``mcp_evaluate_fresh``: a new candidate each round (the seed plus a unique comment), so the
  sandbox runs it: the overhead as a share of a real evaluation.

``extra_info["mcp_over_direct"]`` on the MCP row is the ratio of the medians; ``overhead_ms`` their
difference.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal

from reasearch.evaluators import make
from reasearch.runs import Run, open_store

TASK = "circle_packing/n26-v1"
SEED = make(TASK).seed_program()
_medians: dict[str, float] = {}


def _open_dir(name: str) -> Path:
    base = Path("/var/tmp/reasearch-bench")
    base.mkdir(exist_ok=True)
    os.chmod(base, 0o755)
    path = base / f"{name}-{os.getpid()}"
    path.mkdir(exist_ok=True)
    os.chmod(path, 0o755)
    return path


@pytest.fixture(scope="module")
def mcp_call() -> Iterator[Any]:
    """``call(name, arguments) -> CallToolResult`` on a live stdio server (one per module)."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                         os.environ.get("PYTHONPATH", "")])}
    params = StdioServerParameters(command=sys.executable, env=env, args=[
        "-m", "reasearch.cli", "mcp", TASK, "--budget", "100000", "--quiet", "--run-dir", str(_open_dir("mcp"))])
    with start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(stdio_client(params)) as (r, w):
            with portal.wrap_async_context_manager(ClientSession(r, w)) as session:
                portal.call(session.initialize)

                def call(name: str, arguments: dict[str, Any]) -> Any:
                    res = portal.call(session.call_tool, name, arguments)
                    assert not res.is_error, res.content
                    return res

                yield call


@pytest.fixture(scope="module")
def direct_run() -> Iterator[Run]:
    run = Run.create(open_store(_open_dir("direct")), task_id=TASK, budget={"evaluations": 100000})
    yield run
    run.close()


def _record(benchmark: Any, key: str, path: str) -> None:
    if benchmark.stats is None:  # --benchmark-disable
        return
    _medians[f"{key}/{path}"] = benchmark.stats.stats.median
    direct = _medians.get(f"{key}/direct")
    if path == "mcp" and direct:
        mcp = _medians[f"{key}/mcp"]
        benchmark.extra_info["mcp_over_direct"] = mcp / direct
        benchmark.extra_info["overhead_ms"] = (mcp - direct) * 1e3


@pytest.mark.parametrize("path", ["direct", "mcp"])
def test_evaluate_cached(benchmark: Any, path: str, request: pytest.FixtureRequest) -> None:
    benchmark.group = "mcp_evaluate_cached"
    steps = itertools.count(1_000_000)
    if path == "direct":
        run: Run = request.getfixturevalue("direct_run")
        run.evaluate(SEED, step=next(steps))  # the first evaluation pays; the timed ones are repeats

        def once() -> Any:
            result = run.evaluate(SEED, step=next(steps))
            assert result.cached
    else:
        call = request.getfixturevalue("mcp_call")
        call("evaluate", {"code": SEED})

        def once() -> Any:
            assert call("evaluate", {"code": SEED}).structured_content["evaluation"]["cached"]

    benchmark.pedantic(once, rounds=30, iterations=1, warmup_rounds=2)
    _record(benchmark, "cached", path)


@pytest.mark.parametrize("path", ["direct", "mcp"])
def test_evaluate_fresh(benchmark: Any, path: str, request: pytest.FixtureRequest) -> None:
    benchmark.group = "mcp_evaluate_fresh"
    rounds = itertools.count()
    steps = itertools.count(2_000_000)
    if path == "direct":
        run: Run = request.getfixturevalue("direct_run")

        def once() -> Any:
            result = run.evaluate(SEED + f"\n# direct round {next(rounds)}\n", step=next(steps))
            assert result.ok and not result.cached
    else:
        call = request.getfixturevalue("mcp_call")

        def once() -> Any:
            ev = call("evaluate", {"code": SEED + f"\n# mcp round {next(rounds)}\n"}).structured_content["evaluation"]
            assert ev["status"] == "OK" and not ev["cached"]

    benchmark.pedantic(once, rounds=8, iterations=1, warmup_rounds=1)
    _record(benchmark, "fresh", path)
