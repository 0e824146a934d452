"""``compare``: methods x tasks x seeds as one fleet on equal budgets, and the numbers of the comparison.

:func:`compare_spec` builds the fleet (every method gets the same per-run cap of its task's budget
unit: evaluations for programs, student calls for prompts, experiments for training tasks);
:func:`run_compare` runs it with the fleet machinery (live table, resume by fleet id, caps, Ray);
:func:`comparison` reads the store and computes what the report shows: best-so-far curves against
budget spent, dollars and wall time per run, a final table per task (mean, spread, a paired bootstrap
interval of each method against the agent over seeds), failures by status, each run's spend by unit,
the agent's tool mix, whether the budgets are equal (runs whose caps differ are not ranked, nor are a
task's runs when one of them did not finish), and each run that did not finish with its reason. Beside
each bootstrap interval: wins/ties/losses over the paired seeds and Cliff's delta (:func:`paired_stats`),
also for every pair of methods; beside the measured rows, the published reference rows of the task
(``references.json``: published, not measured here).

Equal caps are not equal spend: a method may stop before its cap (its stall rule, or its own loop's
end). Each run carries why it stopped and whether it spent its cap (``under_cap``); ranks are computed at
equal spend: each run's best score after ``k`` units, ``k`` = the smallest spend of the task's runs
(:func:`spend_matched`), and the spend-matched curve (mean best after k, every k up to that) is drawn.

Trust boundary: reads the store only (scores and feedback were decided by the trusted evaluators).
"""

from __future__ import annotations

import random
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reasearch.errors import ConfigError, RunNotFoundError
from reasearch.evaluators.kinds import RepositoryKind, task_kind
from reasearch.evaluators.registry import build_task
from reasearch.evaluators.training import heldout_public_of
from reasearch.fleets.fleet import (
    FleetReport,
    FleetSpec,
    MemberResult,
    check_method,
    fleet_report,
    fleet_report_in,
    run_fleet,
)
from reasearch.fleets.references import references_for
from reasearch.methods.peers import KINDS
from reasearch.runs import Run, Store, Unit, open_store
from reasearch.runs.run import effective_state

__all__ = ["DEMO_NOTE", "FAILURES", "TIE_RTOL", "best_after", "budget_unit", "compare_spec", "comparison",
           "comparison_in", "paired_stats", "run_compare", "spend_matched", "task_numbers"]

FAILURES = ("INVALID", "TIMEOUT", "OOM", "CRASH", "REFUSED")
BOOTSTRAP_RESAMPLES = 2000
TIE_RTOL = 1e-9
"""Two paired scores tie when they differ by at most ``TIE_RTOL * max(1, |a|, |b|)``."""
_TEST_NOTE = "test:"
DEMO_NOTE = ("demo model: an offline deterministic strategy (numeric perturbations, a fixed circle-packing layout), "
             "not an LLM")
_MAX_K = 200  # the spend-matched curve's points at most (a student-call budget may be thousands)


def budget_unit(task_id: str, task_params: Mapping[str, Any] | None = None) -> Unit:
    """The unit one evaluation of ``task_id`` mainly spends (its ``budget_estimate``'s first unit)."""
    task = build_task(task_id, dict(task_params or {}))
    return Unit(next(iter(task.budget_estimate()), Unit.EVALUATIONS))


def compare_spec(tasks: Sequence[str], methods: Sequence[str], *, seeds: Sequence[int], budget: float, model: str,
                 base_url: str | None = None, price_in: float | None = None, price_out: float | None = None,
                 parallelism: int = 2, agent: Mapping[str, Any] | None = None,
                 method_configs: Mapping[str, Mapping[str, Any]] | None = None,
                 task_params: Mapping[str, Mapping[str, Any]] | None = None) -> FleetSpec:
    """The fleet of a comparison: every method x task x seed with ``budget`` units of the task's unit.

    Raises:
        ConfigError: an unknown method, task or setting; a budget that allows nothing.
    """
    if budget <= 0:
        raise ConfigError(f"--budget must be above 0, not {budget:g}")
    methods = list(dict.fromkeys(methods))
    if not methods:
        raise ConfigError("give at least one method, e.g. --methods agent,evolve")
    for m in methods:
        check_method(m, (method_configs or {}).get(m))
    params = {t: dict(p) for t, p in (task_params or {}).items()}
    baselines = [m for m in methods if not m.startswith("agent")]
    for t in tasks:
        kind = task_kind(build_task(t, params.get(t, {})))
        if baselines and isinstance(kind, RepositoryKind):
            raise ConfigError(f"{t} is a {kind.name} task: the baselines {baselines} drive program and prompt tasks "
                              "only; compare the agent and its ablations on it")
        for m in (m for m in methods if KINDS.get(m, kind.name) != kind.name):
            raise ConfigError(f"{t} is a {kind.name} task: {m} optimizes {KINDS[m]} tasks only; leave it out for {t}")
    budgets = {t: {budget_unit(t, params.get(t)).value: float(budget)} for t in tasks}
    return FleetSpec(tasks=tuple(tasks), seeds=tuple(seeds), models=(model,), methods=tuple(methods),
                     budget=next(iter(budgets.values())), task_budgets=budgets, parallelism=parallelism,
                     agent=dict(agent or {}), base_url=base_url, price_in=price_in, price_out=price_out,
                     method_configs=dict(method_configs or {}), task_params=params)


def run_compare(spec: FleetSpec, *, store: str, run_dir: str = "runs", fleet_id: str | None = None,
                executor: str = "local", address: str | None = None,
                on_update: Callable[[list[MemberResult]], None] | None = None) -> FleetReport:
    """Runs (or, with an existing ``fleet_id``, continues) the comparison fleet."""
    return run_fleet(spec, store=store, run_dir=run_dir, fleet_id=fleet_id, executor=executor, address=address,
                     on_update=on_update)


# ---------------------------------------------------------------- the numbers
def _run_data(store: Store, member: Any, run_id: str) -> dict[str, Any]:
    rec = store.get_run(run_id, exact=True)
    run = Run(store, rec)
    spec = run.task.spec
    unit = run.eval_unit
    # The trusted side's sealed test pass (prompt tasks) is debited (notes "test:", or "shared:" for calls another
    # run paid) at the step of its test_result event, but it is not the optimizer's spend.
    tests = store.events(run_id, kind="test_result")
    test_steps = {int(e.step) for e in tests}
    ledger = sorted((e for e in store.ledger(run_id) if not e.note.startswith(_TEST_NOTE) and e.step not in test_steps),
                    key=lambda e: e.step)
    used: dict[str, float] = {}
    for e in ledger:
        used[e.unit.value] = used.get(e.unit.value, 0.0) + e.amount
    points = []
    for ev in store.evaluations(run_id):
        spent = sum(e.amount for e in ledger if e.unit is unit and e.step <= ev.step)
        dollars = sum(e.amount for e in ledger if e.unit is Unit.DOLLARS and e.step <= ev.step)
        score = ev.result.score if ev.result.status.value == "OK" else None
        points.append({"step": ev.step, "spent": spent, "dollars": dollars,
                       "wall_s": max(0.0, ev.created_at - rec.created_at), "status": ev.result.status.value,
                       "score": float(score) if score is not None else None, "cached": ev.result.cached})
    st = run.status()
    test_score = tests[-1].payload.get("result", {}).get("score") if tests else None
    finals = store.events(run_id, kind="final")
    stop_reason = str((finals[-1].payload.get("stop_reason") if finals else None) or rec.reason or "")
    cap = rec.budget.get(unit.value)
    needed = float(run.evaluation_estimate().get(unit, 1.0))
    spent_unit = used.get(unit.value, 0.0)
    under_cap = cap is not None and float(cap) - spent_unit >= needed - 1e-9  # it could have paid one more
    return {
        "run_id": run_id, "task_id": rec.task_id, "task_ref": member.task_id, "method": member.method,
        "seed": member.seed,
        "model": member.model, "state": effective_state(store, rec).value, "reason": rec.reason, "unit": unit.value,
        "direction": spec.direction, "best_known": spec.best_known, "best_known_source": spec.best_known_source,
        "caps": dict(rec.budget), "used": {u: v for u, v in used.items() if v},
        "best_score": st.best_score, "test_score": test_score, "points": points,
        "stop_reason": stop_reason, "under_cap": bool(under_cap),
        "heldout_public": heldout_public_of(run.task), "task_params": dict(spec.params),
        "trust": run.task.trust_note or None,
        "failures": dict(Counter(p["status"] for p in points if p["status"] in FAILURES)),
        "tool_mix": dict(Counter(str(e.payload.get("name")) for e in store.events(run_id, kind="tool_call"))),
    }


def _better_sign(direction: str) -> float:
    return 1.0 if direction == "maximize" else -1.0


def paired_bootstrap(diffs: Sequence[float], *, seed: int = 0,
                     resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float] | None:
    """A 95% percentile interval of the mean of paired differences (None with no pair)."""
    if not diffs:
        return None
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(statistics.fmean(rng.choices(diffs, k=n)) for _ in range(resamples))
    return means[int(0.025 * (resamples - 1))], means[int(0.975 * (resamples - 1))]


def _tied(a: float, b: float) -> bool:
    return abs(a - b) <= TIE_RTOL * max(1.0, abs(a), abs(b))


def paired_stats(mine: Mapping[int, float], theirs: Mapping[int, float], direction: str) -> dict[str, Any]:
    """Wins, ties and losses of ``mine`` against ``theirs`` over the seeds both have, and Cliff's delta.

    A seed is a win when ``mine`` is better in ``direction`` by more than the tie tolerance (:data:`TIE_RTOL`),
    a tie within it. Cliff's delta, over the same paired seeds' scores x (mine) and y (theirs), n of each:
    ``(#{(i, j): x_i better than y_j} - #{(i, j): x_i worse than y_j}) / n**2``, with the same tolerance;
    it lies in [-1, 1] and is None with no pair.
    """
    sign = _better_sign(direction)
    seeds = sorted(set(mine) & set(theirs))
    wins = ties = losses = 0
    for s in seeds:
        a, b = mine[s], theirs[s]
        if _tied(a, b):
            ties += 1
        elif sign * (a - b) > 0:
            wins += 1
        else:
            losses += 1
    xs, ys = [mine[s] for s in seeds], [theirs[s] for s in seeds]
    above = sum(1 for x in xs for y in ys if not _tied(x, y) and sign * (x - y) > 0)
    below = sum(1 for x in xs for y in ys if not _tied(x, y) and sign * (x - y) < 0)
    delta = (above - below) / len(seeds) ** 2 if seeds else None
    return {"pairs": len(seeds), "wins": wins, "ties": ties, "losses": losses, "cliffs_delta": delta}


def _pairwise(runs: list[dict[str, Any]], methods: Sequence[str], direction: str) -> list[dict[str, Any]]:
    """:func:`paired_stats` and the bootstrap interval of every ordered pair of distinct methods."""
    sign = _better_sign(direction)
    best = {m: {r["seed"]: r["best_score"] for r in runs if r["method"] == m and r["best_score"] is not None}
            for m in methods}
    out = []
    for a in methods:
        for b in methods:
            if a == b:
                continue
            diffs = [sign * (best[a][s] - best[b][s]) for s in sorted(set(best[a]) & set(best[b]))]
            ci = paired_bootstrap(diffs)
            out.append({"method": a, "versus": b, **paired_stats(best[a], best[b], direction),
                        "mean_gain": statistics.fmean(diffs) if diffs else None, "ci95": list(ci) if ci else None})
    return out


def _task_table(runs: list[dict[str, Any]], methods: Sequence[str], reference: str) -> list[dict[str, Any]]:
    direction = runs[0]["direction"]
    sign = _better_sign(direction)
    ref = {r["seed"]: r["best_score"] for r in runs if r["method"] == reference and r["best_score"] is not None}
    rows = []
    for method in methods:
        mine = [r for r in runs if r["method"] == method]
        vals = [r["best_score"] for r in mine if r["best_score"] is not None]
        diffs = [sign * (r["best_score"] - ref[r["seed"]]) for r in mine
                 if r["best_score"] is not None and r["seed"] in ref]
        ci = paired_bootstrap(diffs) if method != reference else None
        failures: Counter[str] = Counter()
        for r in mine:
            failures.update(r["failures"])
        rows.append({"method": method, "runs": len(mine), "scored": len(vals),
                     "mean": statistics.fmean(vals) if vals else None,
                     "std": statistics.stdev(vals) if len(vals) > 1 else (0.0 if vals else None),
                     "min": min(vals) if vals else None, "max": max(vals) if vals else None,
                     "vs_reference": None if method == reference else {
                         "pairs": len(diffs), "mean_gain": statistics.fmean(diffs) if diffs else None,
                         "ci95": list(ci) if ci else None,
                         **paired_stats({r["seed"]: r["best_score"] for r in mine if r["best_score"] is not None},
                                        ref, direction)},
                     "failures": {k: failures.get(k, 0) for k in FAILURES},
                     "under_cap": [{"seed": r["seed"], "spent": r["used"].get(r["unit"], 0.0),
                                    "cap": r["caps"].get(r["unit"]), "stop_reason": r.get("stop_reason", "")}
                                   for r in mine if r.get("under_cap")],
                     "evaluations": sum(len(r["points"]) for r in mine),
                     "spent": sum(r["used"].get(r["unit"], 0.0) for r in mine),
                     "dollars": sum(r["used"].get("dollars", 0.0) for r in mine)})
    return rows


def rank_rows(table: list[dict[str, Any]], direction: str, key: str = "mean") -> None:
    """Sets ``rank`` on each row with a ``key`` value: 1 is best in ``direction``; ties share a rank (1, 2, 2, 4)."""
    sign = _better_sign(direction)
    scored = [r for r in table if r.get(key) is not None]
    for row in scored:  # means within a rounding error of each other (the same scores averaged) are ties
        tol = 1e-12 * max(1.0, abs(row[key]))
        row["rank"] = 1 + sum(1 for o in scored if sign * (o[key] - row[key]) > tol)


def best_after(points: Sequence[Mapping[str, Any]], k: float, direction: str) -> float | None:
    """A run's best OK score among its evaluations made by the time it had spent ``k`` units (None: none)."""
    sign = _better_sign(direction)
    best: float | None = None
    for p in points:
        if p["spent"] <= k + 1e-9 and p["score"] is not None and (best is None or sign * p["score"] > sign * best):
            best = float(p["score"])
    return best


def spend_matched(runs: list[dict[str, Any]], methods: Sequence[str]) -> dict[str, Any]:
    """Every method's mean best score after ``k`` units, for each ``k`` up to the smallest spend of ``runs``.

    ``k_equal`` is that smallest spend (the spend every run reached); ``at_k[method]`` the mean over the
    method's runs (seeds) of the best after ``k_equal`` (None where a run had no OK score by then).
    """
    direction = runs[0]["direction"]
    k_equal = min(float(r["used"].get(r["unit"], 0.0)) for r in runs)
    n = int(k_equal)
    ks = [float(k) for k in range(1, n + 1)] if n <= _MAX_K else [k_equal * i / _MAX_K for i in range(1, _MAX_K + 1)]
    if ks and ks[-1] < k_equal:
        ks.append(k_equal)
    curves: dict[str, list[float | None]] = {}
    at_k: dict[str, float | None] = {}
    for method in methods:
        mine = [r for r in runs if r["method"] == method]
        if not mine:
            continue
        row: list[float | None] = []
        for k in [*ks, k_equal]:
            vals = [best_after(r["points"], k, direction) for r in mine]
            row.append(statistics.fmean(v for v in vals if v is not None) if all(v is not None for v in vals)
                       else None)  # a seed with nothing scored by k: no mean at k
        at_k[method] = row.pop()
        curves[method] = row
    return {"k_equal": k_equal, "k": ks, "curves": curves, "at_k": at_k}


def _budget_check(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Equal caps over the task's runs, no run past its cap of the budget unit, and every run finished
    (a run that failed or was interrupted did not get its budget)."""
    caps = {tuple(sorted(r["caps"].items())) for r in runs}
    over = [r["run_id"] for r in runs
            if r["used"].get(r["unit"], 0.0) > float(r["caps"].get(r["unit"], float("inf"))) + 1e-9]
    unfinished = [f"{r['run_id']} ({r['state']})" for r in runs if r.get("state", "finished") != "finished"]
    equal = len(caps) == 1 and not over and not unfinished
    why = ""
    if len(caps) > 1:
        why = "the runs' caps differ: " + "; ".join(", ".join(f"{k}={v:g}" for k, v in c) for c in sorted(caps))
    elif over:
        why = f"runs spent past their cap: {', '.join(over)}"
    elif unfinished:
        why = f"runs did not finish: {', '.join(unfinished)}"
    return {"equal": equal, "caps": [dict(c) for c in sorted(caps)], "why": why}


def task_numbers(runs: list[dict[str, Any]], methods: Sequence[str], reference: str) -> dict[str, Any]:
    """One task's budget check, table, spend-matched curve and ranks (at equal spend, equal caps only)."""
    check = _budget_check(runs)
    table = _task_table(runs, methods, reference)
    matched = spend_matched(runs, methods)
    for row in table:
        row["at_equal_spend"] = matched["at_k"].get(row["method"])
    ranked = check["equal"] and matched["k_equal"] > 0
    if ranked:  # ranks only when every run had the same caps, and at the spend every run reached
        rank_rows(table, runs[0]["direction"], key="at_equal_spend")
    return {"budget_check": check, "ranked": ranked, "table": table, "spend_matched": matched}


def comparison(store: str, fleet_id: str, *, reference: str = "agent",
               report: FleetReport | None = None) -> dict[str, Any]:
    """Everything the comparison report shows, as plain JSON data (see the module docstring).

    Args:
        store: the run store's URL or directory.
        fleet_id: the comparison's fleet.
        reference: the method every other is paired with (default ``agent``; the first method when
            the fleet has no agent).
        report: the fleet's report as :func:`run_compare` returned it (default: read from the store); it
            also knows a member that failed before its run was recorded.
    """
    report = report if report is not None else fleet_report(fleet_id, store=store)
    with open_store(store) as s:
        return _comparison(s, report, fleet_id, reference)


def comparison_in(store: Store, fleet_id: str, *, reference: str = "agent") -> dict[str, Any]:
    """:func:`comparison` from a store already open (the dashboard's fleet page), the report read from it.

    Raises:
        StoreError: no such fleet.
    """
    return _comparison(store, fleet_report_in(store, fleet_id), fleet_id, reference)


def _comparison(store: Store, report: FleetReport, fleet_id: str, reference: str) -> dict[str, Any]:
    spec = FleetSpec.from_dict(store.get_fleet(fleet_id))
    methods = list(spec.methods)
    if reference not in methods:
        reference = methods[0]
    runs = [_run_data(store, m.member, m.run_id) for m in report.members
            if m.state != "pending" and _has_run(store, m.run_id)]
    not_finished = [{"run_id": m.run_id, "task_id": m.member.task_id, "method": m.member.method,
                     "seed": m.member.seed, "state": m.state, "reason": m.reason}
                    for m in report.members if m.state != "finished"]
    tasks = []
    for ref in spec.tasks:
        # A task folder is stored by its path (the fleet's task) and runs under its spec's id (the run's task).
        mine = [r for r in runs if ref in (r["task_id"], r["task_ref"])]
        if not mine:
            continue
        first = mine[0]
        task_id = first["task_id"]
        tasks.append({"task_id": task_id, "direction": first["direction"], "unit": first["unit"],
                      **task_numbers(mine, methods, reference),
                      "heldout_public": first.get("heldout_public"), "trust": first.get("trust"),
                      "pairwise": _pairwise(mine, methods, first["direction"]),
                      "references": references_for(task_id, first.get("task_params")),
                      "published": ({"best_known": first["best_known"], "source": first["best_known_source"]}
                                    if first["best_known"] is not None else None)})
    demo = any(m == "demo" or m.startswith("demo/") for m in spec.models)
    return {"fleet_id": fleet_id, "methods": methods, "reference": reference, "seeds": list(spec.seeds),
            "models": list(spec.models), "model_note": DEMO_NOTE if demo else None, "tasks": tasks, "runs": runs,
            "not_finished": not_finished}


def _has_run(store: Store, run_id: str) -> bool:
    try:
        store.get_run(run_id, exact=True)
    except RunNotFoundError:  # a store that failed raises on: a member is never dropped from a report silently
        return False
    return True
