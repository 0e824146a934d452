"""``reasearch test RUN``: the trusted side scores a prompt run's final prompt on the sealed test split.

Also the helpers the ``eval`` and ``optimize`` commands use for prompt tasks (``--student``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from reasearch.errors import ConfigError
from reasearch.evaluators.base import Task

EXIT_OK, EXIT_FAILED = 0, 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("test", help="score a prompt run's final prompt on the sealed test split",
                       description="Score the final prompt of a prompt-optimization run (gsm8k/v1, prompt/jsonl-v1) "
                                   "on the sealed test split, on the trusted side. Calls already made are served "
                                   "from the store for free. Exit 0 if scored, 1 if the test pass failed.")
    p.add_argument("run", metavar="RUN", help="run id (a unique prefix is enough)")
    from reasearch._cli.runs import _store_args  # the run store: only for this command, not for `eval`

    _store_args(p)
    p.add_argument("--prompt-file", metavar="FILE", help="score this prompt instead of the run's final one")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_test)


def is_prompt_task(task: Task) -> bool:
    return task.candidate_kind == "prompt"


def student_params(args: argparse.Namespace, base_url_attr: str = "base_url") -> dict[str, Any]:
    """Task parameters from ``--student`` and its base URL option (empty when not given)."""
    out: dict[str, Any] = {}
    if getattr(args, "student", None):
        out["student"] = args.student
        url = getattr(args, base_url_attr, None)
        if url:
            out["base_url"] = url
    return out


class ProgressCaller:
    """Calls a student client directly, advancing a rich progress bar per answered call."""

    def __init__(self, client: Any, progress: Progress, label: str) -> None:
        self.client, self.progress, self.label = client, progress, label

    def call_batch(self, requests: Sequence[Any]) -> list[Any]:
        from reasearch.evaluators.prompt import map_concurrently

        tid = self.progress.add_task(self.label, total=len(requests))

        def one(req: Any) -> Any:
            reply = self.client.complete(req)
            self.progress.advance(tid)
            return reply

        return map_concurrently(one, requests, self.client.spec.concurrency)


def progress_bar(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True, disable=not console.is_terminal)


def cmd_test(args: argparse.Namespace) -> int:
    from reasearch._cli.tasks import result_table
    from reasearch.runs.run import Run
    from reasearch.runs.students import prompt_task_of, score_test

    prompt = None
    if args.prompt_file:
        from reasearch._cli.tasks import _read_source

        prompt = _read_source(args.prompt_file)
    from reasearch._cli.runs import _open

    with _open(args) as store:
        run = Run.open(store, args.run)
        task = prompt_task_of(run)
        if not is_prompt_task(task):
            raise ConfigError(f"run {run.id} is not a prompt run")
        cid, result = score_test(run, prompt=prompt)
    if args.json:
        print(json.dumps({"run_id": run.id, "candidate": cid, "split": "test", "result": result.to_dict()}, indent=2))
    else:
        Console().print(result_table(f"{run.task_id} test split, run {run.id}, prompt {cid[:12]}", result, None))
    return EXIT_OK if result.ok else EXIT_FAILED
