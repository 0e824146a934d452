"""One source and one seed give one result, for every deterministic task.

Each candidate draws from ``random`` and ``numpy.random`` (one from torch) without seeding them
itself, as published programs do. Evaluated twice under one seed it must give the same result; its
answer must be the one the same code gives in-process after the generators are seeded with that seed
(so the harness, not luck of the fork, fixed it); another seed must give another answer.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest

import reasearch
from reasearch.evaluators._entry_call import seed_everything
from reasearch.evaluators.result import EvalResult, Status


@pytest.fixture(scope="module")
def sandbox():  # type: ignore[no-untyped-def]
    from reasearch.evaluators.base import default_runner

    return default_runner()


def _stable(res: EvalResult) -> dict[str, Any]:
    """Everything in a result but the measured times."""
    d = res.to_dict()
    d.pop("wall_s")
    d.pop("cpu_s")
    return d


def _in_process(source: str, entry: str, seed: int, *args: Any, import_numpy: bool = True) -> Any:
    module = types.ModuleType("cand")
    exec(compile(source, "cand.py", "exec"), module.__dict__)  # noqa: S102 - our own candidate
    seed_everything(seed, import_numpy=import_numpy)
    return getattr(module, entry)(*args)


PACKER = """
import random
import numpy as np

def construct_packing(num_circles):
    k = 6
    base = np.array([((i % k) + 0.5) / k for i in range(num_circles)]), \\
        np.array([((i // k) + 0.5) / k for i in range(num_circles)])
    jitter = np.random.uniform(-0.02, 0.02, size=(num_circles, 2))
    centers = np.stack(base, axis=1) + jitter
    radii = np.array([0.03 + 0.02 * random.random() for _ in range(num_circles)])
    return centers, radii
"""


def _twice_and_other_seed(task: Any, source: str, sandbox: Any) -> tuple[EvalResult, EvalResult, EvalResult]:
    a = task.evaluate(source, seed=5, executor=sandbox)
    b = task.evaluate(source, seed=5, executor=sandbox)
    c = task.evaluate(source, seed=6, executor=sandbox)
    assert a.status is Status.OK, a.feedback
    assert _stable(a) == _stable(b)
    return a, b, c


def test_circle_packing_drawing_from_np_random(sandbox):
    task = reasearch.make("circle_packing/n26-v1")
    a, _, c = _twice_and_other_seed(task, PACKER, sandbox)
    centers, radii = _in_process(PACKER, "construct_packing", 5, 26)
    assert a.solution["centers"] == centers.tolist() and a.solution["radii"] == radii.tolist()
    assert c.status is Status.OK and c.score != a.score


def test_circle_packing_drawing_from_torch(sandbox):
    torch = pytest.importorskip("torch")
    src = (
        "import torch\n"
        "def run(n):\n"
        "    k = 6\n"
        "    grid = torch.tensor([[((i % k) + 0.5) / k, ((i // k) + 0.5) / k] for i in range(n)], "
        "dtype=torch.float64)\n"
        "    return (grid + (torch.rand(n, 2, dtype=torch.float64) - 0.5) * 0.04).numpy(), "
        "(0.03 + 0.02 * torch.rand(n, dtype=torch.float64)).numpy()\n"
    )
    task = reasearch.make("circle_packing/n26-v1")
    a = task.evaluate(src, seed=5, executor=sandbox)
    b = task.evaluate(src, seed=5, executor=sandbox)
    assert a.status is Status.OK, a.feedback
    assert _stable(a) == _stable(b)
    assert isinstance(torch.rand(1), torch.Tensor)
    _, radii = _in_process(src, "run", 5, 26)
    assert a.solution["radii"] == radii.tolist()


def test_heilbronn_drawing_from_np_random(sandbox):
    src = "import numpy as np\ndef run():\n    return np.random.rand(12, 2)\n"
    task = reasearch.make("heilbronn/n12-v1")
    a, _, c = _twice_and_other_seed(task, src, sandbox)
    assert a.solution["points"] == _in_process(src, "run", 5).tolist()
    assert c.solution["points"] != a.solution["points"]


def test_txn_drawing_from_both_generators(sandbox):
    src = ("import random\nimport numpy as np\n"
           "def get_best_schedule(workload, num_seqs):\n"
           "    order = [int(t) for t in np.random.permutation(workload.num_txns)]\n"
           "    i, j = random.randrange(workload.num_txns), random.randrange(workload.num_txns)\n"
           "    order[i], order[j] = order[j], order[i]\n"
           "    return order\n")
    task = reasearch.make("txn_scheduling/v1")
    a, _, c = _twice_and_other_seed(task, src, sandbox)
    module = types.ModuleType("cand")
    exec(compile(src, "cand.py", "exec"), module.__dict__)  # noqa: S102 - our own candidate
    seed_everything(5)
    workloads = task._workloads()
    expected = [module.get_best_schedule(w, 10) for w in workloads]
    assert a.solution["schedules"] == expected
    assert a.score == sum(w.get_opt_seq_cost(s) for w, s in zip(workloads, expected, strict=True))
    assert c.solution["schedules"] != a.solution["schedules"]


def test_arc_drawing_from_random(sandbox, shared_data):
    from reasearch.evaluators.arc_agi_2 import ArcTask

    src = ("import random\nimport numpy as np\n"
           "def transform_grid_attempt_1(grid):\n"
           "    return [[random.randrange(10) for _ in row] for row in grid]\n"
           "def transform_grid_attempt_2(grid):\n"
           "    return np.random.randint(0, 10, size=(len(grid), len(grid[0]))).tolist()\n")
    task = ArcTask(task_id="00576224", data_dir=str(shared_data / "arc-agi-2"))
    a, _, c = _twice_and_other_seed(task, src, sandbox)
    module = types.ModuleType("cand")
    exec(compile(src, "cand.py", "exec"), module.__dict__)  # noqa: S102 - our own candidate
    seed_everything(5)
    expected = []
    for pair in task.problem.train:  # the harness calls attempt 1 then 2 on each input, in order
        grid = [list(r) for r in pair.input]
        expected.append([module.transform_grid_attempt_1(grid), module.transform_grid_attempt_2(grid)])
    assert a.solution["attempts"] == expected
    assert c.solution["attempts"] != a.solution["attempts"]


def test_seed_programs_evaluate_identically_twice(sandbox):
    """Every deterministic registered family: the seed program, twice under one seed."""
    for task_id in ("circle_packing/n26-v1", "heilbronn/n12-v1", "txn_scheduling/v1"):
        task = reasearch.make(task_id)
        assert task.spec.deterministic
        a = task.evaluate(task.seed_program(), seed=3, executor=sandbox)
        b = task.evaluate(task.seed_program(), seed=3, executor=sandbox)
        assert a.status is Status.OK and _stable(a) == _stable(b), task_id
    assert np.random.get_state() is not None
