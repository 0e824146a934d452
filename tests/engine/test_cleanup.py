"""The worker's clean-up: total, iterative, never following links (unit tests, no sandbox)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch.engine._cleanup import free_bytes, remove_tree


def _deep(root: Path, depth: int) -> None:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):  # deeper than PATH_MAX allows as one path: built with dir fds
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        with open(os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o400, dir_fd=fd), "w") as fh:
            fh.write("x")
        os.fchmod(fd, 0o500)
    finally:
        os.close(fd)


@pytest.fixture()
def memory_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder in memory where there is one (/dev/shm): the walk is the same on any filesystem, and
    ext4 here takes ~2.5 ms per rmdir of a deep chain (5 s for this test, against 0.1 s in memory).
    Removed afterwards whatever the test left (``rm`` and ``chmod`` walk deep trees without PATH_MAX)."""
    if not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    d = Path(tempfile.mkdtemp(prefix="reasearch-test-cleanup-", dir="/dev/shm"))
    try:
        yield d
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(d)], capture_output=True, check=False)
        subprocess.run(["rm", "-rf", "--one-file-system", str(d)], capture_output=True, check=False)


def test_deep_tree_with_locked_folders_is_removed(memory_dir: Path) -> None:
    root = memory_dir / "scratch"
    root.mkdir()
    depth = os.pathconf(root, "PC_PATH_MAX") // 2 + 50  # "d/" a level: just past PATH_MAX as one path
    assert depth > 1000  # and past Python's default recursion limit
    _deep(root, depth)
    (root / "locked").mkdir()
    (root / "locked" / "inner.txt").write_text("secret")
    (root / "locked" / "sub").mkdir()
    os.chmod(root / "locked" / "sub", 0)
    os.chmod(root / "locked", 0)
    for i in range(50):
        (root / f"f{i}").write_bytes(b"x")
    assert remove_tree(str(root)) is True
    assert not root.exists()


def test_symlinks_are_removed_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    root = tmp_path / "scratch"
    root.mkdir()
    (root / "link").symlink_to(outside)
    (root / "sub").mkdir()
    (root / "sub" / "file_link").symlink_to(outside / "keep.txt")
    assert remove_tree(str(root)) is True
    assert not root.exists()
    assert (outside / "keep.txt").read_text() == "keep"


def test_missing_path_and_plain_file(tmp_path: Path) -> None:
    assert remove_tree(str(tmp_path / "nope")) is True
    f = tmp_path / "file"
    f.write_text("x")
    assert remove_tree(str(f)) is True
    assert not f.exists()
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "nowhere")
    assert remove_tree(str(link)) is True
    assert not os.path.lexists(link)


def test_reports_what_it_cannot_remove() -> None:
    assert remove_tree("/proc/self/fdinfo") is False  # procfs refuses every unlink and rmdir, even root's
    assert os.path.isdir("/proc/self/fdinfo")


def test_free_bytes(tmp_path: Path) -> None:
    free = free_bytes(str(tmp_path))
    assert free is not None and free > 0
    assert free_bytes(str(tmp_path / "missing")) is None
