"""Plotly figures (plain JSON: data + layout) of a run: score curves and the candidate lineage tree.

Every string that comes from the store is HTML-escaped before it reaches Plotly (Plotly renders a
subset of HTML tags in hover text).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from reasearch.evaluators.svg import esc
from reasearch.reports._model import EvalPoint, RunView

__all__ = ["STATUS_COLORS", "curve_figures", "tree_figure", "compare_figures", "best_so_far"]

STATUS_COLORS = {"OK": "#3ca951", "INVALID": "#efb118", "TIMEOUT": "#a463f2", "OOM": "#9c6b4e",
                 "CRASH": "#ff4136", "REFUSED": "#9498a0", "not evaluated": "#d0d0d0"}
_SYMBOLS = {
    "OK": "circle",
    "INVALID": "x",
    "TIMEOUT": "triangle-up",
    "OOM": "square",
    "CRASH": "x",
    "REFUSED": "diamond",
}
_HOVER = ("evaluation %{customdata[0]} (step %{customdata[1]})<br>candidate %{customdata[2]}<br>"
          "%{customdata[3]} %{customdata[4]}<br>%{customdata[5]}<extra></extra>")


def _layout(title: str, xtitle: str, ytitle: str, **extra: Any) -> dict[str, Any]:
    return {"title": {"text": esc(title), "font": {"size": 14}}, "margin": {"l": 60, "r": 20, "t": 40, "b": 45},
            "xaxis": {"title": {"text": esc(xtitle)}, "zeroline": False},
            "yaxis": {"title": {"text": esc(ytitle)}, "zeroline": False},
            "legend": {"orientation": "h", "y": -0.22}, "hovermode": "closest", "height": 360,
            "plot_bgcolor": "#fafafa", **extra}


def best_so_far(points: Sequence[EvalPoint], maximize: bool) -> list[float | None]:
    """The best OK score up to each point (None before the first)."""
    out: list[float | None] = []
    best: float | None = None
    for p in points:
        if p.score is not None and (best is None or (p.score > best if maximize else p.score < best)):
            best = p.score
        out.append(best)
    return out


def _floor(points: Sequence[EvalPoint], maximize: bool) -> float:
    """Where failed evaluations (no score) are drawn: just past the worst OK score."""
    scores = [p.score for p in points if p.score is not None]
    if not scores:
        return 0.0
    lo, hi = min(scores), max(scores)
    pad = (hi - lo) * 0.05 or abs(lo) * 0.05 or 0.05
    return lo - pad if maximize else hi + pad


def _score_text(p: EvalPoint) -> str:
    if p.score is None:
        return "(no score)"
    text = f"{p.score:.10g}"
    if p.normalized is not None:
        text += f" (normalized {p.normalized:.4f})"
    return text + (" cached" if p.cached else "")


def curve_figures(view: RunView) -> dict[str, dict[str, Any]]:
    """Score against evaluations, dollars (tokens when no dollar was spent) and wall time."""
    maximize = view.direction == "maximize"
    pts = view.points
    floor = _floor(pts, maximize)
    spent_dollars = any(p.dollars for p in pts)
    axes = {
        "fig-evals": ("evaluation", lambda p: p.index, "score against evaluations"),
        "fig-dollars": (
            ("dollars spent" if spent_dollars else "tokens spent (no dollars recorded)"),
            (lambda p: p.dollars) if spent_dollars else (lambda p: p.tokens),
            "score against " + ("dollars" if spent_dollars else "tokens"),
        ),
        "fig-wall": (
            "seconds since the run started",
            lambda p: round(p.wall_since_start_s, 3),
            "score against wall time",
        ),
    }
    best = best_so_far(pts, maximize)
    figs: dict[str, dict[str, Any]] = {}
    for fig_id, (xtitle, xof, title) in axes.items():
        data: list[dict[str, Any]] = []
        statuses = [s for s in STATUS_COLORS if any(p.status == s for p in pts)]
        for status in statuses:
            sel = [p for p in pts if p.status == status]
            data.append({
                "type": "scatter", "mode": "markers", "name": f"{status} ({len(sel)})",
                "x": [xof(p) for p in sel], "y": [p.score if p.score is not None else floor for p in sel],
                "marker": {"color": STATUS_COLORS[status], "symbol": _SYMBOLS.get(status, "circle"), "size": 7,
                           "line": {"width": 0.5, "color": "#333"}},
                "customdata": [[p.index, p.step, p.candidate_id[:12], p.status, _score_text(p), esc(p.note[:200])]
                               for p in sel],
                "hovertemplate": _HOVER, "meta": {"kind": "evaluations"},
            })
        data.append({"type": "scatter", "mode": "lines", "name": "best so far", "line": {"shape": "hv", "color": "#222",
                                                                                          "width": 1.5},
                     "x": [xof(p) for p in pts], "y": best, "hoverinfo": "skip", "connectgaps": False})
        extra: dict[str, Any] = {}
        if any(p.score is None for p in pts) and any(p.score is not None for p in pts):
            extra["annotations"] = [{"xref": "paper", "yref": "y", "x": 1, "y": floor, "xanchor": "right",
                                     "yanchor": "bottom", "showarrow": False, "font": {"size": 10, "color": "#777"},
                                     "text": "failed evaluations (no score) are drawn on this line"}]
        if fig_id == "fig-dollars" and not any(p.tokens for p in pts):
            extra.setdefault("annotations", []).append(
                {"xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5, "showarrow": False, "font": {"color": "#777"},
                 "text": "no dollars or tokens are recorded in this run's ledger"})
        if fig_id == "fig-evals" and view.interventions:
            _mark_interventions(view, data, extra, best, floor)
        figs[fig_id] = {"data": data, "layout": _layout(title, xtitle, "score (" + view.direction + ")", **extra)}
    return figs


def _mark_interventions(view: RunView, data: list[dict[str, Any]], extra: dict[str, Any],
                        best: Sequence[float | None], floor: float) -> None:
    """A person's interventions on the score-against-evaluations curve: a dashed line between the evaluations
    before and after them (at ``k + 0.5``), labelled ``#seq verb`` (those applied at once share a line), and a
    hoverable marker saying what each was and what followed."""
    at: dict[int, list[Any]] = {}
    for e in view.interventions:
        at.setdefault(e.evaluations_before, []).append(e)
    shapes, xs, ys, custom = [], [], [], []
    for k, group in sorted(at.items()):
        x = k + 0.5
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
                       "line": {"color": "#c2185b", "width": 1, "dash": "dot"}})
        label = ", ".join(f"#{e.intervention.seq} {e.intervention.verb}" for e in group)
        extra.setdefault("annotations", []).append(
            {"xref": "x", "yref": "paper", "x": x, "y": 1, "yanchor": "bottom", "showarrow": False,
             "font": {"size": 10, "color": "#c2185b"}, "text": esc(label[:200])})
        y = best[k - 1] if 0 < k <= len(best) else None
        xs.append(x)
        ys.append(y if y is not None else floor)
        first = group[0]
        custom.append(["<br>".join(esc(e.intervention.describe()[:300]) for e in group[:10]),
                       first.intervention.applied_step, _fmt(first.score_before), _fmt(first.best_after),
                       first.evaluations_after])
    extra["shapes"] = shapes
    data.append({"type": "scatter", "mode": "markers", "name": f"interventions ({len(view.interventions)})",
                 "x": xs, "y": ys, "marker": {"color": "#c2185b", "symbol": "triangle-down", "size": 10},
                 "customdata": custom, "meta": {"kind": "interventions"},
                 "hovertemplate": "%{customdata[0]}<br>applied at step %{customdata[1]}<br>best before "
                                  "%{customdata[2]}, best of the next %{customdata[4]} evaluations "
                                  "%{customdata[3]}<extra></extra>"})


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.10g}"


def tree_layout(ids: Sequence[str], parents: Sequence[str | None]) -> tuple[list[int], list[float]]:
    """Depth and vertical position of every node of a forest (leaves in order, parents centred on
    their children); a parent that is not among ``ids`` makes a root. Iterative: chains of any length."""
    index = {c: i for i, c in enumerate(ids)}
    children: list[list[int]] = [[] for _ in ids]
    roots: list[int] = []
    for i, p in enumerate(parents):
        j = index.get(p) if p is not None else None
        if j is None or j == i:
            roots.append(i)
        else:
            children[j].append(i)
    depth = [0] * len(ids)
    y = [0.0] * len(ids)
    seen = [False] * len(ids)
    next_leaf = 0.0
    # A cycle of parents (impossible through the Run API, but the store is data) becomes extra roots.
    pending = list(roots)
    while True:
        for root in pending:
            stack: list[tuple[int, bool]] = [(root, False)]
            while stack:
                node, done = stack.pop()
                if done:
                    kids = [k for k in children[node] if seen[k]]
                    if kids:
                        y[node] = sum(y[k] for k in kids) / len(kids)
                    else:
                        y[node] = next_leaf
                        next_leaf += 1.0
                    continue
                if seen[node]:
                    continue
                seen[node] = True
                stack.append((node, True))
                for k in reversed(children[node]):
                    if not seen[k]:
                        depth[k] = depth[node] + 1
                        stack.append((k, False))
        rest = [i for i in range(len(ids)) if not seen[i]]
        if not rest:
            break
        pending = rest[:1]
    return depth, y


def tree_figure(view: RunView) -> dict[str, Any]:
    """The candidate lineage: one node per candidate (coloured by its last evaluation's status), edges to parents."""
    cands = view.candidates
    ids = [c.id for c in cands]
    depth, y = tree_layout(ids, [c.parent for c in cands])
    last: dict[str, Any] = {}
    best_score: dict[str, float] = {}
    maximize = view.direction == "maximize"
    for ev in view.evaluations:
        last[ev.candidate_id] = ev.result
        s = ev.result.score
        if ev.result.status.value == "OK" and s is not None and math.isfinite(s):
            prev = best_score.get(ev.candidate_id)
            if prev is None or (s > prev if maximize else s < prev):
                best_score[ev.candidate_id] = s
    index = {c: i for i, c in enumerate(ids)}
    ex: list[float | None] = []
    ey: list[float | None] = []
    for i, c in enumerate(cands):
        j = index.get(c.parent) if c.parent is not None else None
        if j is not None and j != i:
            ex += [depth[j], depth[i], None]
            ey += [y[j], y[i], None]
    best_id = view.best.candidate_id if view.best else None
    final_id = view.record.final_candidate
    colors, sizes, lines, custom = [], [], [], []
    for i, c in enumerate(cands):
        res = last.get(c.id)
        status = res.status.value if res is not None else "not evaluated"
        colors.append(STATUS_COLORS.get(status, "#777"))
        sizes.append(16 if c.id in (best_id, final_id) else 10)
        lines.append(3 if c.id == final_id else 2 if c.id == best_id else 0.5)
        score = best_score.get(c.id)
        tag = (" (best)" if c.id == best_id else "") + (" (final)" if c.id == final_id else "")
        custom.append([i, c.id[:12] + tag, status, "-" if score is None else f"{score:.10g}", esc(c.note[:200])])
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "x": ex,
            "y": ey,
            "line": {"color": "#aaa", "width": 1},
            "hoverinfo": "skip",
            "showlegend": False,
            "name": "parent links",
        },
        {
            "type": "scatter",
            "mode": "markers",
            "x": depth,
            "y": y,
            "name": "candidates",
            "showlegend": False,
            "marker": {"color": colors, "size": sizes, "line": {"width": lines, "color": "#111"}},
            "customdata": custom,
            "meta": {"kind": "tree-nodes"},
            "hovertemplate": "candidate %{customdata[1]}<br>%{customdata[2]}, best score %{customdata[3]}<br>"
            "%{customdata[4]}<br>(click for source and feedback)<extra></extra>",
        },
    ]
    height = max(320, min(1400, 14 * (max(y) + 1 if y else 1) + 80))
    layout = _layout(f"candidate lineage: {len(cands)} candidates (click a node)", "generation (edits from a root)",
                     "", height=height)
    layout["yaxis"].update({"showticklabels": False, "autorange": "reversed"})
    layout["xaxis"].update({"dtick": 1})
    return {"data": data, "layout": layout}


def compare_figures(views: Sequence[RunView]) -> dict[str, dict[str, Any]]:
    """Best-so-far curves of several runs, overlaid (normalized scores when the tasks differ)."""
    same_task = len({v.record.task_id for v in views}) == 1
    figs: dict[str, dict[str, Any]] = {}
    for fig_id, xtitle, xof in (("fig-compare-evals", "evaluation", lambda p: p.index),
                                ("fig-compare-wall", "seconds since the run started", lambda p: p.wall_since_start_s)):
        data = []
        for v in views:
            maximize = v.direction == "maximize"
            if same_task:
                ys = best_so_far(v.points, maximize)
            else:  # normalized scores: 1.0 = best known, higher is better whatever the direction
                norm = [p.normalized for p in v.points]
                ys, b = [], None
                for n in norm:
                    if n is not None and (b is None or n > b):
                        b = n
                    ys.append(b)
            data.append({"type": "scatter", "mode": "lines+markers", "line": {"shape": "hv"}, "marker": {"size": 4},
                         "name": esc(f"{v.record.id[-8:]} {v.record.task_id} seed {v.record.seed}"),
                         "x": [xof(p) for p in v.points], "y": ys})
        ytitle = f"best score ({views[0].direction})" if same_task else "best normalized score (1 = best known)"
        figs[fig_id] = {"data": data, "layout": _layout("best so far, " + ("by evaluation" if "evals" in fig_id
                                                                          else "by wall time"), xtitle, ytitle)}
    return figs
