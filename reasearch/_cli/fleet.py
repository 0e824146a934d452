"""``reasearch fleet run|resume|show|list``: many agent runs at once, locally or on a Ray cluster."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from reasearch._cli._track import add_track_arg, check_track, fleet_runs, tracking
from reasearch.errors import ConfigError

EXIT_OK, EXIT_FAILED = 0, 1


def _store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", metavar="URL", help="run store: postgresql://... (shared by every node) or a directory "
                                                   "(default: $REASEARCH_STORE or the run directory)")
    p.add_argument("--run-dir", default="runs", metavar="D", help="where members keep workspaces (default ./runs)")


def _exec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--executor", default="local", metavar="local|ray[=ADDRESS]",
                   help="local: threads of this process; ray: one Ray task per member (ray=HOST:PORT joins a cluster)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--quiet", action="store_true", help="no live table")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fleet", help="many agent runs at once: tasks x seeds x models, local or on Ray",
                       description="Run a fleet of agent runs (tasks x seeds x models) into one store, with a live "
                                   "table and a results table at the end.")
    fs = p.add_subparsers(dest="fleet_command", metavar="SUBCOMMAND")
    fs.required = True

    r = fs.add_parser("run", help="start a fleet", description="Start a fleet from a spec file or flags.")
    r.add_argument("--spec", metavar="FILE", help="fleet spec (JSON or TOML; the keys of FleetSpec)")
    r.add_argument("--task", action="append", default=[], metavar="TASK_ID", help="a task (repeatable)")
    r.add_argument("--seeds", default="0", metavar="LIST", help="seeds, e.g. 0,1,2 or 0-4 (default 0)")
    r.add_argument("--model", action="append", default=[], metavar="M", help="a model (repeatable)")
    r.add_argument("--base-url", metavar="URL", help="model endpoint for every member")
    r.add_argument("--budget", type=float, default=50, metavar="N", help="evaluations per run (default 50)")
    r.add_argument("--max-dollars", type=float, metavar="USD", help="dollar cap per run")
    r.add_argument("--fleet-dollars", type=float, metavar="USD", help="dollar cap over the whole fleet")
    r.add_argument("--fleet-tokens", type=float, metavar="N", help="token cap over the whole fleet")
    r.add_argument("--parallelism", type=int, default=2, metavar="N", help="members at once (default 2)")
    r.add_argument("--traces", type=int, default=1, metavar="N",
                   help="agents per task/seed/model; they share lessons and best candidates (see --share-traces)")
    r.add_argument("--share-traces", choices=("yes", "no", "both"), default="yes",
                   help="with --traces N: share (yes), run independently (no), or both, compared in the results table")
    r.add_argument("--max-turns", type=int, metavar="N", help="model turns per run")
    r.add_argument("--id", metavar="FLEET_ID", help="an explicit fleet id")
    _store_args(r)
    _exec_args(r)
    add_track_arg(r)
    r.set_defaults(func=cmd_run)

    s = fs.add_parser("resume", help="finish what a crash left of a fleet")
    s.add_argument("fleet_id", metavar="FLEET_ID", help="fleet id (a unique prefix is enough)")
    _store_args(s)
    _exec_args(s)
    s.set_defaults(func=cmd_resume)

    w = fs.add_parser("show", help="the results table of a fleet")
    w.add_argument("fleet_id", metavar="FLEET_ID", help="fleet id (a unique prefix is enough)")
    _store_args(w)
    w.add_argument("--json", action="store_true", help="print the results as JSON")
    w.set_defaults(func=cmd_show)

    ls = fs.add_parser("list", help="the fleets in a store")
    _store_args(ls)
    ls.set_defaults(func=cmd_list)


# --share-traces: yes/no, or both (each group run once with and once without shared traces)
_SHARE_TRACES: dict[str, bool | str] = {"yes": True, "no": False, "both": "both"}


def _seeds(text: str) -> list[int]:
    out: list[int] = []
    try:
        for part in text.split(","):
            lo, sep, hi = part.strip().partition("-")
            out.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    except ValueError:
        raise ConfigError(f"--seeds takes a list like 0,1,2 or 0-4, not {text!r}") from None
    return out


def _store(args: argparse.Namespace) -> str:
    return args.store or os.environ.get("REASEARCH_STORE") or args.run_dir


def _executor(text: str) -> tuple[str, str | None]:
    kind, _, address = text.partition("=")
    if kind not in ("local", "ray") or (address and kind != "ray"):
        raise ConfigError(f"--executor is local, ray or ray=ADDRESS, not {text!r}")
    return kind, address or None


def _spec_from_args(args: argparse.Namespace) -> Any:
    from reasearch.fleets.fleet import FleetSpec

    if args.spec:
        if args.task or args.model:
            raise ConfigError("give the fleet as --spec FILE or as flags, not both")
        return FleetSpec.from_file(args.spec)
    if not args.task:
        raise ConfigError("a fleet needs --spec FILE or at least one --task")
    budget: dict[str, float] = {"evaluations": args.budget}
    if args.max_dollars is not None:
        budget["dollars"] = args.max_dollars
    caps: dict[str, float] = {}
    if args.fleet_dollars is not None:
        caps["dollars"] = args.fleet_dollars
    if args.fleet_tokens is not None:
        caps["tokens"] = args.fleet_tokens
    agent = {"max_turns": args.max_turns} if args.max_turns else {}
    from reasearch._cli._shared import task_ref

    return FleetSpec(tasks=tuple(task_ref(t) for t in args.task), seeds=tuple(_seeds(args.seeds)),
                     models=tuple(args.model or ["claude-sonnet-4-6"]), budget=budget, caps=caps,
                     parallelism=args.parallelism, traces=args.traces, agent=agent, base_url=args.base_url,
                     share_traces=_SHARE_TRACES[args.share_traces])


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def members_table(rows: list[Any], title: str, width: int | None = None) -> Table:
    """The fleet's members, one row each; at ``width`` (the terminal's) low-priority columns drop first."""
    from reasearch._cli._tables import Column, fitted_table

    cols = [Column("#", 10), Column("run", 9), Column("task", 8), Column("seed", 3), Column("model", 6),
            Column("method", 2), Column("trace", 1), Column("state", 7), Column("best", 8), Column("normalized", 4),
            Column("evals", 5), Column("dollars", 3), Column("node", 0)]
    cells: list[list[str]] = [
        [str(r.member.index), r.run_id, r.member.task_id, str(r.member.seed), r.member.model, r.member.method,
         str(r.member.trace), r.state, _fmt(r.best_score) + (" (public held-out)" if r.heldout_public else ""),
         _fmt(r.normalized), str(r.evaluations),
         f"{r.used.get('dollars', 0.0):.4g}", r.node] for r in rows]
    if not any(r.node for r in rows):  # nothing ran yet (or nothing recorded where): no empty column
        cols, cells = cols[:-1], [c[:-1] for c in cells]
    return fitted_table(title, cols, cells, width if width is not None else Console().width)


def print_ended(rows: list[Any], seen: set[str]) -> None:
    """One line on stderr per member that ended since the last call (``seen`` holds the run ids printed):
    its state, best score and evaluations, and the reason of one that did not finish."""
    from reasearch.fleets.fleet import printable_line

    for r in rows:
        if r.state in ("finished", "failed", "interrupted") and r.run_id not in seen:
            seen.add(r.run_id)
            why = f": {printable_line(r.reason)}" if r.state != "finished" and r.reason else ""
            print(f"member {r.member.index} {r.run_id}: {r.state} best {_fmt(r.best_score)} "
                  f"({r.evaluations} evaluations){why}", file=sys.stderr, flush=True)


def groups_table(report: Any, width: int | None = None) -> Table:
    """Per task, model and method; at ``width`` (the terminal's) low-priority columns drop first."""
    from reasearch._cli._tables import Column, fitted_table

    cols = [Column("task", 11), Column("model", 10), Column("method", 9), Column("traces", 1), Column("runs", 5),
            Column("finished", 4), Column("mean", 8), Column("std", 6), Column("best", 7), Column("evaluations", 3),
            Column("dollars", 2)]
    cells = [(g["task_id"], g["model"], g["method"], g["traces"], str(g["runs"]), str(g["finished"]), _fmt(g["mean"]),
              _fmt(g["std"]), _fmt(g["best"]), str(g["evaluations"]), f"{g['dollars']:.4g}") for g in report.groups()]
    return fitted_table("per task and model (best score, normalized where a best known exists)", cols, cells,
                        width if width is not None else Console().width)


def _drive(args: argparse.Namespace, go: Any) -> int:
    console = Console(stderr=True)
    kind, address = _executor(args.executor)
    live: Live | None = None
    title = f"fleet ({kind})"

    def on_update(rows: list[Any]) -> None:
        if live is not None:
            live.update(members_table(rows, title))
        elif not args.quiet:  # not a terminal: one line per member as it ends
            print_ended(rows, seen)

    seen: set[str] = set()
    if console.is_terminal and not args.quiet:
        live = Live(console=console, refresh_per_second=2)
        live.__enter__()
    try:
        report = go(kind, address, on_update)
    finally:
        if live is not None:
            live.__exit__(None, None, None)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        out = Console()
        out.print(members_table(list(report.members), f"fleet {report.fleet_id}: {report.wall_s:.1f} s", out.width))
        out.print(groups_table(report, out.width))
        if not all(r.state == "finished" for r in report.members):  # nothing to resume when every member finished
            out.print(f"resume with: reasearch fleet resume {report.fleet_id} --store {_store(args)}", markup=False,
                      highlight=False)
    return EXIT_OK if all(r.state == "finished" for r in report.members) else EXIT_FAILED


def cmd_run(args: argparse.Namespace) -> int:
    from reasearch._cli._shared import check_task_folders
    from reasearch.fleets.fleet import run_fleet
    from reasearch.models.probe import check_model
    from reasearch.runs.store import MAX_FLEET_ID_LEN, check_id

    if args.id is not None:  # before anything is probed or stored
        check_id(args.id, "fleet id", max_len=MAX_FLEET_ID_LEN)
    check_track(args)  # a missing tracker package: one line, exit 2, no fleet stored
    spec = _spec_from_args(args)
    check_task_folders(spec.tasks, spec.task_params)  # a broken task folder: one line, exit 2, no fleet stored
    for model in dict.fromkeys(spec.models):  # before the fleet is stored: a down endpoint makes no runs
        check_model(spec.model_spec(model), role="fleet member")
    if "dollars" in spec.caps:
        unpriced = [
            m for m in spec.models if spec.model_spec(m).price is None and spec.model_spec(m).provider != "scripted"
        ]
        if unpriced:
            print(f"note: no price is known for {', '.join(unpriced)}: the fleet's dollar cap binds the other members "
                  "(give price_in/price_out in a --spec file to count them)", file=sys.stderr)
    if args.track and args.id is None:  # the tracker follows the fleet by its id: name it now
        from reasearch.fleets.fleet import new_fleet_id

        args.id = new_fleet_id()
    with tracking(args, lambda: _store(args), fleet_runs(args.id or "")):
        return _drive(args, lambda kind, address, cb: run_fleet(spec, store=_store(args), run_dir=args.run_dir,
                                                                  fleet_id=args.id, executor=kind, address=address,
                                                                  on_update=cb))


def _fleet_id(store_url: str, given: str) -> str:
    """The fleet id ``given`` names: the id itself or a unique prefix (as run ids take)."""
    from reasearch.runs import open_store

    with open_store(store_url) as store:
        ids = [fid for fid, _ in store.list_fleets()]
    if given in ids:
        return given
    matches = [fid for fid in ids if fid.startswith(given)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ConfigError(f"fleet id prefix {given!r} is ambiguous ({len(matches)} fleets); give more characters")
    raise ConfigError(f"no fleet {given!r} in {store_url}; `reasearch fleet list` lists the fleets")


def cmd_resume(args: argparse.Namespace) -> int:
    from reasearch.fleets.fleet import resume_fleet

    args.fleet_id = _fleet_id(_existing_store(args), args.fleet_id)
    return _drive(args, lambda kind, address, cb: resume_fleet(args.fleet_id, store=_store(args), run_dir=args.run_dir,
                                                                 executor=kind, address=address, on_update=cb))


def _existing_store(args: argparse.Namespace) -> str:
    url = _store(args)
    if "://" not in url and not (Path(url) / "store.sqlite").exists() and not Path(url).is_file():
        raise ConfigError(f"no run store at {url}; pass --store URL or --run-dir DIR")
    return url


def cmd_show(args: argparse.Namespace) -> int:
    from reasearch.fleets.fleet import fleet_report

    store = _existing_store(args)
    report = fleet_report(_fleet_id(store, args.fleet_id), store=store)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return EXIT_OK
    Console().print(members_table(list(report.members), f"fleet {report.fleet_id}"))
    Console().print(groups_table(report))
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    from reasearch.runs import open_store

    with open_store(_existing_store(args)) as store:
        fleets = store.list_fleets()
        for fid, _created in fleets:
            spec = store.get_fleet(fid)
            print(f"{fid}  tasks={','.join(spec['tasks'])} seeds={len(spec['seeds'])} models={len(spec['models'])}")
    return EXIT_OK


__all__ = ["add_parser"]
