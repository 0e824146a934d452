"""The training-task drawing (``tabular``, ``img``): the printed loss curve beside the trusted metric."""

from __future__ import annotations

import pytest

from reasearch.evaluators.result import EvalResult, Status
from reasearch.reports import DrawContext, draw_solution


def _res(metrics: dict[str, object]) -> EvalResult:
    return EvalResult(status=Status.OK, score=0.91, normalized_score=None, metrics=metrics, feedback="",
                      wall_s=0.0, cpu_s=0.0, solution=None)


@pytest.mark.parametrize("task_id", ["img/folder-v1", "tabular/csv-v2", "atari/qbert-v1"])
def test_the_curve_and_the_trusted_metric_are_drawn(task_id: str) -> None:
    metrics = {"loss_curve": [[0, 2.3], [5, 1.9], [10, 1.2], [15, "x"]], "test_accuracy": 0.91, "train_s": 0.3,
               "val_rmse": 6.4, "slot": "<b>cpu</b>"}
    html = draw_solution(DrawContext(task_id, {}, _res(metrics)))
    family = task_id.split("/")[0]
    assert f'data-family="{family}"' in html and 'class="chart training-curve"' in html
    assert html.count("<polyline") == 1 and "steps 0..10" in html  # the malformed point is left out
    assert "test_accuracy" in html and "val_rmse" in html and "&lt;b&gt;cpu" in html and "<b>cpu" not in html
    none = draw_solution(DrawContext(task_id, {}, _res({"test_accuracy": 0.5})))
    assert "printed no loss curve" in none and f'data-family="{family}"' in none
