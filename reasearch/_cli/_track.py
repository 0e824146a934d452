"""``--track mlflow|wandb`` of ``optimize``, ``fleet run`` and ``compare``: log runs to a tracker as they go."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

TRACK_HELP = ("log the run(s) to an experiment tracker as they go: parameters, one metric step per evaluation, "
              "spend, the best candidate, interventions ($MLFLOW_TRACKING_URI, default ./mlruns; $WANDB_PROJECT, "
              "WANDB_MODE=offline for a local run); needs the trackers extra")


def add_track_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--track", metavar="mlflow|wandb", help=TRACK_HELP)


def check_track(args: argparse.Namespace) -> None:
    """An unknown tracker or a missing package: one line, exit 2, before anything runs."""
    if getattr(args, "track", None):
        from reasearch.reports.trackers import check_tracker

        check_tracker(args.track)


@contextlib.contextmanager
def tracking(args: argparse.Namespace, store_url: Callable[[], str],
             runs: Callable[[Any], Sequence[tuple[str, str, str]]]) -> Iterator[None]:
    """Follows ``runs(store)`` in a thread while the body runs (nothing without ``--track``)."""
    if not getattr(args, "track", None):
        yield
        return
    from reasearch.reports.trackers import LiveTracking

    live = LiveTracking(store_url(), args.track, runs).start()
    try:
        yield
    finally:  # a run that failed or was interrupted is logged as far as it went
        for where in live.stop():
            print(f"tracked: {where}", file=sys.stderr)
    for error in live.errors[:3]:
        print(f"tracker: {error}", file=sys.stderr)


def fleet_runs(fleet_id: str) -> Callable[[Any], list[tuple[str, str, str]]]:
    """A fleet's members that have a run, as ``(run id, fleet id, method)``."""

    def runs(store: Any) -> list[tuple[str, str, str]]:
        from reasearch.errors import FleetNotFoundError, RunNotFoundError
        from reasearch.fleets.fleet import FleetSpec

        try:
            spec = FleetSpec.from_dict(store.get_fleet(fleet_id))
        except FleetNotFoundError:  # not stored yet
            return []
        methods = {m.index: m.method for m in spec.members()}
        out = []
        for index, run_id in sorted(store.fleet_members(fleet_id).items()):
            try:
                store.get_run(run_id)
            except RunNotFoundError:  # a member reserved, its run not created yet
                continue
            out.append((run_id, fleet_id, methods.get(index, "agent")))
        return out

    return runs


__all__ = ["add_track_arg", "check_track", "tracking", "fleet_runs"]
