"""The report's picture of a training task's result (inline SVG, :func:`draw_svg`), declared by the families
that train a model and score it on held-out data (``tabular``, ``img``, ``atari``) where they register their ids.

The curve is what the training script printed (informational, untrusted); the metric beside it is the one
the trusted side measured. Every string is escaped; nothing a candidate wrote runs here.
"""

from __future__ import annotations

from reasearch.evaluators.scores import heldout_text
from reasearch.evaluators.svg import DrawingContext, esc, line_chart, num

__all__ = ["draw_svg"]


def draw_svg(ctx: DrawingContext) -> str:
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
    held_out = heldout_text(m)
    if held_out:  # beside the score: whether the data it was measured on could have been carried in
        rows += f"<tr><th>held-out data</th><td>{esc(held_out)}</td></tr>"
    caption = f"score {num(res.score) if res.score is not None else '-'} (trusted); the curve is what training printed"
    return (f'<div class="row">{chart}<table class="kv small">{rows}</table></div>'
            f"<figcaption>{esc(caption)}</figcaption>")
