"""``reasearch runs``, ``reasearch show RUN`` and ``reasearch export RUN [-o FILE]`` (JSON): read a run store."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from reasearch._cli._shared import open_store, store_args, sub_store_args
from reasearch._cli.runs_clean import add_subcommands
from reasearch.errors import ConfigError, ReasearchError
from reasearch.evaluators.scores import heldout_text
from reasearch.evaluators.training import heldout_public_of
from reasearch.runs.display import age_text, budget_text, duration_text
from reasearch.runs.ledger import Budget, Unit
from reasearch.runs.run import Run, active_seconds, effective_state
from reasearch.runs.store import Store


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("runs", help="list the runs in a run store",
                       description="List the runs in a run store: task, state, best score, budget.")
    store_args(p)
    p.add_argument("--json", action="store_true", help="print the runs as JSON")
    p.set_defaults(func=cmd_runs)
    add_subcommands(p, sub_store_args)  # runs delete RUN..., runs prune --empty

    p = sub.add_parser("show", help="summary of one run: budget, best candidate, ledger",
                       description="Show one run: its status, budget used and left, best candidate and ledger.")
    p.add_argument("run", metavar="RUN", help="run id (a unique prefix is enough)")
    store_args(p)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("export", help="dump everything stored about one run, or write it to MLflow or W&B",
                       description="Export one run (record, status, candidates, evaluations, ledger, events) as "
                                   "JSON, or with --to, to an experiment tracker: parameters, spend, the curve (one "
                                   "metric step per evaluation), the best candidate and the interventions.")
    p.add_argument("run", metavar="RUN", help="run id (a unique prefix is enough)")
    store_args(p)
    p.add_argument("--json", action="store_true",
                   help="export as JSON (the default format; accepted so scripts may say so)")
    p.add_argument("-o", "--output", type=Path, metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument("--to", metavar="mlflow|wandb", help="write the run to an experiment tracker instead (the "
                                                        "trackers extra: pip install 'reasearch[trackers]')")
    p.add_argument("--tracking-uri", metavar="URI", help="--to mlflow: where (default $MLFLOW_TRACKING_URI, "
                                                          "else ./mlruns, a file store)")
    p.add_argument("--experiment", metavar="NAME", help="--to mlflow: the experiment (default "
                                                        "$MLFLOW_EXPERIMENT_NAME, else reasearch)")
    p.add_argument("--project", metavar="NAME", help="--to wandb: the project (default $WANDB_PROJECT, else "
                                                     "reasearch; WANDB_MODE=offline writes a local run)")
    p.set_defaults(func=cmd_export)


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.10g}" if abs(x) >= 1e-3 or x == 0 else f"{x:.4e}"


def _store_flag(args: argparse.Namespace, store: Store) -> str:
    if args.store:
        return f"--store {args.store}"
    return f"--run-dir {args.run_dir}" if args.run_dir else ""


def resume_hint(record: Any, store_flag: str) -> str:
    """The command that continues a run whose driver died (by who drove it)."""
    from reasearch.runs.fleet_link import FleetLink

    tail = f" {store_flag}" if store_flag else ""
    link = FleetLink.from_config(record.config)
    if link is not None and link.member is not None:  # a fleet's member: the fleet resumes what its crash left
        return f"reasearch fleet resume {link.id}{tail}"
    driver = record.config.get("driver")
    if driver == "agent":
        return f"reasearch resume {record.id}{tail}"
    if driver == "method":
        return (f"from Python: reasearch.methods.open_method({record.id!r}, store=reasearch.runs.open_store(...), "
                f"takeover=True).optimize()")
    if driver is None:  # a sweep (reasearch.runs.sweep): the candidates it was given are not stored apart
        return (f"python -m reasearch.runs.sweep --run {record.id}{tail.replace('--run-dir', '--store')} "
                f"--sources FILE (FILE: the JSON list of candidate sources the sweep was started with)")
    return f"the program that drove it (driver {driver!r}) continues it: reasearch.runs.Run.open(store, {record.id!r})"


def cmd_runs(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        rows: list[dict[str, Any]] = []
        for rec in store.list_runs():
            run = Run(store, rec)
            try:
                st = run.status()
            except ReasearchError as exc:  # a run stored without a spec whose task can no longer be built
                print(f"reasearch: run {rec.id}: no best score ({exc})", file=sys.stderr)
                st = None
            used = dict(st.used) if st else store.usage(rec.id)
            caps = dict(st.caps) if st else Budget.from_dict(rec.budget).units()
            state = effective_state(store, rec)
            try:
                public = heldout_public_of(run.task)
            except (ReasearchError, ImportError, TypeError, ValueError):  # not buildable here: nothing to state
                public = None
            rows.append({"id": rec.id, "task_id": rec.task_id, "seed": rec.seed, "state": state.value,
                         "stored_state": rec.state.value,
                         "resume": resume_hint(rec, _store_flag(args, store)) if state.value == "interrupted" else None,
                         "best_score": st.best_score if st else None, "heldout_public": public,
                         "evaluations": st.evaluations if st else len(store.evaluations(rec.id)),
                         "budget": budget_text(used, caps),
                         "used": {u.value: v for u, v in used.items() if v},
                         "caps": {u.value: v for u, v in caps.items()},
                         "created_at": rec.created_at, "updated_at": rec.updated_at})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from reasearch._cli._tables import Column, fitted_table

    cols = [Column("run", 9), Column("task", 8), Column("seed", 2), Column("state", 7), Column("best", 6),
            Column("evals", 4), Column("budget used/cap", 3, prose=True), Column("last write", 1)]
    now = time.time()
    cells = [(r["id"], r["task_id"], str(r["seed"]), r["state"],
              _fmt(r["best_score"]) + (" (public held-out)" if r["heldout_public"] else ""), str(r["evaluations"]),
              r["budget"], age_text(now - r["updated_at"]) + " ago") for r in rows]
    console = Console()
    console.print(fitted_table(f"runs in {store.display_url}", cols, cells, console.width))
    for r in rows:
        if r["resume"] and r["stored_state"] == "running":
            console.print(f"run {r['id']}: its driver stopped (no heartbeat); resume with: {r['resume']}",
                          markup=False, highlight=False)
    return 0


def _summary(run: Run) -> dict[str, Any]:
    st = run.status()
    best = run.best()
    ledger = run.store.ledger(run.id)
    totals: dict[str, dict[str, float]] = {}
    for e in ledger:
        t = totals.setdefault(e.unit.value, {"entries": 0, "amount": 0.0})
        t["entries"] += 1
        t["amount"] += e.amount
    rec = run.store.get_run(run.id)
    record = rec.to_dict()
    record["stored_state"] = record["state"]
    record["state"] = effective_state(run.store, rec).value
    record["active_s"] = round(active_seconds(run.store, rec), 3)  # the report's and the summary's figure
    return {
        "run": record,
        "status": st.to_dict(),
        "best": None if best is None else {"candidate_id": best[0], "result": best[1].to_dict(),
                                           "source": run.candidate_source(best[0])},
        "ledger": totals,
        "interventions": _interventions(run),
    }


def _interventions(run: Run) -> list[dict[str, Any]]:
    """Every intervention sent to the run, with what followed each applied one (runs/steering.py)."""
    from reasearch.runs.steering import effects, history

    measured = {e.intervention.seq: e for e in effects(run.store, run.id)}
    return [{**i.to_dict(), "effect": measured[i.seq].to_dict() if i.seq in measured else None}
            for i in history(run.store, run.id)]


def cmd_show(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        run = Run.open(store, args.run)
        data = _summary(run)
        if data["run"]["state"] == "interrupted":
            data["resume"] = resume_hint(store.get_run(run.id), _store_flag(args, store))
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    console = Console()
    r, st = data["run"], data["status"]
    console.print(f"[bold]run {r['id']}[/bold]  task {r['task_id']}  seed {r['seed']}  state {r['state']}"
                  + (f"  ({r['reason']})" if r["reason"] else ""))
    if r["state"] == "interrupted":
        hint = data["resume"]
        why = "its driver stopped (no heartbeat)" if r["stored_state"] == "running" else "it was interrupted"
        console.print(f"{why}; resume with: {hint}", markup=False, highlight=False)
    table = Table(title="budget")
    for col in ("unit", "used", "cap", "left"):
        table.add_column(col)
    caps = Budget.from_dict(r["budget"]).units()
    for unit in Unit:
        used = st["used"][unit.value]
        if unit in caps or used:
            left = st["left"][unit.value]
            table.add_row(unit.value, f"{used:g}", "-" if unit not in caps else f"{caps[unit]:g}",
                          "-" if left is None else f"{left:g}")
    console.print(table)
    by_status = ", ".join(f"{k} {v}" for k, v in sorted(st["by_status"].items())) or "none"
    console.print(f"evaluations: {st['evaluations']} ({by_status}; cached {st['cached']}); "
                  f"since last improvement: {st['since_improvement']}; last step: {st['last_step']}; "
                  f"active wall time {duration_text(r['active_s'])}")
    ledger = ", ".join(f"{u}: {t['amount']:g} in {t['entries']} entries" for u, t in data["ledger"].items())
    console.print(f"ledger: {ledger or 'empty'}")
    best = data["best"]
    if best is None:
        console.print("best: none (no evaluation scored OK)")
    else:
        held_out = heldout_text(best["result"].get("metrics") or {})
        console.print(f"best: {_fmt(best['result']['score'])} (candidate {best['candidate_id'][:12]}, "
                      f"step {st['best_step']})" + (f"; {held_out}" if held_out else ""), markup=False)
        console.print(best["source"], markup=False, highlight=False)
    _print_interventions(console, data["interventions"])
    return 0


def _print_interventions(console: Console, rows: list[dict[str, Any]]) -> None:
    """One line per intervention: what, who, where it was applied and the scores around it."""
    if not rows:
        return
    from reasearch.runs.steering import Intervention

    console.print(f"interventions: {len(rows)}", highlight=False)
    for r in rows:
        i, e = Intervention.from_dict(r), r["effect"]
        line = f"  {i.describe()} at {i.at}, " + ("pending" if i.applied_step is None else f"step {i.applied_step}")
        if e is not None:
            line += (f"; best before {_fmt(e['score_before'])}, best of the next {e['evaluations_after']} "
                     f"evaluations {_fmt(e['best_after'])}")
            if e["twin_run"]:
                line += f"; unsteered twin {e['twin_run']}: {_fmt(e['twin_before'])} then {_fmt(e['twin_after'])}"
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def cmd_export(args: argparse.Namespace) -> int:
    if args.to is not None:
        return _export_to_tracker(args)
    for flag in ("tracking_uri", "experiment", "project"):
        if getattr(args, flag) is not None:
            raise ConfigError(f"--{flag.replace('_', '-')} goes with --to (mlflow or wandb)")
    with open_store(args) as store:
        run = Run.open(store, args.run)
        data = _summary(run)
        data["candidates"] = [c.to_dict() for c in store.candidates(run.id)]
        data["evaluations"] = [e.to_dict() for e in store.evaluations(run.id)]
        data["ledger_entries"] = [e.to_dict() for e in store.ledger(run.id)]
        data["events"] = [e.to_dict() for e in store.events(run.id)]
    text = json.dumps(data, indent=2)
    if args.output:
        args.output.write_text(text + "\n")
        print(f"wrote run {data['run']['id']} to {args.output}", file=sys.stderr)
    else:
        print(text)
    return 0


def _export_to_tracker(args: argparse.Namespace) -> int:
    from reasearch.reports.trackers import check_tracker, export_run

    if args.output is not None or args.json:
        raise ConfigError("--to writes to a tracker: leave out -o and --json (they are for the JSON export)")
    check_tracker(args.to)  # unknown, or its package missing: one line, exit 2
    if args.to == "wandb" and (args.tracking_uri or args.experiment):
        raise ConfigError("--tracking-uri and --experiment are MLflow's; W&B takes --project")
    if args.to == "mlflow" and args.project:
        raise ConfigError("--project is W&B's; MLflow takes --tracking-uri and --experiment")
    options = ({"tracking_uri": args.tracking_uri, "experiment": args.experiment} if args.to == "mlflow"
               else {"project": args.project})
    with open_store(args) as store:
        where = export_run(store, args.run, args.to, **options)
    print(f"exported to {where}", file=sys.stderr)
    return 0


__all__ = ["add_parser", "cmd_runs", "cmd_show", "cmd_export"]
