"""The dashboard as a workbench (read-only part): the runs index grouped by task, fleet or method, and what a
run page and a fleet page add to the reports.

Index: one table per group (``?group=task|fleet|method``), each run with its state, best score, best score
normalized by the task's best known (1.0 = best known, higher is better in both directions: the fleets'
normalization, :meth:`TaskSpec.normalize`), a sparkline of its best so far, its evaluations, its spend against
its caps and its dollars. Filters are query parameters (``task`` a shell-style pattern on the task id,
``fleet``, ``method``, ``state``): validated, each at most :data:`MAX_FILTER_CHARS` characters; anything else
is a :class:`QueryError` (the server answers 400 with its one line).

Run page: the report page (live curves) plus the experiments running now, the lessons file as last
recorded, and an empty ``<section id="steer-panel">`` slot (the steering panel of ``reasearch serve --steer``).
Fleet page: the comparison of the fleet's members, the same page as ``reasearch compare`` writes.

Trust boundary: task ids, experiment descriptions, lessons and notes were written by a model or a candidate:
every string is escaped here (text, never markup); numbers are formatted from floats checked finite.
"""

from __future__ import annotations

import fnmatch
import glob
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from reasearch.errors import ReasearchError
from reasearch.evaluators import scores
from reasearch.evaluators.svg import esc
from reasearch.reports._model import RunView, cap_text, load_run
from reasearch.reports._sections import fmt_score, utc
from reasearch.reports.compare_methods import compare_methods_html
from reasearch.runs.display import age_text, budget_text
from reasearch.runs.events import EventKind
from reasearch.runs.store import RunState, Store

if TYPE_CHECKING:
    from reasearch.fleets.fleet import FleetSpec

__all__ = ["GROUPS", "FILTERS", "MAX_FILTER_CHARS", "IndexQuery", "QueryError", "parse_query", "workbench_rows",
           "index_html", "sparkline_svg", "run_extra_sections", "run_live_sections", "fleet_page_html",
           "STEERING_SLOT"]

GROUPS = ("task", "fleet", "method")
FILTERS = ("task", "fleet", "method", "state")
MAX_FILTER_CHARS = 200
_MAX_PARAMS = 16
_IGNORED = ("token",)  # the access guard's own parameter
_NO_FLEET = "(no fleet)"
_SPARK_W, _SPARK_H = 120, 22
STEERING_SLOT = ("<div id='steering-slot' class='muted' data-slot='steering'>steering: not enabled on this "
                 "dashboard (read only). The panel to steer a live run appears here with "
                 "<code>reasearch serve --steer</code>.</div>")


class QueryError(ReasearchError, ValueError):
    """A filter or grouping the index does not accept (its message is the one line the server answers)."""


@dataclass(frozen=True, slots=True)
class IndexQuery:
    """How the index groups and filters runs (all filters empty: every run)."""

    group: str = "task"
    task: str = ""  # shell-style pattern on the task id
    fleet: str = ""
    method: str = ""
    state: str = ""

    def matches(self, row: Mapping[str, Any]) -> bool:
        return ((not self.task or fnmatch.fnmatchcase(row["task_id"], self.task))
                and (not self.fleet or row["fleet"] == self.fleet)
                and (not self.method or row["method"] == self.method)
                and (not self.state or row["state"] == self.state))

    def link(self, **change: str) -> str:
        """The index URL (relative, a query string) of this query with ``change`` applied."""
        q = replace(self, **change)
        items = [(k, getattr(q, k)) for k in ("group", *FILTERS) if getattr(q, k) and not (k == "group" and
                                                                                          q.group == "task")]
        return "?" + urlencode(items) if items else "./"


def _short(text: str) -> str:
    """A value as an error line quotes it: at most 40 characters, on one line."""
    text = text.replace("\n", " ").replace("\r", " ")
    return text if len(text) <= 40 else text[:40] + "..."


def parse_query(items: Iterable[tuple[str, str]]) -> IndexQuery:
    """The index query of a request's parameters.

    Raises:
        QueryError: an unknown parameter, one given twice, a value too long, an unknown group or state.
    """
    seen: dict[str, str] = {}
    for n, (key, value) in enumerate(items):
        if n >= _MAX_PARAMS:
            raise QueryError(f"too many query parameters (at most {_MAX_PARAMS})")
        if key in _IGNORED:
            continue
        if key not in ("group", *FILTERS):
            raise QueryError(f"unknown parameter {_short(key)!r}: use group, {', '.join(FILTERS)}")
        if key in seen:
            raise QueryError(f"parameter {key!r} given twice")
        if len(value) > MAX_FILTER_CHARS:
            raise QueryError(f"{key} is {len(value)} characters long; at most {MAX_FILTER_CHARS}")
        seen[key] = value
    group = seen.pop("group", "") or "task"
    if group not in GROUPS:
        raise QueryError(f"group must be one of {', '.join(GROUPS)}, not {_short(group)!r}")
    state = seen.get("state", "")
    if state and state not in {s.value for s in RunState}:
        raise QueryError(f"state must be one of {', '.join(s.value for s in RunState)}, not {_short(state)!r}")
    return IndexQuery(group=group, **seen)


def _fleet_members(store: Store, specs: dict[str, FleetSpec]) -> dict[str, tuple[str, str]]:
    """Run id -> (fleet id, method) for every fleet member recorded in the store."""
    out: dict[str, tuple[str, str]] = {}
    fleets = store.list_fleets()
    if not fleets:
        return out
    from reasearch.fleets.fleet import FleetSpec  # the fleets' code only where a store has fleets

    for fleet_id, _created in fleets:
        if fleet_id not in specs:  # a fleet's spec never changes: read once
            try:
                specs[fleet_id] = FleetSpec.from_dict(store.get_fleet(fleet_id))
            except (ReasearchError, TypeError, ValueError, KeyError):
                continue
        methods = {m.index: m.method for m in specs[fleet_id].members()}
        for index, run_id in store.fleet_members(fleet_id).items():
            out[run_id] = (fleet_id, methods.get(index, "agent"))
    return out


def _method_of(view: RunView) -> str:
    config = view.record.config if isinstance(view.record.config, Mapping) else {}
    return str(config.get("method", "?")) if config.get("driver") == "method" else "agent"


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def _normalized(view: RunView, score: float | None, stored: float | None) -> float | None:
    if score is None:
        return None
    if stored is not None:
        return _finite(stored)
    spec = view.record.task_spec
    return _finite(spec.normalize(score)) if spec is not None else None


def _spark(view: RunView) -> tuple[list[float], str]:
    """The best so far after each evaluation: normalized when every scored evaluation has it, else the score."""
    ok = [p for p in view.points if p.score is not None]
    if ok and all(p.normalized is not None for p in ok):
        best = scores.running_best([_finite(p.normalized) for p in view.points], "maximize")
        kind = "normalized"
    else:
        best = scores.running_best([_finite(p.score) for p in view.points], view.direction)
        kind = "score"
    return [b for b in best if b is not None], kind


def _row(view: RunView, fleet: str, method: str) -> dict[str, Any]:
    rec, best = view.record, view.best
    score = None if best is None else _finite(best.result.score)
    spark, kind = _spark(view)
    return {
        "id": rec.id, "task_id": rec.task_id, "fleet": fleet, "method": method, "seed": rec.seed,
        "state": rec.state.value, "best_score": score,
        "normalized": _normalized(view, score, None if best is None else best.result.normalized_score),
        "spark": spark, "spark_kind": kind, "evaluations": len(view.evaluations),
        "budget": budget_text(dict(view.usage), dict(view.caps)), "dollars": float(view.usage.get("dollars", 0.0)),
        "updated_at": rec.updated_at, "created_at": rec.created_at,
    }


def workbench_rows(store: Store, cache: dict[str, tuple[Any, dict[str, Any]]] | None = None,
                   specs: dict[str, FleetSpec] | None = None) -> list[dict[str, Any]]:
    """One row of plain data per run of the store, oldest first.

    ``cache`` keeps a run's row until the run writes again (its state or ``updated_at`` changes, or it joins
    a fleet); ``specs`` keeps the fleets' specs.
    """
    cache = {} if cache is None else cache
    members = _fleet_members(store, {} if specs is None else specs)
    rows = []
    for rec in store.list_runs():
        fleet, method = members.get(rec.id, ("", ""))
        key = (rec.state.value, rec.updated_at, fleet)
        hit = cache.get(rec.id)
        if hit is None or hit[0] != key:
            view = load_run(store, rec.id)
            hit = (key, _row(view, fleet, method or _method_of(view)))
            cache[rec.id] = hit
        rows.append(hit[1])
    return rows


def sparkline_svg(values: Sequence[float], kind: str) -> str:
    """An inline SVG line of ``values`` (the best so far, one point per scored evaluation)."""
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return "<span class='sparkline-empty muted'>no score yet</span>"
    lo, hi = min(vals), max(vals)
    span = hi - lo or 1.0
    n = len(vals)
    pts = " ".join(f"{2 + (_SPARK_W - 4) * (i / (n - 1) if n > 1 else 0.5):.1f},"
                   f"{_SPARK_H - 2 - (_SPARK_H - 4) * ((v - lo) / span if hi > lo else 0.5):.1f}"
                   for i, v in enumerate(vals))
    label = f"best so far ({kind}): {fmt_score(vals[0])} to {fmt_score(vals[-1])} over {n} scored evaluations"
    return (f"<svg class='sparkline' data-points='{n}' data-kind='{esc(kind)}' width='{_SPARK_W}' "
            f"height='{_SPARK_H}' viewBox='0 0 {_SPARK_W} {_SPARK_H}' role='img' aria-label='{esc(label)}'>"
            f"<title>{esc(label)}</title><polyline fill='none' stroke='#4269d0' stroke-width='1.5' "
            f"points='{pts}'/></svg>")


def _filter_link(q: IndexQuery, key: str, value: str) -> str:
    target = glob.escape(value) if key == "task" else value  # a task id is matched as a pattern
    return f"<a class='filter-link' href='{esc(q.link(**{key: target}))}'>{esc(value or '-')}</a>"


def _group_key(row: Mapping[str, Any], group: str) -> str:
    return {"task": row["task_id"], "fleet": row["fleet"] or _NO_FLEET, "method": row["method"]}[group]


def _run_row(r: Mapping[str, Any], q: IndexQuery, now: float) -> str:
    norm = "-" if r["normalized"] is None else f"{r['normalized']:.4f}"
    fleet = _filter_link(q, "fleet", r["fleet"]) if r["fleet"] else "<span class='muted'>-</span>"
    return (f"<tr class='run' data-run-id='{esc(r['id'])}'>"
            f"<td><a class='run-link' href='run/{esc(quote(r['id']))}'><code>{esc(r['id'])}</code></a></td>"
            f"<td class='task'>{_filter_link(q, 'task', r['task_id'])}</td><td class='fleet'>{fleet}</td>"
            f"<td class='method'>{_filter_link(q, 'method', r['method'])}</td><td>{r['seed']}</td>"
            f"<td class='state-{esc(r['state'])}'>{esc(r['state'])}</td>"
            f"<td class='best'>{esc(fmt_score(r['best_score']))}</td><td class='normalized'>{norm}</td>"
            f"<td class='curve'>{sparkline_svg(r['spark'], r['spark_kind'])}</td>"
            f"<td class='evals'>{r['evaluations']}</td><td class='spend'>{esc(r['budget'])}</td>"
            f"<td class='dollars'>{r['dollars']:.4g}</td>"
            f"<td title='{esc(utc(r['updated_at']))}'>{esc(age_text(now - r['updated_at']) + ' ago')}</td></tr>")


_HEAD = ("<tr><th>run</th><th>task</th><th>fleet</th><th>method</th><th>seed</th><th>state</th><th>best</th>"
         "<th>normalized</th><th>best so far</th><th>evaluations</th><th>spend used/cap</th><th>dollars</th>"
         "<th>last activity</th></tr>")


def _filters_bar(q: IndexQuery, shown: int, total: int) -> str:
    groups = " ".join(f"<b class='group-by'>{g}</b>" if g == q.group else
                      f"<a class='group-by' href='{esc(q.link(group=g))}'>{g}</a>" for g in GROUPS)
    states = " ".join(f"<b>{s.value}</b>" if q.state == s.value else
                      f"<a class='state-filter' href='{esc(q.link(state=s.value))}'>{s.value}</a>" for s in RunState)
    active = " ".join(f"<span class='active-filter' data-filter='{k}'>{k}={esc(getattr(q, k))} "
                      f"<a href='{esc(q.link(**{k: ''}))}' title='remove this filter'>&#x2715;</a></span>"
                      for k in FILTERS if getattr(q, k))
    return (f"<div id='filters' class='small'>group by: {groups} · state: {states}"
            f"{' · filters: ' + active if active else ''} · {shown} of {total} runs</div>")


def index_html(rows: Sequence[Mapping[str, Any]], q: IndexQuery) -> str:
    """The filter bar and one table per group of the runs ``q`` selects (every string escaped)."""
    now = time.time()
    picked = [r for r in rows if q.matches(r)]
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in sorted(picked, key=lambda r: -r["created_at"]):
        groups.setdefault(_group_key(r, q.group), []).append(r)
    parts = []
    for key in sorted(groups):
        mine = groups[key]
        norms = [r["normalized"] for r in mine if r["normalized"] is not None]
        states = ", ".join(f"{n} {s}" for s, n in sorted(_count(r["state"] for r in mine).items()))
        best = f" · best normalized {max(norms):.4f}" if norms else ""
        fleet_link = (f" · <a class='fleet-page' href='fleet/{esc(quote(key))}'>comparison of its members</a>"
                      if q.group == "fleet" and key != _NO_FLEET else "")
        dollars = sum(r["dollars"] for r in mine)
        parts.append(
            f"<section class='group' data-group='{q.group}' data-key='{esc(key)}'><h2>{q.group} "
            f"<span class='group-name'>{esc(key)}</span> <span class='small muted'>{len(mine)} run(s) · {states}"
            f"{best} · {dollars:.4g} dollars</span>{fleet_link}</h2>"
            f"<table class='grid-table runs-table'>{_HEAD}{''.join(_run_row(r, q, now) for r in mine)}</table>"
            "</section>")
    body = "".join(parts) or "<p class='muted' id='no-runs'>no run matches these filters</p>"
    return f"{_filters_bar(q, len(picked), len(rows))}<div id='runs'>{body}</div>"


def _count(items: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out


def _experiments_html(view: RunView) -> str:
    """The experiments started and not ended (no ``experiment`` nor ``experiment_interrupted`` event yet)."""
    started = [e for e in view.events if e.kind == EventKind.EXPERIMENT_START]
    ended = {e.step for e in view.events if e.kind in (EventKind.EXPERIMENT, EventKind.EXPERIMENT_INTERRUPTED)}
    running = [e for e in started if e.step not in ended]
    if not started:
        return "<p class='muted' id='no-experiments'>no experiment started (only training tasks run experiments)</p>"
    rows = "".join(
        f"<tr class='experiment'><td>{e.step}</td><td>{esc(cap_text(e.payload.get('description', ''), 300))}</td>"
        f"<td>{esc(fmt_score(_finite(e.payload.get('time_budget_s'))))} s</td>"
        f"<td title='{esc(utc(e.ts))}'>{esc(age_text(view.read_at - e.ts))} ago</td></tr>" for e in running)
    table = ("<table class='grid-table experiments'><tr><th>step</th><th>description</th><th>time budget</th>"
             f"<th>started</th></tr>{rows}</table>" if running else "")
    return f"<p class='small'>{len(running)} running, {len(started) - len(running)} ended</p>{table}"


def _lessons_file_html(view: RunView) -> str:
    if not view.lessons:
        return "<p class='muted'>no lessons.md recorded (the run was not driven by the agent)</p>"
    last = view.lessons[-1]
    return (f"<p class='small'>as last recorded: step {last.step}, {esc(last.origin)}</p>"
            f"<pre class='lessons-file'>{esc(last.text)}</pre>")


def run_live_sections(view: RunView) -> dict[str, str]:
    """The workbench sections a live update replaces (section id -> inner HTML)."""
    return {"experiments": _experiments_html(view), "lessons-file": _lessons_file_html(view)}


def run_extra_sections(view: RunView, *, steering_slot: bool = True) -> list[tuple[str, str, str]]:
    """What the run page adds to the report: ``(id, title, inner HTML)`` per section (``steering_slot``: the
    empty steering section too; False where the page carries the steering panel itself)."""
    live = run_live_sections(view)
    out = [("experiments", "Experiments running", f"<div id='sec-experiments'>{live['experiments']}</div>"),
           ("lessons-file", "lessons.md now", f"<div id='sec-lessons-file'>{live['lessons-file']}</div>")]
    return [*out, ("steer-panel", "Steering", STEERING_SLOT)] if steering_slot else out


def fleet_page_html(store: Store, fleet_id: str, *, plotly_src: str) -> str:
    """The fleet's members compared, as ``reasearch compare`` writes it (its code, not a copy).

    Raises:
        StoreError: no such fleet.
    """
    from reasearch.fleets.compare import comparison_in

    return compare_methods_html(comparison_in(store, fleet_id), plotly_src=plotly_src)
