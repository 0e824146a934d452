"""The report's picture of an EPLB result (inline SVG, :func:`draw_svg`, declared where the id is registered):
per-GPU load of the worst window before and after the candidate's placement, and the balance per window.
Only numbers of the stored result are read; nothing a candidate wrote runs here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from reasearch.evaluators.svg import DrawingContext, bar_chart, line_chart

__all__ = ["draw_svg"]


def draw_svg(ctx: DrawingContext) -> str:
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
