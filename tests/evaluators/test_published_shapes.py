"""Published programs run unchanged: entry points in the shapes people publish, for every task family.

Every candidate here is our own, written in a published API shape (``construct_packing(num_circles)``,
``get_best_schedule(workload)`` without ``num_seqs``, ``heilbronn(num_points)``, torch EPLB programs),
plus the shapes that cannot be called, which must end in a status whose feedback names the accepted
forms (never an engine exception).
"""

from __future__ import annotations

import inspect
import json
import math

import numpy as np
import pytest

import reasearch
from reasearch.evaluators._entry_call import EntryCallError, bind_entry, call_entry, seed_everything
from reasearch.evaluators.circle_packing.harness import ENTRY_ARGS as PACKING_ARGS
from reasearch.evaluators.eplb.harness import ENTRY_ARGS as EPLB_ARGS
from reasearch.evaluators.heilbronn.harness import ENTRY_ARGS as HEILBRONN_ARGS
from reasearch.evaluators.result import Status
from reasearch.evaluators.txn_scheduling.harness import ENTRY_ARGS as TXN_ARGS


@pytest.fixture(scope="module")
def sandbox():  # type: ignore[no-untyped-def]
    from reasearch.evaluators.base import default_runner

    return default_runner()


# ------------------------------------------------------------------------------ binding, in-process


def test_packing_shapes_get_what_they_ask_for_by_name():
    got = {}

    def no_args():
        got["no_args"] = ()

    def num_circles(num_circles):
        got["num_circles"] = num_circles

    def n_and_seed(n, seed=None):
        got["n_and_seed"] = (n, seed)

    def kw_only(*, seed, num_circles=3):
        got["kw_only"] = (seed, num_circles)

    def star(*args, **kwargs):
        got["star"] = (args, kwargs)

    def upper(N):  # noqa: N803 - published programs spell it so too
        got["upper"] = N

    for fn in (no_args, num_circles, n_and_seed, kw_only, star, upper):
        call_entry(fn, {"n": 26, "seed": 7}, PACKING_ARGS)
    assert got == {"no_args": (), "num_circles": 26, "n_and_seed": (26, 7), "kw_only": (7, 26),
                   "star": ((), {"seed": 7}), "upper": 26}


def test_heilbronn_takes_num_points():
    assert call_entry(lambda num_points: num_points * 2, {"n": 12, "seed": 0}, HEILBRONN_ARGS) == 24
    assert call_entry(lambda n_points, seed: (n_points, seed), {"n": 13, "seed": 4}, HEILBRONN_ARGS) == (13, 4)


def test_txn_shapes_positional_and_by_name():
    wl, k = object(), 10
    values = {"workload": wl, "num_seqs": k, "seed": 3}
    assert call_entry(lambda workload: workload, values, TXN_ARGS) is wl
    assert call_entry(lambda workload, num_seqs: (workload, num_seqs), values, TXN_ARGS) == (wl, k)
    assert call_entry(lambda w, k: (w, k), values, TXN_ARGS) == (wl, k)  # unknown names: published order
    assert call_entry(lambda w, seed: (w, seed), values, TXN_ARGS) == (wl, 3)
    assert call_entry(lambda *a: a, values, TXN_ARGS) == (wl, k)
    assert call_entry(lambda num_seqs, workload: (workload, num_seqs), values, TXN_ARGS) == (wl, k)  # by name

    def positional_only(workload, num_seqs=1, /):
        return workload, num_seqs

    assert call_entry(positional_only, values, TXN_ARGS) == (wl, k)


def test_eplb_names_in_any_order_and_published_positional_order():
    values = {"weight": "W", "num_replicas": 288, "num_groups": 8, "num_nodes": 4, "num_gpus": 32, "seed": 0}
    assert call_entry(
        lambda weight, num_replicas, num_groups, num_nodes, num_gpus: (
            weight,
            num_replicas,
            num_groups,
            num_nodes,
            num_gpus,
        ),
        values,
        EPLB_ARGS,
    ) == ("W", 288, 8, 4, 32)
    assert call_entry(lambda w, r, g, n, p: (w, r, g, n, p), values, EPLB_ARGS) == ("W", 288, 8, 4, 32)
    assert call_entry(lambda weight, *rest: (weight, rest), values, EPLB_ARGS) == ("W", (288, 8, 4, 32))
    assert call_entry(lambda weight, num_gpus, num_nodes, num_groups, num_replicas:
                      (num_replicas, num_groups, num_nodes, num_gpus), values, EPLB_ARGS) == (288, 8, 4, 32)
    assert call_entry(lambda weight, num_replicas, num_groups, num_nodes, num_ranks: num_ranks, values,
                      EPLB_ARGS) == 32


@pytest.mark.parametrize("fn, spec, missing", [
    (lambda foo: foo, PACKING_ARGS, "foo"),
    (lambda n, bar: n, HEILBRONN_ARGS, "bar"),
    (lambda: None, TXN_ARGS, "workload"),
    (lambda workload, num_seqs, extra: None, TXN_ARGS, "extra"),
    (lambda weight, num_replicas: None, EPLB_ARGS, "num_groups"),
    # EPLB offers no seed: it selects the synthetic trace, which the candidate must not learn
    (lambda weight, num_replicas, num_groups, num_nodes, num_gpus, seed: None, EPLB_ARGS, "seed"),
])
def test_entry_that_cannot_be_called_names_the_accepted_forms(fn, spec, missing):
    with pytest.raises(EntryCallError, match="accepted forms") as err:
        bind_entry(fn, spec)
    assert missing in str(err.value)


def test_keyword_only_unknown_parameter_is_refused():
    def f(*, secret):
        return secret

    with pytest.raises(EntryCallError, match="'secret'"):
        bind_entry(f, PACKING_ARGS)


def test_signature_is_read_once_per_binding():
    calls = []

    def f(workload, num_seqs):
        calls.append((workload, num_seqs))

    call = bind_entry(f, TXN_ARGS)
    for i in range(3):
        call({"workload": i, "num_seqs": 10, "seed": 0})
    assert calls == [(0, 10), (1, 10), (2, 10)]
    assert list(inspect.signature(f).parameters) == ["workload", "num_seqs"]


def test_seed_everything_seeds_random_numpy_and_loaded_torch():
    import random

    torch = pytest.importorskip("torch")
    seed_everything(123)
    a = (random.random(), np.random.rand(), float(torch.rand(1)))
    seed_everything(123)
    b = (random.random(), np.random.rand(), float(torch.rand(1)))
    seed_everything(124)
    c = (random.random(), np.random.rand(), float(torch.rand(1)))
    assert a == b and all(x != y for x, y in zip(a, c, strict=False))


# ------------------------------------------------------------------------------ through the sandbox

_GRID = """
import numpy as np

def {name}({params}):
    k = int(np.ceil(np.sqrt({n})))
    r = 0.5 / k
    pts = [((i % k) * 2 * r + r, (i // k) * 2 * r + r) for i in range({n})]
    return np.array(pts), np.full({n}, r * (1 - 1e-9))
"""


@pytest.mark.parametrize("name, params, n_expr", [
    ("construct_packing", "num_circles", "num_circles"),
    ("construct_packing", "n", "n"),
    ("run_packing", "", "26"),
    ("run", "n, seed=0", "n"),
])
def test_circle_packing_published_shapes(sandbox, name, params, n_expr):
    task = reasearch.make("circle_packing/n26-v1")
    res = task.evaluate(_GRID.format(name=name, params=params, n=n_expr), executor=sandbox)
    assert res.status is Status.OK, res.feedback
    assert res.score == pytest.approx(26 * (1 / 12) * (1 - 1e-9))


def test_circle_packing_uncallable_entry_names_the_forms(sandbox):
    task = reasearch.make("circle_packing/n26-v1")
    res = task.evaluate(_GRID.format(name="construct_packing", params="circles, radius", n="circles"),
                        executor=sandbox)
    assert res.status is Status.CRASH and res.score is None
    assert "accepted forms" in res.feedback and "construct_packing(num_circles)" in res.feedback


def test_heilbronn_num_points_shape(sandbox):
    src = ("import numpy as np\n"
           "def heilbronn(num_points):\n"
           "    t = np.arange(num_points) / num_points\n"
           "    return np.stack([t, (t * t * 7.3) % 1.0], axis=1)\n")
    task = reasearch.make("heilbronn/n12-v1")
    res = task.evaluate(src, executor=sandbox)
    assert res.status is Status.OK, res.feedback
    t = np.arange(12) / 12
    from reasearch.native.geometry import min_triangle_area

    assert res.score == min_triangle_area(np.stack([t, (t * t * 7.3) % 1.0], axis=1))


def test_txn_without_num_seqs(sandbox):
    task = reasearch.make("txn_scheduling/v1")
    src = ("def get_best_schedule(workload):\n"
           "    order = list(range(workload.num_txns))\n"
           "    return workload.get_opt_seq_cost(order), order\n")
    res = task.evaluate(src, executor=sandbox)
    assert res.status is Status.OK, res.feedback
    assert res.score == res.metrics["sequential_makespan"] == 537


def test_txn_uncallable_entry_is_a_crash_naming_the_forms(sandbox):
    task = reasearch.make("txn_scheduling/v1")
    res = task.evaluate("def get_best_schedule():\n    return []\n", executor=sandbox)
    assert res.status is Status.CRASH and res.score is None
    assert "accepted forms" in res.feedback and "get_best_schedule(workload)" in res.feedback


TORCH_EPLB = '''
import torch

from reasearch.native.eplb import rebalance_experts as _reference


def rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus):
    weight = weight.float().cpu()  # published programs are written for torch tensors
    order = torch.sort(weight, dim=-1, descending=True).indices  # torch calls, as they use
    assert order.shape == weight.shape
    phy2log, log2phy, logcnt = _reference(weight.numpy(), num_replicas, num_groups, num_nodes, num_gpus)
    return torch.from_numpy(phy2log), torch.from_numpy(log2phy), torch.from_numpy(logcnt)
'''


def test_eplb_torch_program_runs_with_default_parameters(sandbox):
    task = reasearch.make("eplb/v1", num_windows=4)
    res = task.evaluate(TORCH_EPLB, executor=sandbox)
    assert res.status is Status.OK, res.feedback
    assert res.metrics["weight_type"] == "torch"
    seed = task.evaluate(task.seed_program(), executor=sandbox)  # the NumPy seed: same placements
    assert seed.metrics["weight_type"] == "numpy"
    assert res.metrics["bal_expert"] == seed.metrics["bal_expert"]
    assert res.metrics["bal_gpu"] == seed.metrics["bal_gpu"]


def test_eplb_torch_detection():
    from reasearch.evaluators.eplb.task import candidate_uses_torch

    assert candidate_uses_torch("import torch\n")
    assert candidate_uses_torch("def f():\n    from torch import nn\n")
    assert candidate_uses_torch("import numpy, torch.nn.functional as F\n")
    assert not candidate_uses_torch("import torchvision_like_name as t\n# import torch\nx = 'import torch'\n")
    assert not candidate_uses_torch("def broken(:\n")
    assert not candidate_uses_torch("x = (" * 10_000)  # too deep for the parser: no torch, no exception


def test_eplb_cli_eval_of_a_torch_program(tmp_path, capsys):
    from reasearch.cli import main

    path = tmp_path / "cand.py"
    path.write_text(TORCH_EPLB)
    assert main(["eval", "eplb/v1", str(path), "-p", "num_windows=3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "OK", out["feedback"]
    assert out["metrics"]["weight_type"] == "torch" and math.isfinite(out["score"])


def test_arc_attempts_with_published_names(sandbox, shared_data):
    from reasearch.evaluators.arc_agi_2 import ArcTask

    task = ArcTask(task_id="00576224", data_dir=str(shared_data / "arc-agi-2"))
    src = ("import numpy as np\n"
           "def transform_grid_attempt_1(grid):\n"
           "    g = np.array(grid)\n"
           "    a, b = np.tile(g, (1, 3)), np.tile(g[:, ::-1], (1, 3))\n"
           "    return np.vstack([a, b, a]).tolist()\n"
           "def transform_grid_attempt_2(input_grid):\n"
           "    return input_grid\n")
    res = task.evaluate(src, executor=sandbox)
    assert res.status is Status.OK and res.score == 1.0, res.feedback


def test_entry_with_a_hostile_signature_is_a_crash_not_an_engine_error(sandbox):
    src = ("import inspect\n"
           "class _Entry:\n"
           "    @property\n"
           "    def __signature__(self):\n"
           "        raise RuntimeError('no signature for you')\n"
           "    def __call__(self, *a, **k):\n"
           "        return None\n"
           "construct_packing = _Entry()\n"
           "class _Liar:\n"
           "    __signature__ = inspect.Signature([inspect.Parameter('workload', inspect.Parameter.POSITIONAL_ONLY)])\n"
           "    def __call__(self):\n"
           "        return []\n"
           "get_best_schedule = _Liar()\n")
    res = reasearch.make("circle_packing/n26-v1").evaluate(src, executor=sandbox)
    assert res.status is Status.CRASH and "no signature for you" in res.feedback
    res = reasearch.make("txn_scheduling/v1").evaluate(src, executor=sandbox)
    assert res.status is Status.CRASH and "TypeError" in res.feedback and res.score is None
