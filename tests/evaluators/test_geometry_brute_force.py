"""The geometry tasks' scores, held at the task level to an independent pure-Python brute force.

A kernel that skips one triple (Heilbronn) or one pair or wall (circle packing) passes on random inputs,
where the skipped constraint is almost never the deciding one. Here every triple, pair and wall is made
the deciding one in turn: random point sets with one planted near-degenerate triple (its area far below
every other), random packings with one planted overlap or wall crossing (every other constraint with
slack). ``score_solution`` (what every evaluation ends in) must agree with the brute force on each;
``evaluate`` through the sandbox, in both modes, on a few of them.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from reasearch.engine import SandboxPool
from reasearch.evaluators import Status
from reasearch.evaluators.circle_packing.task import CirclePackingTask
from reasearch.evaluators.heilbronn.task import HeilbronnTask

# ------------------------------------------------------------------------------------------- Heilbronn


def _areas_plain(points: list[list[float]]) -> dict[tuple[int, int, int], float]:
    """Every triangle's area, by the task's formula, in plain Python."""
    out = {}
    for i, j, k in itertools.combinations(range(len(points)), 3):
        (x1, y1), (x2, y2), (x3, y3) = points[i], points[j], points[k]
        out[(i, j, k)] = abs(x1 * (y2 - y3) + x2 * (y3 - y1) + x3 * (y1 - y2)) / 2
    return out


def _planted_points(n: int, triple: tuple[int, int, int], seed: int) -> list[list[float]]:
    """Random points, then the triple's last point moved next to the middle of the other two (area ~1e-13)."""
    rng = np.random.default_rng(seed)
    pts = rng.uniform(0.05, 0.95, size=(n, 2))
    i, j, k = triple
    d = pts[j] - pts[i]
    normal = np.array([-d[1], d[0]]) / np.hypot(*d)
    pts[k] = (pts[i] + pts[j]) / 2 + normal * (2e-13 / np.hypot(*d))
    return pts.tolist()


def _check_heilbronn(task: HeilbronnTask, points: list[list[float]], triple: tuple[int, int, int]) -> None:
    areas = _areas_plain(points)
    brute = min(areas.values())
    smallest = sorted(areas, key=areas.__getitem__)
    # The planted triple decides the score alone (else this case would prove nothing about it).
    assert smallest[0] == triple and areas[smallest[1]] > 1e3 * brute, (triple, areas[smallest[1]], brute)
    res = task.score_solution({"points": points})
    assert res.status is Status.OK
    assert res.score == brute == res.metrics["min_area"], f"triple {triple}: task {res.score!r}, brute force {brute!r}"
    assert res.metrics["smallest_triangles"][0] == {"indices": list(triple), "area": brute}


@pytest.mark.parametrize("n", [11, 15])
def test_heilbronn_score_is_the_brute_force_with_each_triple_deciding(n: int) -> None:
    task = HeilbronnTask(n=n)
    for t, triple in enumerate(itertools.combinations(range(n), 3)):
        _check_heilbronn(task, _planted_points(n, triple, seed=1000 * n + t), triple)


def test_heilbronn_score_is_the_brute_force_on_the_buffered_kernel_path() -> None:
    """n >= 32 takes the kernel's other loops (buffered, AVX2 where the CPU has it): their tails too."""
    n = 34
    task = HeilbronnTask(n=n)
    rng = np.random.default_rng(34)
    triples = {(i, n - 2, n - 1) for i in range(n - 2)} | {(0, 1, 2), (0, 1, n - 1), (n - 4, n - 3, n - 2)}
    triples |= {tuple(sorted(rng.choice(n, 3, replace=False).tolist())) for _ in range(12)}
    for t, triple in enumerate(sorted(triples)):
        _check_heilbronn(task, _planted_points(n, triple, seed=t), triple)


# -------------------------------------------------------------------------------------- circle packing


def _violations_plain(centers: list[list[float]], radii: list[float]) -> list[tuple[float, str, int, int]]:
    """Every broken constraint (excess, kind, i, j), strictly (no tolerance), in plain Python."""
    out = []
    for i, ((x, y), r) in enumerate(zip(centers, radii, strict=True)):
        for kind, excess in (("negative", -r), ("left", r - x), ("bottom", r - y), ("right", x + r - 1.0),
                             ("top", y + r - 1.0)):
            if excess > 0.0:
                out.append((excess, kind, i, -1))
    for i, j in itertools.combinations(range(len(radii)), 2):
        dx, dy = centers[i][0] - centers[j][0], centers[i][1] - centers[j][1]
        excess = (radii[i] + radii[j]) - math.sqrt(dx * dx + dy * dy)
        if excess > 0.0:
            out.append((excess, "overlap", i, j))
    return out


def _slack_packing(n: int, seed: int, side: tuple[int, str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Centers jittered on a grid, radii a tenth of the spacing: every constraint holds with room.
    ``side``: (circle, wall) puts that circle in a cell along that wall."""
    rng = np.random.default_rng(seed)
    m = math.ceil(math.sqrt(n))
    cells = rng.permutation(m * m)[:n].tolist()
    if side is not None:
        i, wall = side
        k = int(rng.integers(m))
        cell = {"left": k * m, "right": k * m + m - 1, "bottom": k, "top": (m - 1) * m + k}[wall]
        if cell in cells:
            cells[cells.index(cell)] = cells[i]
        cells[i] = cell
    centers = np.array([((c % m + 0.5) / m, (c // m + 0.5) / m) for c in cells])
    centers += rng.uniform(-0.15 / m, 0.15 / m, size=centers.shape)
    return centers, np.full(n, 0.1 / m)


def _check_packing(task: CirclePackingTask, centers: np.ndarray, radii: np.ndarray,
                   planted: tuple[str, int, int] | None) -> None:
    c, r = centers.tolist(), radii.tolist()
    broken = _violations_plain(c, r)
    assert [(kind, i, j) for _, kind, i, j in broken] == ([] if planted is None else [planted])
    res = task.score_solution({"centers": c, "radii": r})
    if planted is None:
        assert res.status is Status.OK and res.score == math.fsum(r)
        return
    excess, kind, i, j = broken[0]
    assert res.status is Status.INVALID and res.score is None, f"{planted} not caught: {res.status} {res.score}"
    assert res.metrics["violations"] == 1 and res.metrics["worst_violation"] == kind
    assert res.metrics["worst_violation_amount"] == excess
    who = {"overlap": f"circles {i} and {j} overlap", "negative": f"circle {i} has a negative radius"}.get(
        kind, f"circle {i} crosses the {kind} wall")
    assert who in res.feedback


@pytest.mark.parametrize("n", [26])
def test_circle_packing_validity_is_the_brute_force_with_each_constraint_deciding(n: int) -> None:
    task = CirclePackingTask(n=n)
    centers, radii = _slack_packing(n, seed=n)
    _check_packing(task, centers, radii, None)
    for i, j in itertools.combinations(range(n), 2):  # each pair overlaps alone: j moves next to i
        c = centers.copy()
        c[j] = c[i] + np.array([radii[i] + radii[j] - 1e-9, 0.0]) * (1 if c[i][0] < 0.5 else -1)
        _check_packing(task, c, radii, ("overlap", i, j))
    for i in range(n):  # each wall of each circle crossed alone: the circle, in a cell along it, moves onto it
        for kind, axis, to in (("left", 0, 0.0), ("bottom", 1, 0.0), ("right", 0, 1.0), ("top", 1, 1.0)):
            c, r = _slack_packing(n, seed=n + i, side=(i, kind))
            c[i][axis] = to + (r[i] - 1e-9 if to == 0.0 else -(r[i] - 1e-9))
            _check_packing(task, c, r, (kind, i, -1))
        r = radii.copy()
        r[i] = -1e-12
        _check_packing(task, centers, r, ("negative", i, -1))


# ------------------------------------------------------------------------------ through the sandbox


def test_evaluate_scores_what_the_brute_force_scores(pool: SandboxPool) -> None:
    """The whole path (candidate in the sandbox, data back, trusted scoring) on planted cases."""
    n = 11
    task = HeilbronnTask(n=n)
    for t, triple in enumerate([(0, 1, 2), (n - 3, n - 2, n - 1)]):
        points = _planted_points(n, triple, seed=t)
        res = task.evaluate(f"def run():\n    return {points!r}\n", executor=pool)
        assert res.status is Status.OK and res.provenance is not None and res.provenance.sandbox_mode == pool.mode
        assert res.score == min(_areas_plain(points).values())
    n = 26
    packing = CirclePackingTask(n=n)
    centers, radii = _slack_packing(n, seed=n)
    centers[n - 1] = centers[n - 2] + np.array([radii[0] * 2 - 1e-9, 0.0]) * (1 if centers[n - 2][0] < 0.5 else -1)
    src = f"def run():\n    return {centers.tolist()!r}, {radii.tolist()!r}\n"
    res = packing.evaluate(src, executor=pool)
    assert res.status is Status.INVALID and f"circles {n - 2} and {n - 1} overlap" in res.feedback
    assert _violations_plain(centers.tolist(), radii.tolist())[0][1:] == ("overlap", n - 2, n - 1)
