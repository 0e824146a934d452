"""``guarded_path.Root`` (the one guarded reader): every operation stays beneath the root and follows no symlink,
with the kernel's ``openat2`` and with the component-by-component fallback alike."""

from __future__ import annotations

import os
import platform
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch.hostfs import guarded_path as _safefs
from reasearch.hostfs.guarded_path import Root, UnsafePathError


@pytest.fixture(params=["openat2", "fallback"])
def root(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Root]:
    if request.param == "fallback":
        monkeypatch.setattr(_safefs, "_openat2", None)
    elif not _safefs.openat2_available():
        pytest.skip("this kernel has no openat2 (the fallback is tested)")
    (tmp_path / "ws").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("secret")
    r = Root(tmp_path / "ws")
    yield r
    r.close()


def test_openat2_is_used_on_a_modern_linux() -> None:
    release = tuple(int(x) for x in platform.release().split(".")[:2] if x.isdigit())
    if platform.machine() in ("x86_64", "aarch64") and release >= (5, 6):
        assert _safefs.openat2_available()


@pytest.mark.parametrize("bad", ["/etc/passwd", "../x", "a/../../x", "a\x00b"])
def test_malformed_paths_are_refused(root: Root, bad: str) -> None:
    with pytest.raises(UnsafePathError):
        root.read_bytes(bad, cap=10)
    with pytest.raises(UnsafePathError):
        root.write_bytes(bad, b"x")


def test_no_symlink_is_followed_anywhere(root: Root, tmp_path: Path) -> None:
    ws, outside = Path(root.path), tmp_path / "outside"
    os.symlink(outside, ws / "dir_link")
    os.symlink(outside / "secret", ws / "file_link")
    (ws / "real").mkdir()
    os.symlink("..", ws / "real" / "up")
    os.symlink("/proc/self/environ", ws / "environ")
    for rel in ("dir_link/secret", "file_link", "real/up/file_link", "environ", "real/up/real"):
        with pytest.raises(UnsafePathError, match="symlink"):
            root.read_bytes(rel, cap=1 << 20)
    for rel in ("dir_link/new", "real/up/new", "dir_link/sub/new"):
        with pytest.raises(UnsafePathError, match="symlink"):
            root.write_bytes(rel, b"pwned")
    with pytest.raises(UnsafePathError, match="symlink"):
        root.mkdir("dir_link/sub")
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    root.remove("dir_link")  # the link is removed, what it points to is not entered
    assert (outside / "secret").read_text() == "secret" and not (ws / "dir_link").exists()


def test_write_is_atomic_and_replaces_a_planted_link_without_writing_through(root: Root, tmp_path: Path) -> None:
    ws = Path(root.path)
    os.symlink(tmp_path / "outside" / "secret", ws / "target")
    root.write_bytes("target", b"new")  # rename replaces the link itself
    assert (ws / "target").read_bytes() == b"new" and not (ws / "target").is_symlink()
    assert (tmp_path / "outside" / "secret").read_text() == "secret"
    root.write_bytes("a/b/c.txt", b"deep")
    assert (ws / "a" / "b" / "c.txt").read_bytes() == b"deep"
    with pytest.raises(UnsafePathError, match="is a directory"):
        root.write_bytes("a/b", b"x")
    assert sorted(os.listdir(ws / "a" / "b")) == ["c.txt"]  # no temporary file left behind


def test_reads_refuse_fifos_and_oversized_files_without_blocking(root: Root) -> None:
    ws = Path(root.path)
    os.mkfifo(ws / "fifo")
    errors: list[BaseException] = []

    def read() -> None:
        try:
            root.read_bytes("fifo", cap=100)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive() and isinstance(errors[0], UnsafePathError) and "FIFO" in str(errors[0])
    (ws / "big").write_bytes(b"x" * 1000)
    with pytest.raises(UnsafePathError, match="over the 999-byte limit"):
        root.read_bytes("big", cap=999)
    assert root.read_bytes("big", cap=10, cut=True) == b"x" * 10
    with pytest.raises(FileNotFoundError):
        root.read_bytes("missing", cap=10)
    with pytest.raises(UnsafePathError, match="directory"):
        root.read_bytes("", cap=10)


def test_walk_usage_and_remove_handle_a_very_deep_tree(root: Root) -> None:
    depth = 3000  # far past Python's recursion limit and PATH_MAX
    fd = os.dup(root.fd)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    os.close(fd)
    Path(root.path, "file").write_bytes(b"abc")
    os.link(Path(root.path, "file"), Path(root.path, "hardlink"))
    entries = list(root.walk())
    assert len(entries) == depth + 3
    assert entries[0].rel == "d" and entries[-1].rel == "hardlink"
    usage = root.usage()
    assert usage.inodes == depth + 1 + 1 + 1  # the root, the folders, the leaf, the file once
    root.remove("d")
    assert sorted(os.listdir(root.path)) == ["file", "hardlink"]
    assert root.usage().inodes == 2
