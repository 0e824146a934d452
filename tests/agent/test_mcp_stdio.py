"""The MCP server driven by the SDK's own client over stdio (``python -m reasearch.cli mcp ...`` spawned).

A whole session (read the task, evaluate the seed, improve, finish), budget refusal, path escapes, a
``kill -9`` of the server in the middle of an evaluation then a reconnect with ``--run`` that re-spends
nothing, and the stateless evaluators.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, Implementation
from mcp.client.stdio import stdio_client

from reasearch.runs import Run, RunState, Unit, open_store
from tests.agent.mcp_helpers import BETTER, SEED_SCORE, SLOW_BETTER, TASK, fresh_dir, server_params, text, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture()
def run_dir() -> Iterator[Path]:
    yield from fresh_dir()


def _only_run(run_dir: Path) -> Run:
    store = open_store(run_dir)
    runs = store.list_runs()
    assert len(runs) == 1, runs
    return Run.open(store, runs[0].id)


def test_a_client_reads_the_task_evaluates_the_seed_improves_and_finishes(
        run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seen: dict[str, Any] = {}

    async def session() -> None:
        async with stdio_client(server_params(TASK, "--budget", "5", "--run-dir", str(run_dir))) as (r, w):
            async with ClientSession(r, w, client_info=Implementation(name="test-client", version="9.9")) as s:
                init = await s.initialize()
                assert "evaluate" in (init.instructions or "")
                tools = {t.name: t for t in (await s.list_tools()).tools}
                seen["tools"] = tools
                uris = {res.uri for res in (await s.list_resources()).resources}
                assert {"reasearch://task", "reasearch://lessons", "reasearch://best"} <= uris
                statement = (await s.read_resource("reasearch://task")).contents[0].text
                assert "Circle packing in the unit square, n=26" in statement
                seed = await s.call_tool("evaluate", {})
                assert not seed.is_error, text(seed)
                assert seed.structured_content["evaluation"]["status"] == "OK"
                assert seed.structured_content["evaluation"]["score"] == pytest.approx(SEED_SCORE, abs=1e-9)
                assert (await s.read_resource("reasearch://best")).contents[0].text.startswith('"""Seed program')
                wrote = await s.call_tool("write_file", {"path": "candidate.py", "content": BETTER})
                assert not wrote.is_error, text(wrote)
                better = await s.call_tool("evaluate", {})
                ev = better.structured_content["evaluation"]
                assert ev["status"] == "OK" and ev["score"] > SEED_SCORE + 0.3, text(better)
                assert "NEW BEST" in text(better)
                again = await s.call_tool("evaluate", {"code": BETTER})
                assert again.structured_content["evaluation"]["cached"] is True
                lessons = await s.call_tool("update_lessons", {"content": "# lessons\nstaggered rows beat the grid\n"})
                assert not lessons.is_error
                assert "staggered rows" in (await s.read_resource("reasearch://lessons")).contents[0].text
                assert (await s.read_resource("reasearch://best")).contents[0].text == BETTER
                bad = await s.call_tool("evaluate", {"code": 42})
                assert bad.is_error and "must be a string" in text(bad)
                done = await s.call_tool("finish", {"reason": "staggered rows", "candidate_id": ev["candidate"][:12]})
                assert not done.is_error, text(done)
                seen["best"] = ev
                after = await s.call_tool("evaluate", {"code": "def run(): pass\n"})
                assert after.is_error and "finished" in text(after)

    anyio.run(session)
    # The MCP tools are the agent's own tools, with the very same schemas; model-bound ones are left out.
    from reasearch.agent.mcp import HIDDEN_TOOLS

    run = _only_run(run_dir)
    assert run.config["driver"] == "mcp"
    assert run.state is RunState.FINISHED
    assert run.store.get_run(run.id).final_candidate == seen["best"]["candidate"]
    assert run.used()[Unit.EVALUATIONS] == 2  # the seed and the better one; the repeat was free
    tools = seen["tools"]
    assert not (set(tools) & HIDDEN_TOOLS)
    assert {"read_file", "write_file", "list_files", "python_exec", "bash", "evaluate", "get_status", "finish",
            "update_lessons"} <= set(tools)
    from reasearch.agent.tools import ControlTools, ProgramTools, WorkspaceTools, tools_of

    own = tools_of(WorkspaceTools.__new__(WorkspaceTools), ProgramTools(None), ControlTools(None))  # type: ignore[arg-type]
    for name, t in own.items():
        if name in tools:
            assert tools[name].input_schema == dict(t.input_schema), name
            assert tools[name].description == t.description
    # Every call is in the event log, call then result, each at its own step.
    events = run.events()
    calls = [e for e in events if e.kind == "mcp_call"]
    results = {e.step: e.payload for e in events if e.kind == "mcp_result"}
    assert [c.payload["name"] for c in calls] == ["evaluate", "write_file", "evaluate", "evaluate", "update_lessons",
                                                  "evaluate", "finish", "evaluate"]
    assert all(c.step in results for c in calls)
    assert {c.payload["client"] for c in calls} == {"test-client/9.9"}
    assert len({c.step for c in calls}) == len(calls)
    assert any(e.kind == "final" for e in events)
    # show / export / runs work on an MCP run (the commands' main(), in this process).
    from reasearch.cli import main

    capsys.readouterr()
    assert main(["show", run.id, "--run-dir", str(run_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["id"] == run.id
    assert main(["export", run.id, "--run-dir", str(run_dir), "--json"]) == 0
    assert "mcp_call" in capsys.readouterr().out
    assert main(["runs", "--run-dir", str(run_dir), "--json"]) == 0
    assert run.id in capsys.readouterr().out


def test_budget_refusal_and_path_escapes(run_dir: Path) -> None:
    secret = run_dir / "secret.txt"
    secret.write_text("TOP-SECRET-beside-the-workspace\n")
    os.chmod(secret, 0o644)
    answers: list[str] = []

    async def session() -> None:
        async with stdio_client(server_params(TASK, "--budget", "1", "--run-dir", str(run_dir))) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()

                async def call(name: str, args: dict[str, Any]) -> Any:
                    res = await s.call_tool(name, args)
                    answers.append(text(res))
                    return res

                assert not (await call("evaluate", {})).is_error
                refused = await call("evaluate", {"code": BETTER})
                assert not refused.is_error
                assert refused.structured_content["evaluation"]["status"] == "REFUSED"
                assert "evaluation budget spent: 1/1 used, 0 left" in text(refused)
                assert "left: evaluations 0 of 1" in text(refused)
                assert "evaluations: 0 left" in text(await call("get_status", {}))
                # Path escapes: '..', absolute paths, symlinks planted with bash.
                for name, args in [("read_file", {"path": "../../secret.txt"}), ("read_file", {"path": str(secret)}),
                                   ("write_file", {"path": "../escape.py", "content": "x"}),
                                   ("write_file", {"path": "/var/tmp/escape.py", "content": "x"}),
                                   ("list_files", {"path": ".."})]:
                    res = await call(name, args)
                    assert res.is_error and "refused" in text(res), (name, args, text(res))
                planted = await call(
                    "bash",
                    {
                        "command": f"ln -s {secret} link.txt && ln -s {run_dir} up && "
                        "rm candidate.py && ln -s ../../secret.txt candidate.py && ls -l"
                    },
                )
                assert not planted.is_error, text(planted)
                for name, args in [("read_file", {"path": "link.txt"}), ("read_file", {"path": "up/secret.txt"}),
                                   ("write_file", {"path": "up/escape.py", "content": "x"}),
                                   ("write_file", {"path": "link.txt", "content": "overwrite"}),
                                   ("evaluate", {}), ("get_current_code", {})]:
                    res = await call(name, args)
                    assert res.is_error and ("refused" in text(res) or "symlink" in text(res)), (name, args, text(res))
                listing = await call("list_files", {})
                assert "symlink, not followed" in text(listing)

    anyio.run(session)
    assert not any("TOP-SECRET" in a for a in answers)
    assert secret.read_text() == "TOP-SECRET-beside-the-workspace\n"
    assert not (run_dir / "escape.py").exists() and not Path("/var/tmp/escape.py").exists()
    run = _only_run(run_dir)
    assert run.used()[Unit.EVALUATIONS] == 1
    assert [e.result.status.value for e in run.evaluations()] == ["OK", "REFUSED"]


def _pid_of_driver(run: Run) -> int:
    live = [d for d in run.store.drivers(run.id) if not d.stopped]
    assert len(live) == 1, live
    return int(live[0].pid)


def test_kill_9_mid_evaluation_then_reconnect_continues_with_nothing_respent(run_dir: Path) -> None:
    from agent_helpers import children, reap_orphans

    store_path = run_dir
    known = set(children())

    async def first() -> None:
        killed = False
        with contextlib.suppress(Exception, BaseExceptionGroup):
            async with stdio_client(server_params(TASK, "--budget", "4", "--run-dir", str(run_dir))) as (r, w):
                async with ClientSession(r, w) as s:
                    await s.initialize()
                    assert not (await s.call_tool("evaluate", {})).is_error
                    await s.call_tool("write_file", {"path": "candidate.py", "content": SLOW_BETTER})
                    run = _only_run(store_path)
                    ended = anyio.Event()
                    async with anyio.create_task_group() as tg:
                        async def slow() -> None:
                            with contextlib.suppress(Exception):
                                await s.call_tool("evaluate", {}, read_timeout_seconds=120)
                            ended.set()

                        tg.start_soon(slow)
                        # The evaluation is in flight: its budget is reserved, nothing is recorded yet.
                        await anyio.to_thread.run_sync(lambda: wait_for(
                            lambda: run.store.reserved(run.id).get(Unit.EVALUATIONS, 0) > 0, what="a reservation"))
                        os.kill(_pid_of_driver(run), signal.SIGKILL)
                        killed = True
                        with anyio.move_on_after(30):
                            await ended.wait()
                        tg.cancel_scope.cancel()
        assert killed

    anyio.run(first)
    run = _only_run(run_dir)
    assert len(run.evaluations()) == 1  # only the seed: the slow one died with the server
    assert run.used()[Unit.EVALUATIONS] == 1
    dangling = [e for e in run.events() if e.kind == "mcp_call" and e.payload["name"] == "evaluate"][-1]
    assert not [e for e in run.events() if e.kind == "mcp_result" and e.step == dangling.step]
    answers: dict[str, Any] = {}

    async def second() -> None:
        async with stdio_client(server_params("--run", run.id[:12], "--run-dir", str(run_dir))) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                status = text(await s.call_tool("get_status", {}))
                answers["status"] = status
                # the dead server's reservation was charged at once (one evaluation: the sandbox may have run it)
                assert "evaluations: 2 left" in status
                code = text(await s.call_tool("get_current_code", {}))
                assert "time.sleep(4)" in code  # the workspace is the same
                seed = await s.call_tool("evaluate", {"code": (await s.read_resource("reasearch://best")).contents[0].text})
                assert seed.structured_content["evaluation"]["cached"] is True  # repeat: free
                slow = await s.call_tool("evaluate", {"code": SLOW_BETTER}, read_timeout_seconds=300)
                ev = slow.structured_content["evaluation"]
                assert ev["status"] == "OK" and ev["score"] > SEED_SCORE + 0.3, text(slow)
                answers["final"] = await s.call_tool("finish", {"reason": "done"})

    anyio.run(second)
    assert not answers["final"].is_error
    run = Run.open(open_store(run_dir), run.id)
    assert run.state is RunState.FINISHED
    # Nothing re-spent: the ledger holds one debit per distinct candidate that ran, and one for the evaluation
    # in flight at the kill, charged once at its reservation (issue 40 item 3).
    ran = {e.candidate_id for e in run.evaluations() if e.result.status.value == "OK" and not e.result.cached}
    charged = [e for e in run.store.ledger(run.id) if e.note.startswith("charged at reservation")]
    assert [(e.unit, e.amount) for e in charged] == [(Unit.EVALUATIONS, 1.0)]
    assert "evaluation was in flight" in charged[0].note
    assert run.used()[Unit.EVALUATIONS] == len(ran) + 1 == 3
    steps = [e.step for e in run.events() if e.kind == "mcp_call"]
    assert steps == sorted(set(steps))  # no step was used twice
    closed = [e for e in run.events() if e.kind == "mcp_result" and e.step == dangling.step]
    assert closed and closed[0].payload["interrupted"] is True
    sessions = [e.payload for e in run.events() if e.kind == "mcp_session"]
    assert [s["resumed"] for s in sessions] == [False, True]
    # The killed server's sandbox workers died with it and were re-parented here (a subreaper): reap them;
    # one still alive would fail here.
    reap_orphans(known)


def test_a_second_server_on_a_live_run_is_refused_and_a_bad_command_line_is_one_line(
        run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = open_store(run_dir)
    from reasearch.agent.mcp import start_mcp_run
    from reasearch.cli import main

    driver = start_mcp_run(TASK, store=store, run_dir=run_dir, budget={"evaluations": 1})
    try:
        res = subprocess.run([sys.executable, "-m", "reasearch.cli", "mcp", "--run", driver.run.id, "--run-dir",
                              str(run_dir)], capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        assert res.returncode == 2
        assert "being driven by a live process" in res.stderr and "Traceback" not in res.stderr
    finally:
        driver.close()
    for args, needle in [(["circle_packing/n26-v1", "--run", "x"], "give TASK_ID"),
                         (["no_such/task"], "no_such/task"),
                         (["--evaluators", "circle_packing/n26-v1"], "--evaluators"),
                         ([TASK, "--http", "--host", "0.0.0.0"], "without a token")]:
        # the same main() the process above ran (each refusal comes before any server starts)
        code = main(["mcp", *args, "--run-dir", str(run_dir)])
        err = capsys.readouterr().err
        assert code == 2, (args, err)
        assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert len(store.list_runs()) == 1  # refusals create nothing


def test_the_stateless_evaluators_server(run_dir: Path) -> None:
    cwd = run_dir

    async def session() -> None:
        params = server_params("--evaluators", "--budget", "1")
        params.cwd = str(cwd)
        async with stdio_client(params) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                assert {t.name for t in (await s.list_tools()).tools} == {"list_tasks", "describe_task", "evaluate"}
                listed = await s.call_tool("list_tasks", {"filter": "circle_packing"})
                assert TASK in listed.structured_content["tasks"]
                described = text(await s.call_tool("describe_task", {"task_id": TASK}))
                assert "n=26" in described and "Seed program" in described
                ok = await s.call_tool("evaluate", {"task_id": TASK, "code": BETTER})
                assert ok.structured_content["status"] == "OK" and ok.structured_content["score"] > SEED_SCORE
                refused = await s.call_tool("evaluate", {"task_id": TASK, "code": BETTER})
                assert refused.structured_content["status"] == "REFUSED" and "0 left" in text(refused)
                unknown = await s.call_tool("describe_task", {"task_id": "nope/v1"})
                assert unknown.is_error and "list_tasks" in text(unknown)

    anyio.run(session)
    assert list(cwd.iterdir()) == []  # stateless: nothing stored
