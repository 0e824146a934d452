"""Heilbronn: strict square, minimum area recomputed by the kernel, feedback, harness, seed, pictures."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import reasearch
from reasearch.evaluators import Status
from reasearch.evaluators.heilbronn import harness
from reasearch.evaluators.heilbronn.task import BEST_KNOWN, SEED_SCORES, HeilbronnTask


def _min_area_plain(points: np.ndarray) -> float:
    """An independent (itertools) definition of the score."""
    best = math.inf
    for (x1, y1), (x2, y2), (x3, y3) in itertools.combinations(points.tolist(), 3):
        best = min(best, abs(x1 * (y2 - y3) + x2 * (y3 - y1) + x3 * (y1 - y2)) / 2)
    return best


def test_registered_ids_and_best_known_table() -> None:
    ids = [i for i in reasearch.list_tasks() if i.startswith("heilbronn/")]
    assert ids == [f"heilbronn/n{n}-v1" for n in range(11, 16)]
    assert reasearch.make("heilbronn/n11-v1").spec.best_known == 1 / 27
    assert reasearch.make("heilbronn/n15-v1").spec.best_known == 0.0212105410054906
    assert reasearch.make("heilbronn/n14-v1").spec.best_known_source == "Beyleveld 2006"


def test_square_corners_and_center() -> None:
    task = HeilbronnTask(n=5)
    pts = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, 0.5]])
    res = task.score_solution({"points": pts})
    # Corners and the center: the diagonals make (0, 3, 4) and (1, 2, 4) collinear.
    assert res.status is Status.OK and res.score == 0.0
    assert res.metrics["smallest_triangles"][0] == {"indices": [0, 3, 4], "area": 0.0}
    pts[4] = [0.5, 0.25]
    res = task.score_solution({"points": pts})
    assert res.score == 0.125 == _min_area_plain(pts)
    assert "(0, 1, 4): 0.125" in res.feedback


@pytest.mark.parametrize("seed", range(5))
def test_random_points_score_is_the_plain_minimum(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(11, 16))
    pts = rng.uniform(size=(n, 2))
    res = reasearch.make(f"heilbronn/n{n}-v1").score_solution({"points": pts.tolist()})
    assert res.status is Status.OK
    assert res.score == _min_area_plain(pts)
    assert res.normalized_score == res.score / BEST_KNOWN[n]
    areas = [t["area"] for t in res.metrics["smallest_triangles"]]
    assert areas == sorted(areas) and areas[0] == res.score and len(areas) == 5


@pytest.mark.parametrize(
    ("pts", "needle"),
    [
        ([[0.5, 0.5]] * 3 + [[1.0 + 2**-52, 0.5]], "point 3"),
        ([[0.5, 0.5]] * 3 + [[0.5, -1e-300]], "outside"),
        ([[0.5, 0.5]] * 3 + [[math.nan, 0.5]], "non-finite"),
        ([[0.5, 0.5]] * 3, "shape (4, 2)"),
        ([["a", "b"]] * 4, "numbers"),
    ],
)
def test_invalid_points(pts: list[list[object]], needle: str) -> None:
    res = HeilbronnTask(n=4).score_solution({"points": pts})
    assert res.status is Status.INVALID and res.score is None
    assert needle in res.feedback


def test_boundary_points_are_inside() -> None:
    pts = [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    assert HeilbronnTask(n=4).score_solution({"points": pts}).score == 0.5


def test_harness_shapes_and_seed() -> None:
    pts = np.array([[0.1, 0.2], [0.3, 0.4], [0.9, 0.1]])
    for ret in (pts, pts.tolist(), {"points": pts}, (pts, "extra")):
        out = harness.run_candidate(lambda ret=ret: ret, {"seed": 1})
        assert out["points"].tolist() == pts.tolist() and out["points"].dtype == np.float64
    got = harness.run_candidate(lambda seed: [[seed, 0.0]], {"seed": 4})
    assert got["points"].tolist() == [[4.0, 0.0]]
    with pytest.raises(TypeError, match="returned None"):
        harness.run_candidate(lambda: None, {})
    with pytest.raises(TypeError, match="'points'"):
        harness.run_candidate(lambda: {"pts": 1}, {})


def test_seed_scores_are_recorded_for_every_size() -> None:
    for n in range(11, 16):
        spec = reasearch.make(f"heilbronn/n{n}-v1").spec
        assert spec.seed_score == SEED_SCORES[n]
        assert 0 < spec.seed_score < spec.best_known


def test_render_points_writes_png(tmp_path) -> None:  # type: ignore[no-untyped-def]
    task = HeilbronnTask(n=4)
    res = task.score_solution({"points": [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.6, 0.7]]})
    data = task.render_png(res, tmp_path / "h.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000


@pytest.fixture(scope="module")
def sandbox():  # type: ignore[no-untyped-def]
    """The engine's process-wide warm pool (what ``Task.evaluate`` uses by default)."""
    from reasearch.evaluators.base import default_runner

    return default_runner()


def test_seed_program_is_deterministic_under_its_seed(sandbox) -> None:  # type: ignore[no-untyped-def]
    task = reasearch.make("heilbronn/n12-v1")
    a = task.evaluate(task.seed_program(), seed=0, executor=sandbox)
    b = task.evaluate(task.seed_program(), seed=0, executor=sandbox)
    c = task.evaluate(task.seed_program(), seed=1, executor=sandbox)
    assert a.status is Status.OK and a.score == SEED_SCORES[12] == b.score
    assert c.status is Status.OK and c.score != a.score
    assert a.solution is not None and _min_area_plain(np.array(a.solution["points"])) == a.score
