"""``reasearch sandbox``: which isolation this machine offers (``check``) and one sandboxed call (``run``)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from reasearch.errors import ConfigError

EXIT_OK, EXIT_FAILED = 0, 1
_PROCESS_BANNER = ("WARNING: sandbox=process: NO filesystem or network isolation. Candidate code can read and "
                   "write what this user can and reach the network; only rlimits and process-group kills apply.")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sandbox", help="check the sandbox, or run one function of a file in it",
                       description="Check which isolation is available here, or run one function in the sandbox.")
    ss = p.add_subparsers(dest="sandbox_command", metavar="SUBCOMMAND")
    ss.required = True

    c = ss.add_parser("check", help="report which isolation is available here, and how to fix what is missing",
                      description="Probe nsjail, the sandbox runtime and the network namespace; say which mode "
                      "'auto' selects here and, when something is missing, why and how to fix it. Exit status 0 "
                      "when nsjail isolation works, 1 when only process mode is available.")
    c.add_argument("--json", action="store_true", help="print the report as JSON")
    c.set_defaults(func=_check)

    r = ss.add_parser("run", help="run one function of a Python file in the sandbox and print the outcome",
                      description="Run FUNC from FILE in a fresh sandbox worker and print the outcome. Exit status "
                      "0 when the status is OK, 1 otherwise (TIMEOUT, OOM, CRASH).")
    r.add_argument("file", metavar="FILE", help="the Python source file of the candidate")
    r.add_argument("--entry", metavar="FUNC", action="append", required=True,
                   help="function to call (repeat to give fall-back names)")
    r.add_argument("--payload", metavar="JSON", default="{}", help="keyword arguments as a JSON object")
    r.add_argument("--timeout", metavar="S", type=float, default=10.0, help="wall-time limit in seconds (10)")
    r.add_argument("--memory", metavar="MB", type=int, default=1024,
                   help="address-space limit in MB on top of the warm runtime (1024)")
    r.add_argument("--mode", choices=("auto", "nsjail", "process"), default="auto", help="isolation mode (auto)")
    r.add_argument("--json", action="store_true", help="print the outcome as JSON")
    r.set_defaults(func=_run)


def _check(args: argparse.Namespace) -> int:
    from reasearch.engine import detect_isolation

    report = detect_isolation()
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return EXIT_OK if report.nsjail_ok else EXIT_FAILED
    console = Console()
    table = Table(title="sandbox check")
    for col in ("check", "ok", "detail"):
        table.add_column(col)
    for name, ok, detail in report.checks:
        table.add_row(name, "[green]yes[/]" if ok else "[red]NO[/]", detail)
    console.print(table)
    console.print(f"runtime: {report.runtime}")
    if report.nsjail_ok:
        console.print("[bold green]mode auto -> nsjail[/] (filesystem, network, PID and user isolation)")
        return EXIT_OK
    console.print(f"[bold red]mode auto -> process[/]: {_PROCESS_BANNER}")
    for problem in report.problems:
        console.print(f"[red]- {problem}[/]")
    return EXIT_FAILED


def _plain(obj: Any) -> Any:
    """A JSON-printable copy (arrays -> lists, bytes -> a short note, non-finite floats -> strings)."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if hasattr(obj, "tolist"):
        return _plain(obj.tolist())
    if isinstance(obj, bytes):
        return f"<{len(obj)} bytes>"
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    return obj


def _run(args: argparse.Namespace) -> int:
    from reasearch.engine import SandboxConfig, SandboxPool
    from reasearch.engine.protocol import Limits, RunRequest

    source = Path(args.file).read_text()
    try:
        payload = json.loads(args.payload)
    except ValueError as exc:
        raise ConfigError(f"--payload is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise ConfigError("--payload must be a JSON object of keyword arguments")
    if not args.timeout > 0 or args.memory <= 0:
        raise ConfigError("--timeout and --memory must be positive")
    with SandboxPool(SandboxConfig(mode=args.mode, workers=1)) as pool:
        if pool.mode == "process":
            print(_PROCESS_BANNER, file=sys.stderr)
        out = pool.run(RunRequest(source=source, entry=tuple(args.entry), payload=payload,
                                  limits=Limits(wall_s=args.timeout, memory_mb=args.memory)))
    doc = {"status": out.status.value, "value": _plain(out.value), "wall_s": out.wall_s, "cpu_s": out.cpu_s,
           "exit_code": out.exit_code, "signal": out.signal, "error": out.error, "stdout": out.stdout,
           "stderr": out.stderr, "sandbox_mode": out.sandbox_mode}
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        console = Console()
        colour = "green" if out.status.value == "OK" else "red"
        console.print(f"[bold {colour}]{out.status.value}[/]  wall {out.wall_s:.4f} s  cpu {out.cpu_s:.4f} s  "
                      f"sandbox={out.sandbox_mode}")
        if out.status.value == "OK":
            console.print("value:", json.dumps(doc["value"])[:4000], markup=False, highlight=False)
        if out.error:
            console.print(out.error, markup=False, highlight=False)
        if out.stdout:
            console.print("--- stdout ---\n" + out.stdout, markup=False, highlight=False)
        if out.stderr:
            console.print("--- stderr ---\n" + out.stderr, markup=False, highlight=False)
    return EXIT_OK if out.status.value == "OK" else EXIT_FAILED
