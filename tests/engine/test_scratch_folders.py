"""The worker's scratch folders are an object the supervisor holds (issue 42 item 3c), with its own state
and a small public face: usable with no supervisor, returning why the worker must retire instead of
setting the supervisor's attributes. What it removes was written by a hostile candidate."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reasearch.engine._scratch import ScratchFolders
from reasearch.engine._supervisor import Supervisor


def test_the_supervisor_holds_its_scratch_folders_instead_of_inheriting_them() -> None:
    assert ScratchFolders not in Supervisor.__mro__


def test_one_folder_per_request_made_ahead_and_given_to_the_next(tmp_path: Path) -> None:
    scratch = ScratchFolders(str(tmp_path), None)
    assert scratch.next_path(held=False) == str(tmp_path / "eval")
    assert scratch.next_path(held=True) == str(tmp_path / "eval-1")  # a session holds the shared one
    scratch.prepare(held=False)
    assert scratch.prepared == str(tmp_path / "eval") and os.listdir(tmp_path / "eval") == []
    path = scratch.make({"data.txt": b"x"}, "def run():\n    return 1\n", held=False)
    assert path == str(tmp_path / "eval") and scratch.counter == 1 and scratch.prepared is None
    assert sorted(os.listdir(path)) == ["candidate.py", "data.txt"]
    assert scratch.remove(path) is None and not os.path.exists(path)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../escape", "nul\0"])
def test_a_bad_file_name_is_refused_before_anything_is_made(tmp_path: Path, name: str) -> None:
    scratch = ScratchFolders(str(tmp_path), None)
    with pytest.raises(ValueError, match="plain names only"):
        scratch.make({name: b"x"}, "", held=False)
    assert os.listdir(tmp_path) == [] and scratch.counter == 0


def test_what_a_candidate_leaves_is_removed_without_following_its_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("kept")
    scratch = ScratchFolders(str(tmp_path / "root"), None)
    os.makedirs(scratch.root)
    path = scratch.make({}, "", held=False)
    os.unlink(f"{path}/candidate.py")
    os.symlink(outside, f"{path}/candidate.py")  # the common-case unlink must not follow it
    os.symlink(outside, f"{path}/link")
    os.makedirs(f"{path}/deep/er")
    assert scratch.remove(path) is None and not os.path.lexists(path)
    assert (outside / "keep.txt").read_text() == "kept"


def test_a_folder_that_cannot_be_removed_is_a_reason_to_retire(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import reasearch.engine._scratch as mod

    scratch = ScratchFolders(str(tmp_path), None)
    path = scratch.make({"more.txt": b"x"}, "", held=False)  # more than candidate.py: the full removal runs
    monkeypatch.setattr(mod, "remove_tree", lambda p: False)
    assert scratch.remove(path) == f"could not remove {path} after a candidate"


def test_a_filesystem_short_of_space_is_a_reason_to_retire(tmp_path: Path) -> None:
    assert ScratchFolders(str(tmp_path), None, min_free_bytes=0).short_of_space() is None
    reason = ScratchFolders(str(tmp_path), None, min_free_bytes=1 << 62).short_of_space()
    assert reason is not None and "free on the scratch filesystem" in reason
