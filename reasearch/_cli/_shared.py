"""What several subcommand modules of the CLI share, in one place: the run-store options and opening the
store they name, reading a candidate file, the standard result table, and the ``--student`` helpers of
prompt tasks.

The subcommand modules import this module and never each other, so no two of them form an import circle.
Only the standard library, ``rich`` (its console and tables) and the error types load with it: the run store is imported
inside the functions that need it, so ``reasearch tasks`` pays for no store. Trust boundary: none beyond
the CLI's own (a candidate file is read as text, never run here).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from reasearch.errors import ConfigError
from reasearch.evaluators.scores import heldout_text

if TYPE_CHECKING:
    from rich.progress import Progress

    from reasearch.evaluators.base import Task
    from reasearch.evaluators.result import EvalResult
    from reasearch.runs.store import Store

__all__ = ["store_args", "sub_store_args", "open_store", "read_source", "num", "result_table", "student_params",
           "ProgressCaller", "progress_bar", "check_task_folders", "task_ref"]


# ------------------------------------------------------------------------------------------- run store


def store_args(p: argparse.ArgumentParser) -> None:
    """Adds ``--run-dir DIR | --store URL`` to a command that reads or writes a run store."""
    from reasearch.runs.store import DEFAULT_RUN_DIR, STORE_FILENAME

    g = p.add_mutually_exclusive_group()
    g.add_argument("--run-dir", type=Path, metavar="DIR",
                   help=f"run directory holding {STORE_FILENAME} (default: $REASEARCH_STORE or ./{DEFAULT_RUN_DIR})")
    g.add_argument("--store", metavar="URL", help="store URL: postgresql://... or sqlite:///path")


def sub_store_args(p: argparse.ArgumentParser) -> None:
    """The store options of a ``runs`` subcommand (SUPPRESS: a value given before the subcommand stays)."""
    from reasearch.runs.store import DEFAULT_RUN_DIR, STORE_FILENAME

    g = p.add_mutually_exclusive_group()
    g.add_argument("--run-dir", type=Path, metavar="DIR", default=argparse.SUPPRESS,
                   help=f"run directory holding {STORE_FILENAME} (default: $REASEARCH_STORE or ./{DEFAULT_RUN_DIR})")
    g.add_argument("--store", metavar="URL", default=argparse.SUPPRESS, help="store URL: postgresql://... or sqlite:///path")


def open_store(args: argparse.Namespace) -> Store:
    """The store named on the command line; a missing SQLite store is an error, never created by a reader."""
    from reasearch.runs.store import DEFAULT_RUN_DIR, open_existing_store

    if args.store:
        target: str | Path = args.store
    else:
        target = args.run_dir or Path(os.environ.get("REASEARCH_STORE", str(DEFAULT_RUN_DIR)))
    return open_existing_store(target)


# ------------------------------------------------------------------------------------------- candidates


def read_source(path: str, task: Task | None = None) -> str:
    """The text of a candidate file; a folder, a missing file or non-UTF-8 bytes are one-line errors."""
    p = Path(path)
    if p.is_dir():
        from reasearch.evaluators.kinds import PromptKind, task_kind

        prompt = task is not None and isinstance(task_kind(task), PromptKind)
        what = "a system prompt (a text file)" if prompt else "one Python file"
        name = task.candidate_file if task is not None else "candidate.py"
        raise ConfigError(f"{path} is a folder, but a candidate of {task.spec.id if task else 'this task'} is {what}, "
                          f"e.g. {path.rstrip('/')}/{name}")
    if not p.is_file():
        raise ConfigError(f"no such candidate file: {path}")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


# ------------------------------------------------------------------------------------------- results


def num(x: float | None, digits: int = 12) -> str:
    """A score or metric for a table cell (empty for None)."""
    return "" if x is None else f"{x:.{digits}g}"


def _utc(epoch: float) -> str:
    if not (math.isfinite(epoch) and 0 <= epoch < 253402300800):  # before year 10000
        return num(epoch)
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


def _scalar_metrics(metrics: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The metrics that fit in a table cell (numbers, strings, booleans); nested data stays in --json."""
    out = []
    for key, value in metrics.items():
        if value is None:
            out.append((key, "-"))
        elif key.endswith("_at") and isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append((key, _utc(float(value))))  # a timestamp: a person reads a date, not epoch seconds
        elif isinstance(value, bool) or isinstance(value, int):
            out.append((key, str(value)))
        elif isinstance(value, float):
            out.append((key, num(value) if math.isfinite(value) else str(value)))
        elif isinstance(value, str):
            out.append((key, value))
    return out


def result_table(task_id: str, result: EvalResult, best_known: float | None) -> Table | Group:
    """The standard summary table of one evaluation."""
    colour = "green" if result.ok else "red"
    table = Table(title=f"{task_id}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    table.add_row("status", Text(result.status.value, style=colour))
    if result.ok:
        table.add_row("score", num(result.score))
        table.add_row("normalized", num(result.normalized_score, 6))
    if best_known is not None:
        table.add_row("best known", num(best_known))
    held_out = heldout_text(result.metrics)
    if held_out:
        table.add_row("held-out data", Text(held_out, style="red" if result.metrics.get("heldout_public") else ""))
    table.add_row("wall / cpu", f"{result.wall_s * 1e3:.1f} ms / {result.cpu_s * 1e3:.1f} ms")
    if result.provenance is not None:
        table.add_row("sandbox", result.provenance.sandbox_mode)
        table.add_row("seed", str(result.provenance.seed))
    metrics = _scalar_metrics(result.metrics)
    room = Console().width - 7 - max([len("best known"), *(len(k) for k, _ in metrics)])
    whole: list[Text] = []  # a hash or id too long for the value column: printed whole below the table
    for key, value in metrics:
        if len(value) > room and not any(c.isspace() for c in value):
            table.add_row(key, "(below the table)")
            whole.append(Text(f"{key}:\n  {value}", no_wrap=True, overflow="ignore"))
        else:
            table.add_row(key, value)
    table.add_row("feedback", result.feedback)
    return Group(table, *whole) if whole else table


# ------------------------------------------------------------------------------------------- prompt tasks


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
    """A transient bar of answered calls (imported here: only prompt tasks show one)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True, disable=not console.is_terminal)


def check_task_folders(task_ids: Sequence[str], params: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Runs the seed and score.py of every task folder among ``task_ids`` before anything is stored: a broken
    folder is one line naming the file and the line (exit 2), and no run is created."""
    from reasearch.evaluators.registry import is_folder_ref, make_folder_task

    for task_id in dict.fromkeys(task_ids):
        if is_folder_ref(task_id):
            make_folder_task(task_id, dict((params or {}).get(task_id) or {})).preflight()


def task_ref(text: str) -> str:
    """A task argument as a fleet stores it: a task folder by its absolute path (a resume from another directory,
    or a worker started elsewhere, finds the same folder), a registry id as given."""
    from reasearch.evaluators.registry import is_folder_ref

    return str(Path(text).expanduser().resolve()) if is_folder_ref(text) else text
