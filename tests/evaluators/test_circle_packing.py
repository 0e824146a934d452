"""Circle packing: strict scoring from raw arrays, feedback, harness coercion, pictures, sandboxed runs."""

from __future__ import annotations

import math

import numpy as np
import pytest

import reasearch
from reasearch.evaluators import Status
from reasearch.evaluators.circle_packing import harness
from reasearch.evaluators.circle_packing.task import BEST_KNOWN, SEED_SCORES, CirclePackingTask

QUARTERS = np.array([[0.25, 0.25], [0.75, 0.25], [0.25, 0.75], [0.75, 0.75]])


def _grid(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The seed program's layout, rebuilt here independently."""
    m = math.ceil(math.sqrt(n))
    centers = np.array([((k % m + 0.5) / m, (k // m + 0.5) / m) for k in range(n)])
    return centers, np.full(n, 0.5 / m * (1 - 1e-9))


def test_registered_ids_and_best_known_table() -> None:
    ids = [i for i in reasearch.list_tasks() if i.startswith("circle_packing/")]
    assert ids == [f"circle_packing/n{n}-v1" for n in range(23, 33)]
    spec = reasearch.make("circle_packing/n26-v1").spec
    assert spec.best_known == 2.635983084918
    assert spec.direction == "maximize"
    assert spec.entries == ("run", "run_packing", "construct_packing")
    assert reasearch.make("circle_packing/n32-v1").spec.best_known == 2.939572771205


def test_exact_packing_scores_its_sum() -> None:
    task = CirclePackingTask(n=4)
    res = task.score_solution({"centers": QUARTERS, "radii": np.full(4, 0.25)})
    assert res.status is Status.OK
    assert res.score == 1.0
    assert res.normalized_score is None  # no best known for n=4
    assert res.metrics["lp_sum"] == pytest.approx(1.0, abs=1e-9)
    assert res.metrics["lp_sum"] <= 1.0
    assert res.solution == {"centers": QUARTERS.tolist(), "radii": [0.25] * 4}


@pytest.mark.parametrize("n", range(23, 33))
def test_seed_layout_score_and_normalization(n: int) -> None:
    centers, radii = _grid(n)
    task = reasearch.make(f"circle_packing/n{n}-v1")
    res = task.score_solution({"centers": centers, "radii": radii})
    assert res.status is Status.OK
    assert res.score == math.fsum(radii.tolist()) == SEED_SCORES[n]
    assert res.normalized_score == res.score / BEST_KNOWN[n]
    assert res.metrics["lp_sum"] >= res.score  # the LP can only do better for the same centers


def test_overlap_feedback_names_pair_and_amount() -> None:
    task = CirclePackingTask(n=4)
    radii = np.array([0.25, 0.25, 0.25, 0.25])
    centers = QUARTERS.copy()
    centers[1, 0] = 0.625  # circles 0 and 1 now overlap by 0.125
    radii[1] = 0.25
    res = task.score_solution({"centers": centers, "radii": radii})
    assert res.status is Status.INVALID and res.score is None
    assert "circles 0 and 1 overlap" in res.feedback and "0.125" in res.feedback
    assert res.metrics["worst_violation"] == "overlap"
    assert res.metrics["worst_violation_amount"] == 0.125
    assert "lp_sum" in res.feedback


def test_no_tolerance_one_ulp_past_the_wall() -> None:
    task = CirclePackingTask(n=2)
    centers = np.array([[0.25, 0.5], [0.75, 0.5]])
    assert task.score_solution({"centers": centers, "radii": [0.25, 0.25]}).score == 0.5
    res = task.score_solution({"centers": centers, "radii": [0.25, 0.25 + 2**-52]})  # x + r = 1 + 2**-52
    assert res.status is Status.INVALID
    # Wall and pair both break by 2**-52; on a tie the wall (scanned first) is named.
    assert "circle 1 crosses the right wall (x + r > 1) by 2.22045e-16; 2 constraint(s)" in res.feedback


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (None, "'centers' and 'radii'"),
        ({"centers": QUARTERS}, "'centers' and 'radii'"),
        ({"centers": QUARTERS[:3], "radii": np.full(4, 0.1)}, "shape (4, 2)"),
        ({"centers": QUARTERS, "radii": np.full(5, 0.1)}, "shape (4,)"),
        ({"centers": QUARTERS.astype(str), "radii": np.full(4, 0.1)}, "numbers"),
        ({"centers": QUARTERS, "radii": [0.1, 0.1, math.nan, 0.1]}, "non-finite"),
        ({"centers": QUARTERS, "radii": [0.1, -0.1, 0.1, 0.1]}, "negative radius"),
        ({"centers": [[0.25, 0.25]] * 3 + [[1.5, 0.5]], "radii": [0.1] * 4}, "right wall"),
    ],
)
def test_invalid_answers(data: object, needle: str) -> None:
    res = CirclePackingTask(n=4).score_solution(data)
    assert res.status is Status.INVALID
    assert needle in res.feedback


def test_harness_accepts_published_shapes() -> None:
    c, r = QUARTERS, np.full(4, 0.25)
    for ret in ((c, r), (c, r, 1.0), [c.tolist(), r.tolist()], {"centers": c, "radii": r}):
        out = harness.run_candidate(lambda ret=ret: ret, {"seed": 3})
        assert out["centers"].dtype == np.float64 and out["centers"].flags.c_contiguous
        assert out["centers"].tolist() == c.tolist() and out["radii"].tolist() == r.tolist()
    seen = []
    harness.run_candidate(lambda seed: seen.append(seed) or (c, r), {"seed": 7})
    harness.run_candidate(lambda **kw: seen.append(kw["seed"]) or (c, r), {"seed": None})
    assert seen == [7, 0]
    with pytest.raises(TypeError, match=r"must return \(centers, radii\)"):
        harness.run_candidate(lambda: None, {})
    with pytest.raises(TypeError, match="numbers"):
        harness.run_candidate(lambda: (["a"], ["b"]), {})
    # Ragged numbers are a wrong answer, not a crash: passed on as lists for the scorer to reject.
    ragged = harness.run_candidate(lambda: ([[0.5, 0.5], [0.25]], np.array([1, 2])), {})
    assert ragged["centers"] == [[0.5, 0.5], [0.25]] and ragged["radii"].tolist() == [1.0, 2.0]
    res = CirclePackingTask(n=2).score_solution(ragged)
    assert res.status is Status.INVALID and "centers is not an array of numbers" in res.feedback


def test_describe_explains_the_lp_library_call() -> None:
    text = CirclePackingTask(n=26).describe()
    assert "optimal_radii" in text and "run_packing" in text and "NO tolerance" in text


def test_seed_program_source_is_valid_python_for_each_n() -> None:
    for n in range(23, 33):
        src = CirclePackingTask(n=n).seed_program()
        compile(src, "seed.py", "exec")
        assert f"N = {n}\n" in src


def test_render_packing_writes_png(tmp_path) -> None:  # type: ignore[no-untyped-def]
    task = CirclePackingTask(n=4)
    res = task.score_solution({"centers": QUARTERS, "radii": np.full(4, 0.25)})
    out = task.render_png(res, tmp_path / "p.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000
    bad = task.score_solution(None)
    with pytest.raises(ValueError, match="no solution"):
        task.render_png(bad, tmp_path / "q.png")


# ------------------------------------------------------------------------------ through the sandbox


@pytest.fixture(scope="module")
def sandbox():  # type: ignore[no-untyped-def]
    """The engine's process-wide warm pool (what ``Task.evaluate`` uses by default)."""
    from reasearch.evaluators.base import default_runner

    return default_runner()


def test_seed_program_through_the_sandbox(sandbox) -> None:  # type: ignore[no-untyped-def]
    task = reasearch.make("circle_packing/n26-v1")
    res = task.evaluate(task.seed_program(), seed=0, executor=sandbox)
    assert res.status is Status.OK
    assert res.score == SEED_SCORES[26]
    assert res.provenance is not None and res.provenance.task_id == "circle_packing/n26-v1"
    assert res.wall_s > 0


def test_candidate_may_call_optimal_radii_in_the_sandbox(sandbox) -> None:  # type: ignore[no-untyped-def]
    src = (
        "import numpy as np\n"
        "from reasearch.evaluators.circle_packing import optimal_radii\n"
        "def construct_packing():\n"
        "    c = np.array([[0.25, 0.25], [0.75, 0.25], [0.25, 0.75], [0.75, 0.75]])\n"
        "    return c, optimal_radii(c), 'ignored'\n"
    )
    res = CirclePackingTask(n=4).evaluate(src, executor=sandbox)
    assert res.status is Status.OK
    assert res.score == pytest.approx(1.0, abs=1e-8) and res.score <= 1.0


def test_ragged_answer_is_invalid_through_the_sandbox(sandbox) -> None:  # type: ignore[no-untyped-def]
    src = "def run():\n    return [[0.5, 0.5], [0.1]], [0.1, 0.1]\n"
    res = CirclePackingTask(n=2).evaluate(src, executor=sandbox)
    assert res.status is Status.INVALID and "not an array of numbers" in res.feedback


def test_candidate_cannot_claim_its_own_score(sandbox) -> None:  # type: ignore[no-untyped-def]
    src = (
        "def run():\n"
        "    return [[0.5, 0.5]] * 4, [0.5] * 4, 99.0\n"  # a reported 'sum' is ignored; overlap is caught
    )
    res = CirclePackingTask(n=4).evaluate(src, executor=sandbox)
    assert res.status is Status.INVALID and res.score is None


def test_evaluator_hash_covers_the_kernel_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    import reasearch.native.geometry as geometry

    task = CirclePackingTask(n=26)
    before = task.evaluator_hash()
    assert before == CirclePackingTask(n=26).evaluator_hash() and len(before) == 16
    monkeypatch.setattr(geometry, "kernel_source_hash", lambda: "changed-kernels")
    assert task.evaluator_hash() != before
