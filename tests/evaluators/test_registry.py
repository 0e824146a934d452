"""The task registry: versioned ids, lazy entry points, families, "did you mean" hints, parameters."""

from __future__ import annotations

import pickle
import subprocess
import sys
from collections.abc import Iterator

import pytest

import reasearch
from reasearch.errors import ConfigError, UnknownTaskError
from reasearch.evaluators import registry
from reasearch.evaluators.circle_packing.task import CirclePackingTask


@pytest.fixture
def scratch_ids() -> Iterator[list[str]]:
    """Ids registered by a test; removed afterwards so the global registry stays as it was."""
    ids: list[str] = []
    yield ids
    for task_id in ids:
        registry.unregister(task_id)


def test_make_builds_the_registered_task() -> None:
    task = reasearch.make("circle_packing/n26-v1")
    assert isinstance(task, CirclePackingTask)
    assert task.n == 26 and task.id == "circle_packing/n26-v1" and task.spec.version == 1


def test_unknown_id_suggests_close_ids() -> None:
    with pytest.raises(UnknownTaskError) as info:
        reasearch.make("circle_packing/n26-v2")
    assert str(info.value).startswith("unknown task id 'circle_packing/n26-v2'. Did you mean 'circle_packing/n26-v1'")
    with pytest.raises(UnknownTaskError, match="`reasearch tasks` lists the registered ids"):
        reasearch.make("zzz/qqqqqqqqqqqq-v9")
    assert isinstance(info.value, KeyError)  # callers catching KeyError keep working


def test_parameters_override_and_validate() -> None:
    task = reasearch.make("heilbronn/n12-v1", time_limit_s=5.0)
    assert task.spec.time_limit_s == 5.0 and task.limits().wall_s == 5.0
    with pytest.raises(ConfigError, match="change the task's id"):
        reasearch.make("circle_packing/n26-v1", n=27)
    with pytest.raises(ConfigError, match="has no parameter 'bogus'"):
        reasearch.make("circle_packing/n26-v1", bogus=1)


def test_made_tasks_pickle_with_their_parameters() -> None:
    task = reasearch.make("circle_packing/n30-v1", time_limit_s=7.0)
    clone = pickle.loads(pickle.dumps(task))
    assert clone.get_params() == {"n": 30, "time_limit_s": 7.0, "memory_mb": 2048}
    assert clone.spec == task.spec
    assert repr(clone) == "CirclePackingTask(n=30, time_limit_s=7.0, memory_mb=2048)"


def test_register_validates_ids_and_refuses_duplicates(scratch_ids: list[str]) -> None:
    with pytest.raises(ConfigError, match="namespace/name-vN"):
        reasearch.register("no-namespace-v1", "reasearch.evaluators.testing:ToyTask")
    with pytest.raises(ConfigError, match="namespace/name-vN"):
        reasearch.register("toy/unversioned", "reasearch.evaluators.testing:ToyTask")
    scratch_ids.append("toy/quadratic-d2-v1")
    reasearch.register("toy/quadratic-d2-v1", "reasearch.evaluators.testing:ToyTask", kwargs={"dim": 2})
    with pytest.raises(ConfigError, match="already registered"):
        reasearch.register("toy/quadratic-d2-v1", "reasearch.evaluators.testing:ToyTask", kwargs={"dim": 2})
    reasearch.register("toy/quadratic-d2-v1", "reasearch.evaluators.testing:ToyTask", kwargs={"dim": 2},
                       overwrite=True)
    assert reasearch.make("toy/quadratic-d2-v1").spec.id == "toy/quadratic-d2-v1"


def test_entry_points_are_lazy(scratch_ids: list[str]) -> None:
    scratch_ids.append("ghost/never-v1")
    reasearch.register("ghost/never-v1", "reasearch_no_such_module:Ghost")  # not imported here
    assert "ghost/never-v1" in reasearch.list_tasks()
    with pytest.raises(ConfigError, match="cannot load task class .*reasearch_no_such_module"):
        reasearch.make("ghost/never-v1")  # a ConfigError: the CLI prints one line, not a traceback
    scratch_ids.append("ghost/not-a-task-v1")
    reasearch.register("ghost/not-a-task-v1", "reasearch.errors:ConfigError")
    with pytest.raises(ConfigError, match="not a Task subclass"):
        reasearch.make("ghost/not-a-task-v1")


def test_families_expand_and_match(scratch_ids: list[str]) -> None:
    pattern = "toy/quadratic-d{dim}-v1"
    scratch_ids.append(pattern)
    reasearch.register(pattern, "reasearch.evaluators.testing:ToyTask", enumerate=lambda: [{"dim": "3"}, {"dim": "5"}],
                       open_ids=True)
    ids = reasearch.list_tasks()
    assert pattern in ids and "toy/quadratic-d3-v1" in ids and "toy/quadratic-d5-v1" in ids
    assert pattern not in reasearch.list_tasks(include_families=False)
    assert "toy/quadratic-d3-v1" not in reasearch.list_tasks(expand=False)
    task = reasearch.make("toy/quadratic-d7-v1")  # matches the pattern without being enumerated
    assert task.spec.id == "toy/quadratic-d7-v1" and task.spec.seed_score == -7 * 9.0


def test_a_closed_family_refuses_an_id_it_does_not_list(scratch_ids: list[str]) -> None:
    pattern = "toy/quadratic-d{dim}-v1"
    scratch_ids.append(pattern)
    reasearch.register(pattern, "reasearch.evaluators.testing:ToyTask", enumerate=lambda: [{"dim": "3"}, {"dim": "5"}])
    assert reasearch.make("toy/quadratic-d5-v1").spec.id == "toy/quadratic-d5-v1"
    with pytest.raises(UnknownTaskError, match=r"^unknown task id 'toy/quadratic-d7-v1': .* toy/quadratic-d3-v1, "):
        reasearch.make("toy/quadratic-d7-v1")


def test_list_is_sorted_and_has_every_geometry_id() -> None:
    ids = reasearch.list_tasks()
    assert ids == sorted(ids) and len(ids) == len(set(ids))
    for n in range(23, 33):
        assert f"circle_packing/n{n}-v1" in ids
    for n in range(11, 16):
        assert f"heilbronn/n{n}-v1" in ids


def test_listing_imports_no_task_module() -> None:
    code = (
        "import sys, reasearch\n"
        "reasearch.list_tasks()\n"
        "heavy = [m for m in ('reasearch.evaluators.circle_packing.task', 'reasearch.evaluators.heilbronn.task',"
        " 'reasearch.native.lp', 'highspy', 'numba') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- TaskSpec carries its class: make(spec)
from reasearch.evaluators.spec import TaskSpec  # noqa: E402
from tests.evaluators.test_conformance import IDS  # noqa: E402  (the same sample the checker runs on)


@pytest.mark.parametrize("task_id", IDS)
def test_make_of_a_spec_rebuilds_the_task_exactly(task_id: str) -> None:
    import reasearch

    task = reasearch.make(task_id)
    spec = task.spec
    assert spec.task_class == f"{type(task).__module__}:{type(task).__qualname__}"
    again = reasearch.make(TaskSpec.from_json(spec.to_json()))  # through JSON, as a store keeps it
    assert type(again) is type(task) and again.spec == spec
    assert reasearch.spec(task_id) == spec


def test_make_of_a_spec_needs_no_registration() -> None:
    import reasearch
    from reasearch.evaluators.testing import ToyTask

    task = ToyTask(dim=3, target=2.0)
    rebuilt = reasearch.make(TaskSpec.from_json(task.spec.to_json()))
    assert isinstance(rebuilt, ToyTask) and rebuilt.spec == task.spec and rebuilt.get_params() == task.get_params()


def test_make_of_a_bad_spec_is_a_clear_error() -> None:
    import dataclasses

    import reasearch
    from reasearch.errors import ConfigError

    spec = reasearch.spec("circle_packing/n26-v1")
    with pytest.raises(ConfigError, match="cannot load task class"):
        reasearch.make(dataclasses.replace(spec, task_class="reasearch.nowhere:Nothing"))
    with pytest.raises(ConfigError, match="not a Task subclass"):
        reasearch.make(dataclasses.replace(spec, task_class="builtins:dict"))
    with pytest.raises(ConfigError, match="builds task"):
        reasearch.make(dataclasses.replace(spec, id="circle_packing/n27-v1", params={"n": 26}))
    with pytest.raises(ConfigError, match="exactly"):
        reasearch.make(spec, n=27)
