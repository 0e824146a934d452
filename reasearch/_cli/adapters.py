"""``reasearch export-evaluator``: writes the evaluator file another optimizer loads for a task.

Trusted side: checks the task exists and writes a small module that calls ``reasearch.adapters``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reasearch._cli._params import key_values
from reasearch.errors import ConfigError

_FORMATS = ("openevolve", "shinka")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export-evaluator",
        help="write an OpenEvolve evaluator.py or ShinkaEvolve evaluate.py for a task",
        description="Write the evaluator file another optimizer loads for TASK_ID: every candidate it "
        "proposes is evaluated by reasearch's sandboxed task; failures rank below every "
        "valid program. For GEPA use reasearch.adapters.gepa from Python (see docs/adapters.md).",
    )
    p.add_argument("task_id", metavar="TASK_ID", help="a program task, e.g. circle_packing/n26-v1")
    p.add_argument("--for", dest="fmt", required=True, choices=_FORMATS, help="the optimizer that loads the file")
    p.add_argument("-o", "--output", required=True, help="where to write it (evaluator.py / evaluate.py)")
    p.add_argument("--seed", type=int, default=0, help="seed handed to the task (default 0)")
    p.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                   help="task constructor parameter (repeatable); VALUE is parsed as JSON when it can be")
    p.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> int:
    params = key_values(args.param)
    if args.fmt == "openevolve":
        from reasearch.adapters.openevolve import evaluator_source
    else:
        from reasearch.adapters.shinka import evaluator_source
    from reasearch.evaluators.registry import is_folder_ref

    task_id = args.task_id
    if is_folder_ref(task_id):  # the file is loaded from the other optimizer's folder: name the task folder absolutely
        task_id = str(Path(task_id).expanduser().resolve())
    text = evaluator_source(task_id, params, seed=args.seed)
    out = Path(args.output)
    if out.is_dir():
        raise ConfigError(f"{out} is a folder; give a file name, e.g. {out / 'evaluator.py'}")
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} ({args.fmt} evaluator for {args.task_id})", file=sys.stderr)
    return 0
