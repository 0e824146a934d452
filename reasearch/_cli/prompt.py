"""``reasearch test RUN``: the trusted side scores a prompt run's final prompt on the sealed test split.

The ``--student`` helpers the ``eval``, ``optimize`` and ``compare`` commands use live in ``_cli/_shared.py``.
"""

from __future__ import annotations

import argparse
import json

from rich.console import Console

from reasearch._cli._shared import open_store, read_source, result_table, store_args

EXIT_OK, EXIT_FAILED = 0, 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("test", help="score a prompt run's final prompt on the sealed test split",
                       description="Score the final prompt of a prompt-optimization run (gsm8k/v1, prompt/jsonl-v1) "
                                   "on the sealed test split, on the trusted side. Calls already made are served "
                                   "from the store for free. Exit 0 if scored, 1 if the test pass failed.")
    p.add_argument("run", metavar="RUN", help="run id (a unique prefix is enough)")
    store_args(p)
    p.add_argument("--prompt-file", metavar="FILE", help="score this prompt instead of the run's final one")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_test)


def cmd_test(args: argparse.Namespace) -> int:
    from reasearch.runs.prompt_splits import score_test  # a run of another kind: one line, exit 2
    from reasearch.runs.run import Run

    prompt = None
    if args.prompt_file:
        prompt = read_source(args.prompt_file)
    with open_store(args) as store:
        run = Run.open(store, args.run)
        cid, result = score_test(run, prompt=prompt)
    if args.json:
        print(json.dumps({"run_id": run.id, "candidate": cid, "split": "test", "result": result.to_dict()}, indent=2))
    else:
        Console().print(result_table(f"{run.task_id} test split, run {run.id}, prompt {cid[:12]}", result, None))
    return EXIT_OK if result.ok else EXIT_FAILED
