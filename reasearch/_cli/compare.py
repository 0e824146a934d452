"""``reasearch compare TASK... --methods ...``: methods x tasks x seeds on equal budgets, one HTML comparison."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from reasearch._cli._track import add_track_arg, check_track, fleet_runs, tracking
from reasearch._cli.fleet import _executor, _fmt, _seeds, members_table, print_ended

EXIT_OK, EXIT_FAILED = 0, 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="compare optimizers (agent, ablations, evolve, reflect, best-of-n) on equal budgets",
        description="Run methods x tasks x seeds as one fleet (each run capped at the same budget of its "
        "task's unit), then write one self-contained HTML comparison.",
    )
    p.add_argument("tasks", nargs="+", metavar="TASK", help="registry ids, e.g. circle_packing/n26-v1 gsm8k/v1")
    p.add_argument("--methods", default="agent,evolve,reflect,best-of-n", metavar="LIST",
                   help="comma list of agent, agent:no-snapshot, agent:no-lessons, agent:no-compaction, best-of-n, "
                        "evolve, reflect, and the installed packages' own loops openevolve, gepa, shinka "
                        "(default: agent,evolve,reflect,best-of-n)")
    p.add_argument("--seeds", default="0", metavar="LIST", help="seeds, e.g. 0,1,2 or 0-4 (default 0)")
    p.add_argument("--budget", type=float, default=20, metavar="N",
                   help="per run: evaluations (programs), student calls (prompts), experiments (training); default 20")
    p.add_argument("--model", default="claude-sonnet-4-6", metavar="M", help="the model of every method")
    p.add_argument("--base-url", metavar="URL", help="model endpoint")
    p.add_argument("--price-in", type=float, metavar="USD", help="USD per million input tokens (unlisted models)")
    p.add_argument("--price-out", type=float, metavar="USD", help="USD per million output tokens")
    p.add_argument("--parallelism", type=int, default=2, metavar="N", help="runs at once (default 2)")
    p.add_argument("--max-turns", type=int, metavar="N", help="the agent's model turns per run")
    p.add_argument("--executor", default="local", metavar="local|ray[=ADDRESS]", help="where runs go (default local)")
    p.add_argument("--store", metavar="URL", help="run store (default: the run directory)")
    p.add_argument("--run-dir", default="runs", metavar="D", help="workspaces of agent runs (default ./runs)")
    p.add_argument("--id", metavar="FLEET_ID", help="an explicit fleet id; an existing one is continued (resume)")
    p.add_argument("--json", metavar="PATH", help="also write the comparison's numbers as JSON")
    p.add_argument(
        "-o", "--output", default="compare.html", metavar="FILE", help="the HTML report (default compare.html)"
    )
    p.add_argument("-p", "--param", action="append", default=[], metavar="[TASK:]KEY=VALUE",
                   help="task parameter (repeatable); without TASK: for every task")
    p.add_argument("--student", metavar="MODEL", help="prompt tasks: the student, openai/NAME or anthropic/NAME")
    p.add_argument("--student-base-url", metavar="URL", help="prompt tasks: the student's endpoint")
    p.add_argument("--quiet", action="store_true", help="no live table")
    add_track_arg(p)
    p.set_defaults(func=cmd_compare)


def _title(task: dict[str, Any]) -> str:
    """Whether and where the task is ranked: at the spend every run reached, or why not."""
    matched = task.get("spend_matched") or {}
    if task["ranked"]:
        return f"ranked at equal spend: best after {matched.get('k_equal', 0):g} {task['unit']}"
    why = task["budget_check"]["why"] or f"a run spent no {task['unit']}"
    return "NOT RANKED: " + why


def final_table(task: dict[str, Any], reference: str, note: str | None = None) -> Table:
    from reasearch.reports.compare_methods import under_cap_text

    t = Table(title=f"{task['task_id']} ({task['direction']}; budget {task['unit']}; {_title(task)})")
    cols = ("method", "rank", "runs", "best @ equal spend", "mean best", "std", "min", "max",
            f"gain vs {reference} [95% CI]", f"W/T/L vs {reference}", "Cliff's delta", "spent", "stopped",
            "INVALID", "TIMEOUT", "CRASH", "REFUSED")
    for col in cols:
        t.add_column(col)
    for r in task["table"]:
        v = r["vs_reference"]
        gain = "reference" if v is None else ("-" if not v["pairs"] else
                                              f"{v['mean_gain']:+.4g} [{v['ci95'][0]:+.4g}, {v['ci95'][1]:+.4g}]")
        wtl, delta = wins_ties_losses(v)
        f = r["failures"]
        t.add_row(r["method"], str(r.get("rank", "-")), str(r["runs"]), _fmt(r.get("at_equal_spend")), _fmt(r["mean"]),
                  _fmt(r["std"]), _fmt(r["min"]), _fmt(r["max"]), gain, wtl, delta, f"{r['spent']:g}",
                  under_cap_text(r), str(f["INVALID"]), str(f["TIMEOUT"]), str(f["CRASH"]), str(f["REFUSED"]))
    rest = len(cols) - 5  # the columns after "mean best"
    if task.get("published"):
        t.add_row(f"published best known ({task['published']['source']})", "-", "-", "-",
                  _fmt(task["published"]["best_known"]), *["-"] * rest)
    refs = task.get("references", [])
    for ref in refs:
        t.add_row(escape(reference_method(ref)), "published", "-", "-", reference_value(ref), *["-"] * rest)
    captions = []
    if refs:
        captions.append("Reference rows are published, not measured here: " + "; ".join(map(reference_label, refs)))
    if note:
        captions.append(note)
    if captions:
        t.caption = "\n".join(captions)
        t.caption_justify = "left"
    return t


def wins_ties_losses(v: dict[str, Any] | None) -> tuple[str, str]:
    """``("W/T/L", "Cliff's delta")`` cells of a row's ``vs_reference`` (``-`` for the reference or no pair)."""
    if not v or not v.get("pairs"):
        return "-", "-"
    return f"{v['wins']}/{v['ties']}/{v['losses']}", f"{v['cliffs_delta']:+.2f}"


def reference_label(ref: dict[str, Any]) -> str:
    """A reference row's source, budget and note, for the table's caption."""
    note = f"; {ref['note']}" if ref.get("note") else ""
    return escape(f"{ref['method']} ({ref['source']}; budget: {ref['budget']}{note})")


def reference_value(ref: dict[str, Any]) -> str:
    """A reference row's score cell: the figure when it is in the task's score, ``-`` when it is another metric
    (that figure is in the row's method cell, ``reference_method``, never in a score column)."""
    from reasearch.reports.compare_methods import reference_cells

    return escape(reference_cells(ref)[0])


def reference_method(ref: dict[str, Any]) -> str:
    """A reference row's method cell: ``reference: METHOD``, with ``[METRIC = FIGURE: a metric, not the score]`` when
    the figure is another metric than the task's score."""
    from reasearch.reports.compare_methods import reference_cells

    metric = reference_cells(ref)[1]
    return f"reference: {ref['method']}" + (f" [{metric}]" if metric else "")


def task_params(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Per-task parameters from ``-p [TASK:]KEY=VALUE`` and, for prompt tasks, ``--student``."""
    from reasearch._cli._params import key_values
    from reasearch._cli._shared import student_params, task_ref
    from reasearch.errors import ConfigError
    from reasearch.evaluators.kinds import PromptKind, task_kind
    from reasearch.evaluators.registry import build_task

    out: dict[str, dict[str, Any]] = {t: {} for t in args.tasks}
    for item in args.param:
        head, sep, rest = item.partition(":")
        head = task_ref(head) if sep and "=" not in head else head
        targets = [head] if sep and "=" not in head else list(args.tasks)
        if sep and "=" not in head and head not in out:
            raise ConfigError(f"-p {item!r} names {head!r}, which is not one of the compared tasks")
        pair = rest if sep and "=" not in head else item
        for t in targets:
            out[t].update(key_values([pair]))
    student = student_params(args, "student_base_url")
    for t in args.tasks:
        if student and isinstance(task_kind(build_task(t, out[t])), PromptKind):
            out[t].update(student)
    return {t: p for t, p in out.items() if p}


def cmd_compare(args: argparse.Namespace) -> int:
    import os

    from reasearch._cli._shared import check_task_folders, task_ref
    from reasearch.fleets.compare import compare_spec, comparison, run_compare
    from reasearch.fleets.fleet import printable_line
    from reasearch.reports.compare_methods import write_compare_methods
    from reasearch.runs.store import MAX_FLEET_ID_LEN, check_id

    if args.id is not None:  # before anything is stored
        check_id(args.id, "fleet id", max_len=MAX_FLEET_ID_LEN)
    check_track(args)  # a missing tracker package: one line, exit 2, no fleet stored
    if args.track and args.id is None:  # the tracker follows the comparison's fleet by its id: name it now
        from reasearch.fleets.fleet import new_fleet_id

        args.id = new_fleet_id()
    kind, address = _executor(args.executor)
    args.tasks = [task_ref(t) for t in args.tasks]  # task folders by their absolute paths
    spec = compare_spec(args.tasks, [m.strip() for m in args.methods.split(",") if m.strip()],
                        seeds=_seeds(args.seeds), budget=args.budget, model=args.model, base_url=args.base_url,
                        price_in=args.price_in, price_out=args.price_out, parallelism=args.parallelism,
                        agent={"max_turns": args.max_turns} if args.max_turns else None, task_params=task_params(args))
    check_task_folders(spec.tasks, spec.task_params)  # a broken task folder: one line, exit 2, no fleet stored
    store = args.store or os.environ.get("REASEARCH_STORE") or args.run_dir
    console = Console(stderr=True)
    live: Live | None = None
    title = f"compare ({kind}): {len(spec.members())} runs"

    def on_update(rows: list[Any]) -> None:
        if live is not None:
            live.update(members_table(rows, title))
        elif not args.quiet:  # not a terminal (a pipe, a log): one line per member as it ends
            print_ended(rows, seen)

    seen: set[str] = set()
    if console.is_terminal and not args.quiet:
        live = Live(console=console, refresh_per_second=2)
        live.__enter__()
    try:
        with tracking(args, lambda: store, fleet_runs(args.id or "")):
            report = run_compare(spec, store=store, run_dir=args.run_dir, fleet_id=args.id, executor=kind,
                                 address=address, on_update=on_update)
    finally:
        if live is not None:
            live.__exit__(None, None, None)
    data = comparison(store, report.fleet_id, report=report)
    out = Console() if sys.stdout.isatty() else Console(width=320)  # a pipe or file gets whole rows (17 columns)
    for task in data["tasks"]:
        out.print(final_table(task, data["reference"], data.get("model_note")))
    path = write_compare_methods(data, args.output)
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    unfinished = [r for r in report.members if r.state != "finished"]
    for r in unfinished:  # each named with its reason: a resume retries exactly these
        print(f"not finished: member {r.member.index} {r.run_id} ({r.member.method}, {r.member.task_id}, seed "
              f"{r.member.seed}): {r.state}" + (f": {printable_line(r.reason)}" if r.reason else ""),
              file=sys.stderr)
    print(
        f"report: {path}\nfleet {report.fleet_id} ({report.wall_s:.1f} s); "
        + (f"{len(unfinished)} of {len(report.members)} runs did not finish; retry them with" if unfinished
           else "continue or resume with")
        + f": reasearch compare ... --id {report.fleet_id} --store {store}",
        file=sys.stderr,
    )
    return EXIT_OK if not unfinished else EXIT_FAILED


__all__ = ["add_parser"]
