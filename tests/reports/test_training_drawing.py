"""The training-task drawing (``tabular``, ``img``): the printed loss curve beside the trusted metric."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reasearch.evaluators.result import EvalResult, Status
from reasearch.reports import DrawContext, draw_solution


def _res(metrics: dict[str, object]) -> EvalResult:
    return EvalResult(status=Status.OK, score=0.91, normalized_score=None, metrics=metrics, feedback="",
                      wall_s=0.0, cpu_s=0.0, solution=None)


@pytest.mark.parametrize("task_id", ["img/folder-v2", "tabular/csv-v2", "atari/qbert-v1"])
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


def test_the_drawing_and_the_report_say_whether_the_held_out_data_is_public() -> None:
    """A score on public held-out data (``img`` with ``data=digits``) says so beside the score, in the drawing,
    the run report's summary and the CLI's result table; a private one says sealed; a task that states
    nothing shows nothing."""
    from rich.console import Console

    from reasearch._cli._shared import result_table
    from reasearch.evaluators.scores import heldout_text

    public = _res({"test_accuracy": 1.0, "heldout_public": True, "sealed": False})
    private = _res({"test_accuracy": 0.8, "heldout_public": False, "sealed": True})
    html = draw_solution(DrawContext("img/folder-v2", {}, public))
    assert "PUBLIC held-out data" in html and "not sealed" in html
    assert "private held-out data: sealed" in draw_solution(DrawContext("img/folder-v2", {}, private))
    assert "held-out data" not in draw_solution(DrawContext("img/folder-v2", {}, _res({"test_accuracy": 0.5})))
    assert heldout_text({"heldout_public": True, "sealed": True}).endswith("not sealed")  # public is never sealed
    console = Console(width=200, record=True)
    console.print(result_table("img/folder-v2", public, None))
    shown = console.export_text()
    assert "held-out data" in shown and "PUBLIC held-out data" in shown and "not sealed" in shown


def test_the_run_report_says_whether_the_best_score_is_on_public_held_out_data(tmp_path: Path, executor: Any) -> None:
    """The report's summary names the held-out data of the best result: public (never sealed) in a warning."""
    import dataclasses

    from reasearch.evaluators.testing import ToyTask, toy_candidate
    from reasearch.reports._model import load_run
    from reasearch.reports._sections import summary_html
    from reasearch.runs.run import Run
    from reasearch.runs.store import open_store

    with open_store(tmp_path) as store:
        run = Run.create(store, task=ToyTask(), budget={"evaluations": 5}, executor=executor)
        run.evaluate(toy_candidate([1.0, 2.0, 3.0, 4.0]), step=0)
        run.finish()
        view = load_run(store, run.id)
    assert view.best is not None and "held-out data" not in summary_html(view)  # the toy task states nothing
    for metrics, words in (({"heldout_public": True, "sealed": False}, "<span class='warn'>PUBLIC held-out data"),
                           ({"heldout_public": False, "sealed": True}, "private held-out data: sealed")):
        best = dataclasses.replace(view.best, result=view.best.result.with_(metrics=metrics))
        html = summary_html(dataclasses.replace(view, best=best))
        assert "<th>held-out data</th>" in html and words in html, html[-600:]
