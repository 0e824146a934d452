"""The methods comparison page: one self-contained HTML file from :func:`reasearch.fleets.compare.comparison`.

Per task: best score against budget spent, against dollars and against wall time (the median over
seeds per method, with the min-max spread as a band); a final table (one row per method: runs, mean,
spread, the paired bootstrap interval against the reference method with wins/ties/losses over the paired
seeds and Cliff's delta, rank only when the budgets are equal), the published best known and the task's
published reference rows beside it (marked: published, not measured here), every pair of methods' paired
statistics, failures by status, each run's spend by unit, the agent's tool mix, and the runs that did not
finish with their reasons. The page is built like the run reports (plotly.js inlined, data in a JSON
script tag, a Content-Security-Policy that forbids every network load).

Trust boundary: every string from the store (ids, notes, tool names, a failed run's reason) is escaped;
nothing a model or a candidate wrote reaches the page as markup.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reasearch.evaluators import scores
from reasearch.evaluators.svg import esc
from reasearch.reports._figures import _layout
from reasearch.reports._page import _document
from reasearch.reports._sections import fmt_score

__all__ = ["compare_methods_html", "curve_series", "figure_text", "reference_cells", "under_cap_text",
           "write_compare_methods"]

_COLORS = ("#4269d0", "#efb118", "#ff725c", "#6cc5b0", "#3ca951", "#ff8ab7", "#a463f2", "#97bbf5")
_GRID = 60


def _best_at(points: Sequence[Mapping[str, Any]], key: str, x: float, sign: float) -> float | None:
    best = None
    for p in points:
        if p[key] <= x + 1e-12 and p["score"] is not None and (best is None or sign * p["score"] > sign * best):
            best = p["score"]
    return best


def curve_series(runs: Sequence[Mapping[str, Any]], key: str, xmax: float, sign: float) -> dict[str, list[Any]]:
    """``{"x", "median", "lo", "hi"}``: best so far over seeds at each grid point of ``0..xmax``."""
    xs = [xmax * i / (_GRID - 1) for i in range(_GRID)] if xmax > 0 else [0.0]
    med, lo, hi = [], [], []
    for x in xs:
        vals = [v for v in (_best_at(r["points"], key, x, sign) for r in runs) if v is not None]
        med.append(statistics.median(vals) if vals else None)
        lo.append(min(vals) if vals else None)
        hi.append(max(vals) if vals else None)
    return {"x": xs, "median": med, "lo": lo, "hi": hi}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")


def _figures(task: Mapping[str, Any], runs: list[Mapping[str, Any]], methods: Sequence[str]) -> dict[str, Any]:
    sign = 1.0 if task["direction"] == "maximize" else -1.0
    unit = task["unit"]
    cap = max((float(r["caps"].get(unit, 0.0)) for r in runs), default=0.0)
    spent_max = max((p["spent"] for r in runs for p in r["points"]), default=0.0)
    axes = (
        ("budget", "spent", cap or spent_max, f"{unit} spent"),
        ("dollars", "dollars", max((p["dollars"] for r in runs for p in r["points"]), default=0.0), "dollars spent"),
        (
            "wall",
            "wall_s",
            max((p["wall_s"] for r in runs for p in r["points"]), default=0.0),
            "seconds since the run started",
        ),
    )
    figs = {}
    for name, key, xmax, xtitle in axes:
        data = []
        for i, method in enumerate(methods):
            mine = [r for r in runs if r["method"] == method]
            if not mine:
                continue
            s = curve_series(mine, key, xmax, sign)
            color = _COLORS[i % len(_COLORS)]
            data.append({"type": "scatter", "mode": "lines", "x": s["x"], "y": s["hi"], "line": {"width": 0},
                         "showlegend": False, "hoverinfo": "skip", "name": esc(f"{method} max")})
            data.append({"type": "scatter", "mode": "lines", "x": s["x"], "y": s["lo"], "line": {"width": 0},
                         "fill": "tonexty", "fillcolor": color + "33", "showlegend": False, "hoverinfo": "skip",
                         "name": esc(f"{method} min")})
            data.append({"type": "scatter", "mode": "lines", "x": s["x"], "y": s["median"],
                         "line": {"color": color, "shape": "hv"}, "name": esc(f"{method} (median of {len(mine)})"),
                         "meta": "median"})
        title = f"{task['task_id']}: best score ({task['direction']}) by {xtitle}; band = min-max over seeds"
        layout = _layout(esc(title), esc(xtitle), "best score")
        if xmax <= 0:  # e.g. no dollars: an unpriced model, or a scripted one
            layout["annotations"] = [{"text": f"nothing on this axis: {esc(xtitle)} stayed 0", "showarrow": False,
                                      "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}]
        figs[f"fig-{_slug(task['task_id'])}-{name}"] = {"data": data, "layout": layout}
    matched = _matched_figure(task, methods)
    if matched is not None:
        figs[f"fig-{_slug(task['task_id'])}-matched"] = matched
    return figs


def under_cap_text(row: Mapping[str, Any]) -> str:
    """``full`` when every run spent its cap, else each short run: seed, spend of cap, and the stop rule that fired."""
    short = row.get("under_cap") or []
    if not short:
        return "full"
    return "UNDER CAP " + "; ".join(f"seed {u['seed']}: {u['spent']:g}/{u['cap']:g} ({u['stop_reason'] or 'no reason'})"
                                    for u in short)


def _matched_figure(task: Mapping[str, Any], methods: Sequence[str]) -> dict[str, Any] | None:
    """The spend-matched curve: each method's mean best after k units, k up to the smallest spend."""
    matched = task.get("spend_matched")
    if not matched or not matched.get("k"):
        return None
    data = [{"type": "scatter", "mode": "lines+markers", "x": matched["k"], "y": matched["curves"][m],
             "line": {"color": _COLORS[i % len(_COLORS)], "shape": "hv"}, "name": esc(f"{m} (mean over seeds)")}
            for i, m in enumerate(methods) if m in matched["curves"]]
    title = (f"{task['task_id']}: best score at equal spend ({task['direction']}), k up to "
             f"{matched['k_equal']:g} {task['unit']} (the smallest spend)")
    return {"data": data, "layout": _layout(esc(title), esc(f"{task['unit']} spent (k)"), "mean best after k")}


def _ci(row: Mapping[str, Any]) -> str:
    v = row.get("vs_reference")
    if v is None:
        return "reference"
    if not v["pairs"]:
        return "-"
    lo, hi = v["ci95"]
    return f"{v['mean_gain']:+.4g} [{lo:+.4g}, {hi:+.4g}] ({v['pairs']} pairs)"


def _wtl_cells(v: Mapping[str, Any] | None) -> str:
    if not v or not v.get("pairs"):
        return "<td>-</td><td>-</td>"
    return (f"<td class='wtl'>{v['wins']}/{v['ties']}/{v['losses']}</td>"
            f"<td class='cliffs-delta'>{v['cliffs_delta']:+.2f}</td>")


def figure_text(value: float) -> str:
    """A published figure as reference rows print it: 12 significant digits when that is the number itself, else
    every digit (a published 2.634292402141039 is not shown rounded to 2.63429240214)."""
    short = f"{value:.12g}"
    return short if float(short) == value else repr(float(value))


def reference_cells(ref: Mapping[str, Any]) -> tuple[str, str]:
    """A reference row's ``(score cell, metric text)``. A figure in the task's own score goes in the score column; a
    figure of another metric (``t_alg_s``, ``bal_gpu``, ...) never does: its score cell is ``-`` and the figure is
    the metric text, ``METRIC = FIGURE (as published): a metric, not the score``, so it is never read or ranked as a
    score."""
    from reasearch.fleets.references import is_score

    value = figure_text(ref["score"]) + (f" ({ref['as_published']})" if ref.get("as_published") else "")
    return (value, "") if is_score(ref) else ("-", f"{ref['metric']} = {value}: a metric, not the score")


def _reference_row(ref: Mapping[str, Any]) -> str:
    """A published reference row: method, source and budget, marked as not measured here."""
    value, metric = reference_cells(ref)
    note = f"; {ref['note']}" if ref.get("note") else ""
    tag = f" data-metric='{esc(ref['metric'])}'" if metric else ""
    return (f"<tr class='reference' data-method='{esc(ref['method'])}'{tag}><td colspan='3'>reference: "
            f"{esc(ref['method'])}</td><td></td><td>{esc(value)}</td><td colspan='14' class='muted'>"
            f"{esc(metric + '; ' if metric else '')}published, not measured here; source: {esc(ref['source'])}; "
            f"budget: {esc(ref['budget'])}{esc(note)}</td></tr>")


def _pairwise_table(task: Mapping[str, Any]) -> str:
    pairs = [p for p in task.get("pairwise", []) if p["pairs"]]
    if not pairs:
        return ""
    body = "".join(
        f"<tr class='pair-row'><td>{esc(p['method'])}</td><td>{esc(p['versus'])}</td><td>{p['pairs']}</td>"
        f"<td>{p['wins']}/{p['ties']}/{p['losses']}</td><td>{p['cliffs_delta']:+.2f}</td>"
        f"<td>{p['mean_gain']:+.4g} [{p['ci95'][0]:+.4g}, {p['ci95'][1]:+.4g}]</td></tr>"
        for p in pairs)
    return ("<h3>Every pair of methods (paired by seed)</h3><table class='grid-table pairwise-table'><tr><th>method"
            "</th><th>versus</th><th>pairs</th><th>W/T/L</th><th>Cliff's delta</th><th>gain (mean, 95% paired "
            f"bootstrap)</th></tr>{body}</table>")


def _task_section(task: Mapping[str, Any], runs: list[Mapping[str, Any]], reference: str) -> str:
    slug = _slug(task["task_id"])
    check = task["budget_check"]
    k_equal = (task.get("spend_matched") or {}).get("k_equal", 0.0)
    notice = (f"<p class='budget-ok'>Equal caps: every run capped at "
              f"{esc(', '.join(f'{k} {v:g}' for k, v in check['caps'][0].items()))}; ranked at equal spend, the "
              f"best score after {k_equal:g} {esc(task['unit'])} (the smallest spend of these runs).</p>"
              if task["ranked"] else
              f"<p class='warn budget-unequal'>Not ranked: {esc(check['why'] or 'a run spent nothing')}.</p>")
    public = task.get("heldout_public")
    if public is not None:  # a training task: whether its held-out data could have been carried in or recited
        text = scores.heldout_text({"heldout_public": public, "sealed": not public})
        notice += (f"<p class='warn heldout-public'>Scored on {esc(text)}.</p>" if public else
                   f"<p class='muted heldout-private'>Scored on {esc(text)}.</p>")
    if task.get("trust"):  # a peer's folder: its evaluator ran in the candidate's jail
        notice += f"<p class='warn trust'>Trust: {esc(task['trust'])}; scores are as trustworthy as that evaluator.</p>"
    head = ("<tr><th>method</th><th>rank</th><th>runs</th><th>best @ equal spend</th><th>mean best</th><th>std</th>"
            "<th>min</th><th>max</th>"
            f"<th>gain vs {esc(reference)} (mean, 95% paired bootstrap)</th><th>W/T/L vs {esc(reference)}</th>"
            f"<th>Cliff's delta</th><th>spent ({esc(task['unit'])})</th><th>stopped</th>"
            "<th>dollars</th>" + "".join(f"<th>{k}</th>" for k in ("INVALID", "TIMEOUT", "OOM", "CRASH", "REFUSED"))
            + "</tr>")
    rows = []
    for r in task["table"]:
        rank = str(r["rank"]) if task["ranked"] and "rank" in r else "-"
        fails = "".join(f"<td>{r['failures'][k]}</td>" for k in ("INVALID", "TIMEOUT", "OOM", "CRASH", "REFUSED"))
        rows.append(
            f"<tr class='method-row' data-method='{esc(r['method'])}'><td>{esc(r['method'])}</td><td>{rank}</td>"
            f"<td>{r['runs']}</td><td>{esc(fmt_score(r.get('at_equal_spend')))}</td>"
            f"<td>{esc(fmt_score(r['mean']))}</td><td>{esc(fmt_score(r['std']))}</td>"
            f"<td>{esc(fmt_score(r['min']))}</td><td>{esc(fmt_score(r['max']))}</td><td>{esc(_ci(r))}</td>"
            f"{_wtl_cells(r.get('vs_reference'))}"
            f"<td>{r['spent']:g}</td><td class='stopped'>{esc(under_cap_text(r))}</td>"
            f"<td>{r['dollars']:.4g}</td>{fails}</tr>"
        )
    pub = task.get("published")
    if pub:
        rows.append(f"<tr class='published'><td colspan='3'>published best known ({esc(pub['source'])})</td>"
                    f"<td></td><td>{esc(fmt_score(pub['best_known']))}</td><td colspan='14' class='muted'>"
                    "published, not measured here</td></tr>")
    rows.extend(_reference_row(ref) for ref in task.get("references", []))
    spend = "".join(
        f"<tr class='run-row'><td><code>{esc(r['run_id'])}</code></td><td>{esc(r['method'])}</td><td>{r['seed']}</td>"
        f"<td>{esc(r['state'])}</td><td>{esc(fmt_score(r['best_score']))}</td>"
        f"<td>{esc(', '.join(f'{k} {v:g}' for k, v in sorted(r['caps'].items())))}</td>"
        f"<td>{esc(', '.join(f'{k} {v:.6g}' for k, v in sorted(r['used'].items())))}</td>"
        f"<td>{'-' if r['test_score'] is None else esc(fmt_score(r['test_score']))}</td></tr>" for r in runs)
    mix: dict[str, dict[str, int]] = {}
    for r in runs:
        if r["tool_mix"]:
            agg = mix.setdefault(r["method"], {})
            for k, n in r["tool_mix"].items():
                agg[k] = agg.get(k, 0) + n
    tools = sorted({k for m in mix.values() for k in m})
    mix_html = ("<p class='muted'>no agent runs (or no tool calls) here</p>" if not mix else
                "<table class='grid-table tool-mix'><tr><th>method</th>" + "".join(f"<th>{esc(t)}</th>" for t in tools)
                + "</tr>" + "".join(f"<tr><td>{esc(m)}</td>" + "".join(f"<td>{c.get(t, 0)}</td>" for t in tools)
                                    + "</tr>" for m, c in sorted(mix.items())) + "</table>")
    return (
        f"<section id='task-{slug}'><h2>{esc(task['task_id'])}</h2>{notice}"
        f"<div id='fig-{slug}-budget' class='plot'></div><div id='fig-{slug}-matched' class='plot'></div>"
        f"<div class='plots2'><div id='fig-{slug}-dollars' "
        f"class='plot'></div><div id='fig-{slug}-wall' class='plot'></div></div>"
        f"<h3>Final best score per method</h3><table class='grid-table final-table'>{head}{''.join(rows)}</table>"
        f"{_pairwise_table(task)}"
        f"<h3>Each run's spend by unit</h3><table class='grid-table spend-table'><tr><th>run</th><th>method</th>"
        f"<th>seed</th><th>state</th><th>best</th><th>caps</th><th>spent</th><th>sealed test</th></tr>{spend}</table>"
        f"<h3>Where the agent spent its turns (tool calls)</h3>{mix_html}</section>"
    )


def _not_finished(rows: Sequence[Mapping[str, Any]]) -> str:
    """The runs that did not finish, each with its reason (a resume of the comparison retries them)."""
    if not rows:
        return ""
    items = "".join(
        f"<tr class='not-finished-row'><td><code>{esc(r['run_id'])}</code></td><td>{esc(r['task_id'])}</td>"
        f"<td>{esc(r['method'])}</td><td>{r['seed']}</td><td>{esc(r['state'])}</td><td>{esc(r['reason'] or '-')}</td>"
        "</tr>" for r in rows)
    return (f"<section id='not-finished'><p class='warn'>{len(rows)} run(s) did not finish: their tasks are not "
            "ranked; `reasearch compare ... --id FLEET_ID` retries exactly these.</p><table class='grid-table "
            "not-finished'><tr><th>run</th><th>task</th><th>method</th><th>seed</th><th>state</th><th>reason</th>"
            f"</tr>{items}</table></section>")


def compare_methods_html(data: Mapping[str, Any], *, plotly_src: str | None = None) -> str:
    """The comparison page of :func:`~reasearch.fleets.compare.comparison`'s data."""
    methods = list(data["methods"])
    sections, figures = [], {}
    for task in data["tasks"]:
        runs = [r for r in data["runs"] if r["task_id"] == task["task_id"]]
        sections.append(_task_section(task, runs, data["reference"]))
        figures.update(_figures(task, runs, methods))
    header = (f"<h1>{esc(', '.join(methods))} on {len(data['tasks'])} task(s), seeds "
              f"{esc(', '.join(map(str, data['seeds'])))}, model {esc(', '.join(data['models']))}</h1>"
              + _not_finished(data.get("not_finished") or []))
    if data.get("model_note"):
        header += f"<p class='warn model-note'>{esc(data['model_note'])}.</p>"
    payload = {"figures": figures, "candidates": [],
               "counts": {"evaluations": sum(len(r["points"]) for r in data["runs"]), "candidates": 0}}
    return _document(f"reasearch compare {data['fleet_id']}", header, "".join(sections), payload,
                     plotly_src=plotly_src)


def write_compare_methods(data: Mapping[str, Any], path: str | Path) -> Path:
    """Writes :func:`compare_methods_html` to ``path`` (UTF-8) and returns the path."""
    out = Path(path)
    out.write_text(compare_methods_html(data), encoding="utf-8")
    return out
