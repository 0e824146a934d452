"""``reasearch bench``: the main job on embedded defaults (engine and task figures, one run)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from reasearch._bench import (
    LEGEND,
    LONG_WHEN_NAMED,
    BenchRow,
    MissingExtra,
    on_each_row,
    run_section,
    section_names,
    summary,
    table,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure engine and evaluator speed against references",
                       description="Measure engine and evaluator speed side by side with references.")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE")
    p.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    p.add_argument("--section", action="append", metavar="NAME",
                   help="run only these sections (repeatable): " + ", ".join(section_names()))
    p.add_argument("--strict", action="store_true", help="exit 1 when any goal is not met (default: 0, and the "
                   "summary line names the missed goals)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    console = Console(stderr=False)
    if not console.is_terminal:  # a log or pipe: do not fold the table into an 80-column strip
        console = Console(stderr=False, width=180)
    wanted = [s for s in section_names() if not args.section or s in args.section]
    if args.section and not wanted:
        from reasearch.errors import ConfigError

        raise ConfigError(f"no bench section among {args.section}; known: {section_names()}")
    rows: list[BenchRow] = []
    err = Console(stderr=True)
    with Progress(console=err, transient=True) as progress:
        bar = progress.add_task("benchmarking", total=len(wanted))
        for i, name in enumerate(wanted, 1):
            where = f"bench: {name} ({i}/{len(wanted)})"
            progress.update(bar, description=where)

            def measured(row: BenchRow, where: str = where) -> None:
                verdict = "" if row.met is None else f" (goal {row.goal}: {'yes' if row.met else 'NO'})"
                if err.is_terminal:
                    progress.update(bar, description=f"{where}: {row.name}")
                else:  # a log: one line per figure, as it is measured
                    print(f"{where}: {row.name} = {row.value:.4g} {row.unit}{verdict}", file=sys.stderr, flush=True)

            with on_each_row(measured):
                # A section that runs for hours in full (the chaos soak) is short unless named with --section.
                quick = args.quick or (name in LONG_WHEN_NAMED and not args.section)
                try:
                    rows.extend(run_section(name, quick=quick))
                except MissingExtra as exc:  # named with --section: an error; in a plain run, said and skipped
                    if args.section:
                        raise
                    print(f"{where}: skipped: {exc}", file=sys.stderr, flush=True)
            progress.advance(bar)
    console.print(table(rows))
    for r in rows:
        if r.note:
            console.print(
                f"{r.section} / {r.name}: {r.note}", style="dim", markup=False, highlight=False
            )  # notes hold [extras]
    console.print(LEGEND, markup=False, highlight=False)
    console.print(summary(rows), markup=False, highlight=False)
    if args.json:
        Path(args.json).write_text(json.dumps([r.to_dict() for r in rows], indent=2))
        console.print(f"wrote {len(rows)} figures to {args.json}")
    missed = any(r.met is False for r in rows)
    return 1 if missed and args.strict else 0
