"""The drawings of the shipped task families (inline SVG, computed on the trusted side from the stored
solution; nothing a candidate wrote is run or trusted beyond its numbers)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from reasearch.reports._draw_context import DrawContext, Drawing
from reasearch.reports._svg import bar_chart, esc, line_chart, num

__all__ = ["BUILTIN_DRAWINGS", "tightest_constraints"]

_SIZE = 420  # pixels of a unit-square drawing
_TIGHT = 10  # constraints marked on a packing


def _solution(ctx: DrawContext) -> Mapping[str, Any]:
    if ctx.result is None or not isinstance(ctx.result.solution, Mapping):
        raise ValueError("the result carries no solution")
    return ctx.result.solution


def _unit_square(body: str, caption: str, cls: str) -> str:
    """An SVG of the unit square, y up (the model's coordinates), with ``body`` drawn in unit coordinates."""
    pad = 0.03
    return (
        f'<div><svg class="{cls}" viewBox="{-pad} {-pad} {1 + 2 * pad} {1 + 2 * pad}" width="{_SIZE}" height="{_SIZE}" '
        f'role="img"><g transform="matrix(1 0 0 -1 0 1)">'
        f'<rect x="0" y="0" width="1" height="1" fill="none" stroke="#222" stroke-width="0.004"/>{body}</g></svg>'
        f"<figcaption>{caption}</figcaption></div>"
    )


def tightest_constraints(centers: np.ndarray, radii: np.ndarray, k: int = _TIGHT) -> list[tuple[float, str, int, int]]:
    """The ``k`` constraints of a packing with the least slack: ``(slack, kind, i, j)``; kind is
    ``pair`` (circles i and j) or a wall (``left``, ``right``, ``bottom``, ``top``; j = -1)."""
    n = len(radii)
    out: list[tuple[float, str, int, int]] = []
    if n >= 2:
        d = np.sqrt(((centers[:, None, :] - centers[None, :, :]) ** 2).sum(-1)) - radii[:, None] - radii[None, :]
        iu = np.triu_indices(n, 1)
        out += [(float(s), "pair", int(i), int(j)) for s, i, j in zip(d[iu], *iu, strict=True)]
    x, y = centers[:, 0], centers[:, 1]
    for kind, slack in (("left", x - radii), ("right", 1 - x - radii), ("bottom", y - radii), ("top", 1 - y - radii)):
        out += [(float(s), kind, i, -1) for i, s in enumerate(slack)]
    out.sort(key=lambda t: t[0])
    return out[:k]


def draw_packing(ctx: DrawContext) -> str:
    """Circles in the unit square; the tightest constraints (touching pairs, touching walls) in red."""
    sol = _solution(ctx)
    centers = np.asarray(sol["centers"], dtype=np.float64).reshape(-1, 2)
    radii = np.asarray(sol["radii"], dtype=np.float64).reshape(-1)
    if len(centers) != len(radii) or not (np.isfinite(centers).all() and np.isfinite(radii).all()):
        raise ValueError("centers and radii do not match or are not finite")
    parts = []
    for i, ((x, y), r) in enumerate(zip(centers, radii, strict=True)):
        parts.append(
            f'<circle class="c" cx="{x:.6f}" cy="{y:.6f}" r="{max(r, 0):.6f}" fill="#97bbf5" fill-opacity="0.6" '
            f'stroke="#1f3f8f" stroke-width="0.002"><title>circle {i}: ({x:.6f}, {y:.6f}) r={r:.6f}</title></circle>'
        )
    tight = tightest_constraints(centers, radii)
    walls = {"left": lambda x, y: (0.0, y), "right": lambda x, y: (1.0, y),
             "bottom": lambda x, y: (x, 0.0), "top": lambda x, y: (x, 1.0)}
    rows = []
    for slack, kind, i, j in tight:
        x1, y1 = centers[i]
        x2, y2 = centers[j] if kind == "pair" else walls[kind](x1, y1)
        what = f"circles {i} and {j}" if kind == "pair" else f"circle {i} and the {kind} wall"
        parts.append(f'<line class="tight" x1="{x1:.6f}" y1="{y1:.6f}" x2="{x2:.6f}" y2="{y2:.6f}" stroke="#d62728" '
                     f'stroke-width="0.005"><title>{what}: slack {slack:.3e}</title></line>')
        rows.append(f"<tr><td>{esc(what)}</td><td>{slack:.3e}</td></tr>")
    for i, (x, y) in enumerate(centers):
        parts.append(f'<text x="{x:.5f}" y="{-y:.5f}" transform="scale(1 -1)" font-size="0.025" text-anchor="middle" '
                     f'dominant-baseline="middle">{i}</text>')
    caption = (f"n={len(radii)}, sum of radii {float(radii.sum()):.9f}; red: the {len(tight)} tightest constraints "
               "(slack = gap between circles, or between a circle and a wall)")
    table = f'<table class="kv small"><tr><th>tightest constraint</th><th>slack</th></tr>{"".join(rows)}</table>'
    return f'<div class="row">{_unit_square("".join(parts), esc(caption), "packing")}{table}</div>'


def draw_points(ctx: DrawContext) -> str:
    """Heilbronn points; the smallest triangle filled red, the next ones lighter."""
    from reasearch.native.geometry import smallest_triangles

    sol = _solution(ctx)
    points = np.asarray(sol["points"], dtype=np.float64).reshape(-1, 2)
    if not np.isfinite(points).all():
        raise ValueError("points are not finite")
    tris = smallest_triangles(points, 3)
    parts = []
    for rank, (area, idx) in reversed(list(enumerate(tris))):
        pts = " ".join(f"{points[i, 0]:.6f},{points[i, 1]:.6f}" for i in idx)
        parts.append(f'<polygon class="{"smallest" if rank == 0 else "small"}" points="{pts}" fill="#d62728" '
                     f'fill-opacity="{0.55 / (rank + 1):.3f}" stroke="#d62728" stroke-width="0.003">'
                     f'<title>triangle {idx}: area {area:.6g}</title></polygon>')
    for i, (x, y) in enumerate(points):
        parts.append(f'<circle class="pt" cx="{x:.6f}" cy="{y:.6f}" r="0.011" fill="#222"><title>point {i}: '
                     f'({x:.6f}, {y:.6f})</title></circle>')
        parts.append(
            f'<text x="{x + 0.015:.5f}" y="{-y - 0.012:.5f}" transform="scale(1 -1)" font-size="0.03">{i}</text>'
        )
    area = tris[0][0] if tris else float("nan")
    caption = (f"n={len(points)}, smallest triangle area {area:.9g} (points {tris[0][1] if tris else '-'}); "
               "the next two smallest shaded lighter")
    return _unit_square("".join(parts), esc(caption), "heilbronn")


def draw_schedules(ctx: DrawContext) -> str:
    """A Gantt chart per workload: each transaction a bar from its start to its end slot."""
    from reasearch.evaluators.txn_scheduling.workload import load_workloads
    from reasearch.native.txn import PyTxnSimulator, compile_workload

    sol = _solution(ctx)
    workloads = load_workloads()
    schedules = sol["schedules"]
    panels, total = [], 0
    for w, seq in zip(workloads, schedules, strict=False):
        spans = PyTxnSimulator(compile_workload(w.txns)).placements([int(x) for x in seq])
        makespan = max((end for _, end in spans), default=0)
        total += makespan
        width, height, left, top = 360, 420, 30, 20
        sx = (width - left - 10) / max(makespan, 1)
        sy = (height - top - 20) / max(len(spans), 1)
        bars = [
            f'<rect class="txn" x="{num(left + (s - 1) * sx)}" y="{num(top + k * sy)}" width="{num((e - s + 1) * sx)}" '
            f'height="{num(max(sy * 0.8, 0.5))}" fill="#4269d0"><title>#{k}: txn {int(seq[k])}, slots '
            f'{s}..{e}</title></rect>'
            for k, (s, e) in enumerate(spans)
        ]
        x_end = left + makespan * sx
        panels.append(
            f'<svg class="gantt" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">'
            f'<text x="{width / 2}" y="13" text-anchor="middle" class="t">{esc(w.name)}: makespan {makespan}</text>'
            f'{"".join(bars)}<line x1="{num(x_end)}" x2="{num(x_end)}" y1="{top}" y2="{height - 20}" stroke="#d62728"/>'
            f'<text x="{left}" y="{height - 6}" class="a">time slot 0</text>'
            f'<text x="{num(x_end)}" y="{height - 6}" text-anchor="end" class="a">{makespan}</text></svg>')
    caption = f"total makespan {total}; one row per position in the schedule, bars span start..end slot"
    return f'<div class="row">{"".join(panels)}</div><figcaption>{esc(caption)}</figcaption>'


def draw_eplb(ctx: DrawContext) -> str:
    """Per-GPU load of the worst layer of the worst window, before (no rebalancing) and after; per-window balance."""
    res = ctx.result
    assert res is not None
    parts = []
    sol = res.solution if isinstance(res.solution, Mapping) else {}
    before, after = sol.get("before"), sol.get("after")
    if isinstance(before, Sequence) and isinstance(after, Sequence) and before and len(before) == len(after):
        mean = float(np.mean(np.asarray(after, dtype=np.float64)))
        parts.append(
            bar_chart(
                {
                    "before (no rebalancing)": [float(x) for x in before],
                    "after (candidate's placement)": [float(x) for x in after],
                },
                labels=[str(g) for g in range(len(before))],
                ylabel="tokens",
                title=f"per-GPU load, layer {sol.get('layer')}, window {sol.get('worst_window')} -> "
                f"{int(sol.get('worst_window', 0)) + 1} (the worst for GPU balance); dashed: the mean",
                reference=mean,
                cls="chart eplb-gpu",
                width=760,
            )
        )
    else:
        parts.append('<p class="muted">this result predates per-GPU loads in EPLB results: only the per-window '
                     'balance is shown</p>')
    series = {k: res.metrics[k] for k in ("bal_expert_per_window", "bal_gpu_per_window")
              if isinstance(res.metrics.get(k), list)}
    if series:
        parts.append(line_chart(series, title="balance per window (1 = perfect)", xlabel="window"))
    return "".join(parts)


_ARC_COLORS = ("#000000", "#0074D9", "#FF4136", "#2ECC40", "#FFDC00",
               "#AAAAAA", "#F012BE", "#FF851B", "#7FDBFF", "#870C25")


def _grid_svg(grid: Any, label: str, expected: Any = None) -> str:
    """One ARC grid; with ``expected``, wrong cells are outlined (a shape mismatch outlines the grid)."""
    if not (isinstance(grid, list) and grid and all(isinstance(r, list) and r for r in grid)):
        return f'<div class="grid"><div class="muted">{esc(label)}: no grid</div></div>'
    rows, cols = len(grid), max(len(r) for r in grid)
    cell = max(4, min(16, 240 // max(rows, cols)))
    shape_ok = (
        expected is not None
        and len(expected) == rows
        and all(len(a) == len(b) for a, b in zip(expected, grid, strict=True))
    )
    rects, wrong = [], 0
    for r, row in enumerate(grid):
        for c, v in enumerate(row):
            color = _ARC_COLORS[v] if isinstance(v, int) and 0 <= v <= 9 else "#ffffff"
            rects.append(f'<rect x="{c * cell}" y="{r * cell}" width="{cell}" height="{cell}" fill="{color}" '
                         f'stroke="#555" stroke-width="0.4"/>')
    if shape_ok:
        for r, row in enumerate(grid):
            for c, v in enumerate(row):
                if expected[r][c] != v:
                    wrong += 1
                    x0, y0, x1, y1 = c * cell + 2, r * cell + 2, (c + 1) * cell - 2, (r + 1) * cell - 2
                    rects.append(
                        f'<g class="wrong"><title>row {r}, col {c}: expected {expected[r][c]}, got {esc(v)}</title>'
                        f'<path d="M{x0} {y0}L{x1} {y1}M{x1} {y0}L{x0} {y1}" stroke="#000" stroke-width="3.2"/>'
                        f'<path d="M{x0} {y0}L{x1} {y1}M{x1} {y0}L{x0} {y1}" stroke="#fff" stroke-width="1.6"/></g>'
                    )
    note = ""
    if expected is not None:
        note = (" correct" if shape_ok and not wrong else f" {wrong} wrong cells" if shape_ok else " wrong shape")
    frame = (
        ' stroke="#000" stroke-width="3" stroke-dasharray="6 3"'
        if expected is not None and not shape_ok
        else ' stroke="none"'
    )
    return (
        f'<div class="grid"><svg class="arc" width="{cols * cell + 4}" height="{rows * cell + 4}" role="img">'
        f'<g transform="translate(2 2)">{"".join(rects)}</g><rect x="1" y="1" width="{cols * cell + 2}" '
        f'height="{rows * cell + 2}" fill="none"{frame}/></svg><div class="small">{esc(label)}{esc(note)}</div></div>'
    )


def draw_arc(ctx: DrawContext) -> str:
    """Each train pair: input, expected output, both attempts with their wrong cells outlined."""
    res = ctx.result
    assert res is not None
    tasks = res.metrics.get("tasks")
    if isinstance(tasks, Mapping):  # a whole split: one square per task, coloured by its score
        cells = []
        for k, (tid, t) in enumerate(sorted(tasks.items())):
            score = t.get("score") if isinstance(t, Mapping) else None
            s = float(score) if isinstance(score, (int, float)) else 0.0
            color = f"hsl({120 * s:.0f},70%,{45 if s else 85}%)"
            cells.append(f'<rect class="arc-task" x="{(k % 30) * 14}" y="{(k // 30) * 14}" width="12" height="12" '
                         f'fill="{color}"><title>{esc(tid)}: {esc(t.get("status") if isinstance(t, Mapping) else "")} '
                         f'{s:.2f}</title></rect>')
        rows = (len(cells) + 29) // 30
        return (f'<svg class="arc-set" width="{30 * 14}" height="{rows * 14}" role="img">{"".join(cells)}</svg>'
                f"<figcaption>{len(cells)} tasks, one square each (green: solved train pairs)</figcaption>")
    from reasearch.evaluators import make

    task = make(ctx.task_id, **dict(ctx.task_params))
    pairs = task.problem.train  # type: ignore[attr-defined]
    attempts = _solution(ctx).get("attempts") or []
    out = []
    for i, pair in enumerate(pairs):
        got = attempts[i] if i < len(attempts) and isinstance(attempts[i], list) else []
        a1 = got[0] if len(got) > 0 else None
        a2 = got[1] if len(got) > 1 else None
        exp = [list(r) for r in pair.output] if pair.output is not None else None
        out.append(f'<div class="pair"><div class="small">train pair {i}</div>'
                   + _grid_svg([list(r) for r in pair.input], "input") + _grid_svg(exp, "expected")
                   + _grid_svg(a1, "attempt 1", exp) + _grid_svg(a2, "attempt 2", exp) + "</div>")
    return ("".join(out) + f"<figcaption>{res.metrics.get('n_solved', '?')} of {len(pairs)} train pairs solved; "
            "wrong cells crossed out, a wrong shape framed by a dashed line</figcaption>")


def draw_training(ctx: DrawContext) -> str:
    """A training task's result: the training curve (the loss lines the run printed, informational) beside
    the trusted metric and the run's timings."""
    res = ctx.result
    assert res is not None
    m = res.metrics
    curve = [(p[0], p[1]) for p in m.get("loss_curve") or [] if isinstance(p, (list, tuple)) and len(p) == 2
             and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in p)]
    chart = (line_chart({"train loss": [float(v) for _, v in curve]},
                        title=f"training curve (steps {curve[0][0]:g}..{curve[-1][0]:g}, as train.py printed it)",
                        xlabel="logged point", ylabel="loss", cls="chart training-curve")
             if len(curve) >= 2 else '<p class="muted">the training run printed no loss curve</p>')
    keys = [k for k in m if k.startswith(("val_", "test_")) and isinstance(m[k], (int, float))]
    keys += [k for k in ("train_s", "eval_s", "gpu_s", "time_budget_s", "last_step", "slot", "data") if k in m]
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(num(m[k]) if isinstance(m[k], float) else m[k])}</td></tr>"
                   for k in keys)
    caption = f"score {num(res.score) if res.score is not None else '-'} (trusted); the curve is what training printed"
    return (f'<div class="row">{chart}<table class="kv small">{rows}</table></div>'
            f"<figcaption>{esc(caption)}</figcaption>")


BUILTIN_DRAWINGS: dict[str, Drawing] = {
    "tabular": draw_training,
    "img": draw_training,
    "atari": draw_training,
    "circle_packing": draw_packing,
    "heilbronn": draw_points,
    "txn_scheduling": draw_schedules,
    "eplb": draw_eplb,
    "arc_agi_2": draw_arc,
}
