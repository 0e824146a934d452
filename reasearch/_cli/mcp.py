"""``reasearch mcp``: serve a run (or the bare evaluators) to an MCP client over stdio or streamable HTTP."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from rich.console import Console

from reasearch._cli._params import key_values
from reasearch.errors import ConfigError

EXIT_OK = 0
TOKEN_ENV = "REASEARCH_MCP_TOKEN"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mcp", help="serve a run to an MCP client (Claude Code, ...) as its optimizer",
        description="An MCP server: the client is the optimizer, the evaluation stays trusted (the same run, sandbox, "
                    "cache, budget ledger and store as `reasearch optimize`). stdio by default.",
        epilog="Claude Code: claude mcp add reasearch -- reasearch mcp circle_packing/n26-v1 --budget 50")
    p.add_argument("task_id", nargs="?", metavar="TASK_ID", help="registry id of a new run, e.g. circle_packing/n26-v1")
    p.add_argument("--run", metavar="RUN", help="continue this MCP run (id or unique prefix) instead of starting one")
    p.add_argument("--evaluators", action="store_true",
                   help="stateless: list_tasks, describe_task and evaluate on any task (nothing is stored)")
    p.add_argument("--steer", action="store_true",
                   help="supervise: list_runs, steer (hint, pin, ban, lift, pause, resume, cap, stop), interventions "
                        "and fork on the runs of the store (--store or --run-dir)")
    p.add_argument("--budget", type=int, metavar="N",
                   help="evaluations the run may spend (default 50); with --evaluators: evaluations this server runs "
                        "(default: no cap)")
    p.add_argument("--cap", action="append", default=[], metavar="UNIT=AMOUNT",
                   help="another budget cap of a new run, e.g. experiments=10 or student_calls=5000 (repeatable)")
    p.add_argument("--max-calls", type=int, default=10_000, metavar="N", help="tool calls allowed (default 10000)")
    p.add_argument(
        "--run-dir", default="runs", metavar="D", help="run directory: store and workspaces (default ./runs)"
    )
    p.add_argument("--store", metavar="URL", help="store URL (e.g. postgresql://...; default: SQLite in --run-dir)")
    p.add_argument("--lessons", metavar="F", help="preload lessons.md from F (e.g. an earlier run's)")
    p.add_argument("--seed", type=int, default=0, help="the run's seed")
    p.add_argument(
        "-p", "--param", action="append", default=[], metavar="KEY=VALUE", help="task parameter (repeatable)"
    )
    p.add_argument("--sandbox", choices=("auto", "nsjail", "process"), default="auto",
                   help="sandbox mode of python_exec and bash")
    p.add_argument("--http", action="store_true", help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP address (default 127.0.0.1; others need --token)")
    p.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765; 0: any free port)")
    p.add_argument("--token", help=f"bearer token HTTP clients must send (default: ${TOKEN_ENV})")
    p.add_argument("--quiet", action="store_true", help="no line per call on stderr")
    p.set_defaults(func=serve)


def _progress(console: Console, quiet: bool) -> Any:
    def show(result: Any) -> None:
        if quiet:
            return
        first = (result.text.splitlines() or [""])[0][:100]
        data = result.data or {}
        ev = data.get("evaluation") if isinstance(data, dict) else None
        if ev:
            first = (
                f"{ev['status']} {ev['score'] if ev['score'] is not None else ''} (candidate {ev['candidate'][:12]})"
            )
        style = "red" if result.is_error else "green" if ev and ev["status"] == "OK" else ""
        console.print(f"step {result.step} {result.name}: {first}", style=style or None, markup=False, highlight=False)

    return show


def _warn_unreachable(console: Console, path: Path) -> None:
    blocked = [p for p in reversed(path.resolve().parents) if p.exists() and not p.stat().st_mode & 0o001]
    if blocked and os.geteuid() == 0:
        console.print(f"[yellow]warning: {blocked[0]} is not searchable by other users, so the sandbox cannot reach "
                      "the workspace: python_exec and bash will fail. Use a --run-dir under /var/tmp.[/yellow]")


def serve(args: argparse.Namespace) -> int:
    try:
        from reasearch.agent import mcp as mcp_server
    except ImportError as exc:  # the SDK is an extra
        raise ConfigError(f"the MCP server needs the mcp SDK: pip install 'reasearch[mcp]' ({exc})") from None
    from reasearch.runs import open_store

    console = Console(stderr=True, soft_wrap=True)
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if args.http and not mcp_server.is_loopback(args.host) and not token:
        raise ConfigError(f"refusing to serve on {args.host!r} without a token: give --token (or ${TOKEN_ENV}) "
                          "or bind 127.0.0.1")
    transport = "http" if args.http else "stdio"
    if args.http:
        from reasearch._cli._port import check_port_free

        check_port_free(args.host, args.port)  # before a run is made for the server
    driver = None
    steer_store = None
    if args.steer:
        if args.task_id or args.run or args.evaluators:
            raise ConfigError("--steer supervises the runs of a store: give neither TASK_ID, --run nor --evaluators")
        from reasearch.agent.mcp.steering import SteeringService

        steer_store = open_store(args.store or args.run_dir)
        provider: Any = SteeringService(steer_store)
        name = "reasearch-steering"
    elif args.evaluators:
        if args.task_id or args.run:
            raise ConfigError("--evaluators serves every task without a run: give neither TASK_ID nor --run")
        provider = mcp_server.EvaluatorsService(mcp_server.EvaluatorTools(max_evaluations=args.budget))
        name = "reasearch-evaluators"
    else:
        if bool(args.task_id) == bool(args.run):
            raise ConfigError("give TASK_ID (a new run) or --run RUN (continue one), or --evaluators")
        store = open_store(args.store or args.run_dir)
        if args.run:
            driver = mcp_server.open_mcp_run(args.run, store=store, run_dir=args.run_dir, transport=transport)
            console.print(f"continuing MCP run {driver.run.id} on {driver.run.task_id} "
                          f"({driver.calls} calls recorded; {driver.budget_line()})", markup=False)
        else:
            from reasearch.evaluators import make

            params = key_values(args.param)
            make(args.task_id, **params)  # an unknown id or parameter fails here, before anything is stored
            budget = {"evaluations": 50 if args.budget is None else args.budget, **key_values(args.cap, "--cap")}
            lessons = Path(args.lessons).read_text() if args.lessons else None
            driver = mcp_server.start_mcp_run(args.task_id, store=store, run_dir=args.run_dir, budget=budget,
                                              task_params=params, seed=args.seed, lessons=lessons,
                                              max_calls=args.max_calls, transport=transport, sandbox_mode=args.sandbox)
            console.print(f"MCP run {driver.run.id} on {args.task_id} (workspace {driver.agent.workspace.root})",
                          markup=False)
        _warn_unreachable(console, driver.agent.workspace.root)
        provider, name = driver, "reasearch"
    server = mcp_server.build_server(provider, name=name, on_call=_progress(console, args.quiet))
    try:
        if args.http:
            mcp_server.serve_http(server, host=args.host, port=args.port, token=token,
                                  on_ready=lambda url: console.print(f"serving MCP at {url}", markup=False))
        else:
            mcp_server.serve_stdio(server)
    except KeyboardInterrupt:
        pass
    finally:
        if steer_store is not None:
            steer_store.close()
        if driver is not None:
            driver.close()
            state = "finished" if driver.finished else f"continue it with: reasearch mcp --run {driver.run.id}"
            console.print(f"run {driver.run.id}: {state}", markup=False)
    return EXIT_OK
