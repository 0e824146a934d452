"""``reasearch bench``: the main job on embedded defaults (engine and task figures, one run)."""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from reasearch._bench import SECTIONS, BenchRow


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure engine and evaluator speed against references",
                       description="Measure engine and evaluator speed side by side with references.")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE")
    p.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    p.add_argument("--section", action="append", metavar="NAME",
                   help="run only these sections (repeatable): " + ", ".join(s.rsplit(".", 1)[1] for s in SECTIONS))
    p.set_defaults(func=run)


def _fmt(x: float | None) -> str:
    if x is None:
        return ""
    if x != x:  # NaN: not measured (the row's note says why)
        return "-"
    return f"{x:.4g}"


def run(args: argparse.Namespace) -> int:
    console = Console(stderr=False)
    if not console.is_terminal:  # a log or pipe: do not fold the table into an 80-column strip
        console = Console(stderr=False, width=180)
    wanted = [s for s in SECTIONS if not args.section or s.rsplit(".", 1)[1] in args.section]
    if args.section and not wanted:
        from reasearch.errors import ConfigError

        raise ConfigError(f"no bench section among {args.section}; known: {[s.rsplit('.', 1)[1] for s in SECTIONS]}")
    rows: list[BenchRow] = []
    with Progress(console=console, transient=True) as progress:
        bar = progress.add_task("benchmarking", total=len(wanted))
        for name in wanted:
            progress.update(bar, description=f"bench: {name.rsplit('.', 1)[1]}")
            rows.extend(importlib.import_module(name).run(quick=args.quick))
            progress.advance(bar)
    table = Table(title="reasearch bench")
    for col in ("section", "figure", "value", "unit", "reference", "ratio", "goal", "met"):
        table.add_column(col)
    for r in rows:
        met = "" if r.met is None else ("yes" if r.met else "NO")
        ref = f"{r.reference} {_fmt(r.reference_value)}".strip()
        table.add_row(r.section, r.name, _fmt(r.value), r.unit, ref, _fmt(r.ratio), r.goal, met)
    console.print(table)
    for r in rows:
        if r.note:
            console.print(
                f"{r.section} / {r.name}: {r.note}", style="dim", markup=False, highlight=False
            )  # notes hold [extras]
    if args.json:
        Path(args.json).write_text(json.dumps([r.to_dict() for r in rows], indent=2))
        console.print(f"wrote {len(rows)} figures to {args.json}")
    return 0
