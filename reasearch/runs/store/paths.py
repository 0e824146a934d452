"""Where a SQLite store may live: the checks made before a store file is opened or created.

The attack: a ``--run-dir`` (or a folder above it) that another local user can write, or a
``store.sqlite`` that is a symlink, makes a driver running as root create or write a database
wherever the link points (SQLite follows links and creates missing files, then its ``-wal`` and
``-shm`` beside them). The rule, the same as the sandbox runtime's folder (``engine/_runtime.py``):

* the store file and its SQLite side files (``-wal``, ``-shm``, ``-journal``), when they exist, are
  regular files, never symlinks (``lstat``);
* the run directory (the folder holding the store) is a real folder, not a symlink, owned by this
  process's user (or root) and writable by nobody else, sticky or not (its files are ours alone);
* every folder above it, with symlinks above the run directory resolved, is owned by root or by us
  and writable by group or others only when sticky (``/tmp``): there another user can add entries
  but not rename or remove ours, and the entry below is checked to be ours.

Folders this module creates get mode 0755 (less the umask). A refusal is a :class:`StoreError`
naming the path and what to change; nothing is created or opened then.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from reasearch.errors import StoreError

__all__ = ["checked_store_path", "SIDE_SUFFIXES"]

SIDE_SUFFIXES = ("-wal", "-shm", "-journal")


def _refuse(store: Path, why: str, fix: str) -> StoreError:
    return StoreError(f"refusing the run store {store}: {why}; {fix} (nothing was opened or created)")


def _check_ancestors(store: Path, folder: Path) -> None:
    """Every folder from ``/`` to ``folder`` (resolved): owned by root or us, writable by others only when sticky."""
    me = os.geteuid()
    real = Path(os.path.realpath(folder))
    for p in (*reversed(real.parents), real):
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode):  # resolved above: only a race gets here
            raise _refuse(store, f"{p} is a symlink", "try again, and check who changes that folder")
        if st.st_uid not in (0, me):
            raise _refuse(store, f"{p} belongs to uid {st.st_uid}, who could replace what is below it",
                          f"use a run directory under folders owned by root or by uid {me}")
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise _refuse(store, f"{p} is writable by group/others and not sticky (mode {st.st_mode & 0o7777:o})",
                          f"run `chmod go-w {p}` or use a run directory elsewhere")


def _check_run_dir(store: Path, folder: Path) -> None:
    """The run directory itself: a real folder of ours (or root's) that nobody else can write."""
    st = os.lstat(folder)
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(store, f"the run directory {folder} is a symlink (to {os.readlink(folder)!r})",
                      "pass the real folder as --run-dir, or replace the link with a folder")
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(store, f"{folder} is not a folder", "pass a folder as --run-dir")
    if st.st_uid not in (0, os.geteuid()):
        raise _refuse(store, f"the run directory {folder} belongs to uid {st.st_uid}",
                      f"use a run directory owned by uid {os.geteuid()} (another user may have planted it)")
    if st.st_mode & 0o022:
        raise _refuse(store, f"the run directory {folder} is writable by group/others (mode {st.st_mode & 0o7777:o})",
                      f"run `chmod go-w {folder}` or use another run directory")


def _check_files(store: Path) -> None:
    """The store file and its side files, where they exist: regular files, not symlinks."""
    for p in (store, *(store.with_name(store.name + s) for s in SIDE_SUFFIXES)):
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            raise _refuse(store, f"{p} is a symlink (to {os.readlink(p)!r})",
                          "remove the link; a store is a regular file in its run directory")
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(store, f"{p} is not a regular file", "remove it or use another run directory")


def checked_store_path(path: str | Path, *, create: bool = True) -> Path:
    """``path`` (absolute) once it is safe to open or create as a SQLite store; creates its run
    directory (mode 0755 less the umask) when ``create``.

    Raises:
        StoreError: the store, its run directory or a folder above it breaks the rule above.
    """
    store = Path(os.path.abspath(path))
    folder = store.parent
    existing = folder
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if existing == folder:
        _check_run_dir(store, folder)
    _check_ancestors(store, existing if existing != folder else folder.parent)
    if existing != folder and create:
        try:
            for level in (*reversed(folder.relative_to(existing).parents), Path(".")):
                if level != Path("."):
                    (existing / level).mkdir(mode=0o755, exist_ok=True)  # each level 0755, whatever mkdir -p does
            folder.mkdir(mode=0o755, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the run directory {folder}: {exc.strerror}; pass a folder you can "
                             "write as --run-dir") from None
        _check_run_dir(store, folder)
        _check_ancestors(store, folder.parent)
    _check_files(store)
    return store
