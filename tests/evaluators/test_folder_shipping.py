"""A task folder's content shipped by its hash (what a fleet member on another Ray node gets): the node writes it
into its folder cache, every FolderTask of that folder path reads from there and records the original path and
hash; a bundle whose bytes do not hash to its hash, or that names a file outside the folder, is refused; a folder
holding a symbolic link out of it or a 1 GiB file is refused before anything is read from it."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch.errors import TaskFolderError
from reasearch.evaluators import folder as folder_module
from reasearch.evaluators.folder import folder_cache, pack_folder, unpack_folder, write_example_folder
from reasearch.evaluators.registry import make

EVEN = "def solve(n):\n    return [i / (n - 1) for i in range(n)]\n"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("REASEARCH_TASK_CACHE", str(tmp_path / "cache"))
    yield tmp_path / "cache"
    folder_module._SHIPPED.clear()


def test_a_shipped_folder_is_read_by_content_where_its_path_holds_nothing(tmp_path: Path, cache: Path) -> None:
    folder = write_example_folder(tmp_path / "spread")
    stored = make(str(folder)).spec
    bundle = pack_folder(str(folder))
    assert bundle["content_hash"] == stored.params["content_hash"]
    assert set(bundle["files"]) == set(stored.params["files"])
    folder.rename(tmp_path / "elsewhere")  # this node does not hold the folder
    with pytest.raises(TaskFolderError, match="no such task folder"):
        make(str(folder))
    target = unpack_folder(bundle)
    assert target == folder_cache() / stored.params["content_hash"] and target.is_relative_to(cache)
    task = make(str(folder), n=3)
    assert task.spec.params["folder"] == str(folder.resolve())  # the original path, not the cache
    assert task.spec.params["content_hash"] == stored.params["content_hash"]
    assert task.evaluate(EVEN).score == pytest.approx(0.5)
    folder_module._SHIPPED.clear()  # a new process of this node: the stored spec finds the content by its hash
    assert make(stored).evaluate(EVEN).score == pytest.approx(0.25)


def test_a_shipped_folder_on_a_node_whose_path_holds_another_folder_uses_the_shipped_one(tmp_path: Path,
                                                                                        cache: Path) -> None:
    folder = write_example_folder(tmp_path / "spread")
    bundle = pack_folder(str(folder))
    score = folder / "score.py"
    score.write_text(score.read_text().replace("worst = min(gaps)", "worst = 1000.0"))  # this node's copy differs
    unpack_folder(bundle)
    result = make(str(folder)).evaluate(EVEN)
    assert result.score == pytest.approx(0.25)
    assert result.provenance is not None and result.provenance.params["content_hash"] == bundle["content_hash"]


@pytest.mark.parametrize("tamper", ["bytes", "dotdot", "absolute", "hash"])
def test_a_tampered_bundle_is_refused_and_writes_nothing(tmp_path: Path, cache: Path, tamper: str) -> None:
    bundle = pack_folder(str(write_example_folder(tmp_path / "spread")))
    files = dict(bundle["files"])
    if tamper == "bytes":
        files["score.py"] = b"def score(returned, params):\n    return 1e9\n"
    elif tamper == "dotdot":
        files["../../escaped.py"] = b"x"
    elif tamper == "absolute":
        files[str(tmp_path / "escaped.py")] = b"x"
    bad = {**bundle, "files": files}
    if tamper in ("dotdot", "absolute"):  # a consistent hash over the bad names: only the name check stands
        bad["content_hash"] = folder_module._content_hash({k: hashlib.sha256(v).hexdigest() for k, v in files.items()})
    elif tamper == "hash":
        bad["content_hash"] = "../" + "0" * 61
    with pytest.raises(TaskFolderError, match="shipped"):
        unpack_folder(bad)
    assert not any(p.name == "escaped.py" for p in tmp_path.rglob("*"))
    assert not cache.exists() or not any(cache.iterdir())
    assert folder_module._SHIPPED == {}


def test_a_folder_with_a_link_out_or_a_huge_file_is_refused_before_reading(tmp_path: Path) -> None:
    folder = write_example_folder(tmp_path / "spread")
    (tmp_path / "secret.txt").write_text("the host's secret\n")
    os.symlink(tmp_path / "secret.txt", folder / "notes.txt")
    with pytest.raises(TaskFolderError, match="holds no symbolic links"):
        pack_folder(str(folder))
    (folder / "notes.txt").unlink()
    with open(folder / "data.bin", "wb") as fh:  # 1 GiB, sparse: refused from its size, never read
        fh.truncate(1 << 30)
    with pytest.raises(TaskFolderError, match="at most 200 files and 16 MB"):
        make(str(folder))
    with pytest.raises(TaskFolderError, match="at most 200 files and 16 MB"):
        pack_folder(str(folder))
