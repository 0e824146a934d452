"""Total removal of what a candidate left on disk, without recursion and without following links.

A candidate owns its scratch folder until it is dead; then the worker removes it. Whatever shape the
candidate gave it (a 5000-deep chain of folders, folders chmod'ed to 0, read-only leaves, symlinks to
elsewhere, more entries than descriptors) :func:`remove_tree` walks it with one open descriptor at a
time and a stack of names, never Python recursion, and never follows a symlink. It never raises:
it returns whether the path is gone, and the caller retires a worker whose clean-up failed.
"""

from __future__ import annotations

import os
import stat

__all__ = ["free_bytes", "remove_tree"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_dir(name: str, dir_fd: int | None) -> int:
    """Opens a directory without following links, making it readable first if it was chmod'ed away."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        os.chmod(name, 0o700, dir_fd=dir_fd)  # it is a real directory (O_NOFOLLOW found no link)
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def _list(fd: int) -> tuple[list[str], list[str]]:
    """(subdirectories, other entries) of the open directory ``fd``."""
    dirs: list[str] = []
    others: list[str] = []
    with os.scandir(fd) as it:
        for entry in it:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            (dirs if is_dir else others).append(entry.name)
    return dirs, others


def remove_tree(path: str) -> bool:
    """Removes ``path`` and everything below it; returns True when it is gone (never raises).

    Only call it once every process that could write below ``path`` is dead: it relies on the tree
    not changing under it (``..`` of a folder it entered is the folder it came from).
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        try:
            os.unlink(path)
        except OSError:
            pass
        return not os.path.lexists(path)
    try:
        fd = _open_dir(path, None)
    except OSError:
        return False
    pending: list[list[str]] = []  # per level below the root: subdirectories still to remove
    names: list[str] = []  # the chain of names from the root to the current folder
    try:
        while True:
            try:
                os.fchmod(fd, 0o700)  # writable, so its entries can be unlinked
            except OSError:
                pass
            try:
                dirs, others = _list(fd)
            except OSError:
                dirs, others = [], []
            for name in others:
                try:
                    os.unlink(name, dir_fd=fd)
                except FileNotFoundError:
                    pass
                except OSError:
                    pass  # the rmdir below fails and the result says so
            pending.append(dirs)
            # Descend into the next subdirectory still pending at this or a higher level.
            while True:
                todo = pending[-1]
                if todo:
                    name = todo.pop()
                    try:
                        child = _open_dir(name, fd)
                    except OSError:
                        continue  # not removable: the final check reports it
                    os.close(fd)
                    fd = child
                    names.append(name)
                    break
                pending.pop()
                if not names:  # the root is done: its fd is closed and it is removed below
                    os.close(fd)
                    fd = -1
                    break
                parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = parent
                try:
                    os.rmdir(names.pop(), dir_fd=fd)
                except OSError:
                    pass
            if fd == -1:
                break
    except OSError:
        pass
    finally:
        if fd != -1:
            os.close(fd)
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        pass
    return not os.path.lexists(path)


def free_bytes(path: str) -> int | None:
    """Bytes available to an unprivileged writer on the filesystem holding ``path`` (None if unknown)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize
