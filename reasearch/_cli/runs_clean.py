"""``reasearch runs delete RUN...`` and ``reasearch runs prune --empty``: remove runs from a store.

A run a live driver holds (on this host: its process is there, whatever its heartbeat's age; elsewhere:
it beat within the staleness window, see :func:`reasearch.runs.run.live_drivers`) is never removed, not
even with ``--force``. ``delete`` refuses a run that holds evaluations or paid work (any ledger row: model
calls, tokens, dollars, student calls) unless ``--force``; ``prune --empty`` removes only runs with no
evaluation and no ledger row of any unit (what a down endpoint or a refused start leaves): a run that
paid for anything is not empty, and deleting it would make a resume pay again.
A run's folder (``<run dir>/<run id>``: workspace, transcripts) goes with it when the store lives in that run directory.

Trust boundary: run ids come from the user; folders are removed only when their name is exactly a
stored run id directly under the run directory, and never through a symlink.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

from reasearch._cli._shared import open_store
from reasearch.errors import ConfigError, StoreError
from reasearch.runs.run import live_drivers
from reasearch.runs.store import Store


def add_subcommands(p: argparse.ArgumentParser, store_args: Any) -> None:
    sub = p.add_subparsers(dest="runs_command", metavar="SUBCOMMAND")
    d = sub.add_parser("delete", help="remove runs (and their folders) from the store",
                       description="Remove runs and everything recorded under them. Refuses a run a live driver "
                                   "holds, and a run with evaluations or paid work unless --force.")
    d.add_argument("run_ids", nargs="+", metavar="RUN", help="run id (a unique prefix is enough)")
    d.add_argument("--force", action="store_true", help="also delete runs that hold evaluations or paid work")
    store_args(d)
    d.set_defaults(func=cmd_delete)
    pr = sub.add_parser("prune", help="remove the runs that never evaluated or paid for anything",
                        description="Remove the runs with no evaluation and no ledger row of any unit (a failed "
                                    "start, a down endpoint), except runs a live driver holds.")
    pr.add_argument("--empty", action="store_true", required=True,
                    help="runs with no evaluation and nothing paid (required)")
    pr.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    store_args(pr)
    pr.set_defaults(func=cmd_prune)


def _run_dir(args: argparse.Namespace) -> Path | None:
    """The run directory whose ``<run id>`` folders belong to this store (None for a store URL)."""
    import os

    from reasearch.runs.store import DEFAULT_RUN_DIR

    if getattr(args, "store", None):
        return None
    path = getattr(args, "run_dir", None) or Path(os.environ.get("REASEARCH_STORE", str(DEFAULT_RUN_DIR)))
    return Path(path) if Path(path).is_dir() else None


def _remove(store: Store, run_id: str, run_dir: Path | None) -> None:
    store.delete_run(run_id)
    if run_dir is None:
        return
    folder = run_dir / run_id
    if folder.is_dir() and not folder.is_symlink() and folder.parent.resolve() == run_dir.resolve():
        shutil.rmtree(folder, ignore_errors=True)


def _refusal(store: Store, run_id: str, force: bool) -> str:
    live = live_drivers(store, run_id)
    if live:
        d = live[0]
        return f"run {run_id} is held by a live driver (pid {d.pid} on {d.host}); stop it first"
    n = len(store.evaluations(run_id))
    if n and not force:
        return f"run {run_id} holds {n} evaluations; pass --force to delete it anyway"
    paid = len(store.ledger(run_id))
    if paid and not force:
        return f"run {run_id} holds {paid} ledger rows of paid work; pass --force to delete it anyway"
    return ""


def _empty(store: Store, run_id: str) -> bool:
    """No evaluation and no ledger row of any unit (a paid model call is work a resume would pay again)."""
    return not store.evaluations(run_id) and not store.ledger(run_id)


def cmd_delete(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        ids = []
        for given in args.run_ids:
            try:
                ids.append(store.get_run(given).id)
            except StoreError as exc:
                raise ConfigError(str(exc)) from None
        for run_id in ids:  # every refusal before anything is removed
            why = _refusal(store, run_id, args.force)
            if why:
                raise ConfigError(why + "; nothing was deleted")
        run_dir = _run_dir(args)
        for run_id in dict.fromkeys(ids):
            _remove(store, run_id, run_dir)
            print(f"deleted run {run_id}", file=sys.stderr)
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        empty = [r.id for r in store.list_runs() if _empty(store, r.id) and not live_drivers(store, r.id)]
        run_dir = _run_dir(args)
        for run_id in empty:
            if not args.dry_run:
                _remove(store, run_id, run_dir)
            print(f"{'would delete' if args.dry_run else 'deleted'} run {run_id} (no evaluation, nothing paid)",
                  file=sys.stderr)
        if not empty:
            print("no run without evaluations and paid work", file=sys.stderr)
    return 0
