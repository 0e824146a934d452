"""Removing the runtime folders (code copies, interpreter mirrors) that no live process uses.

They live in the per-user private folder (:func:`reasearch.engine._runtime.runtime_root`); a mirror holds
up to a GB of hard links and copies, and each checkout or package change builds another. A folder is in
use when a live process names it: in its command line (nsjail's ``-R`` binds), its environment
(``PYTHONHOME``, ``PYTHONPATH``) or its memory maps (an interpreter running from it), or it changed in
the last :data:`RECENT_S` seconds (a build under way, a pool's periodic touch). Those are kept; the others
are removed, and the next pool rebuilds what it needs.

Trust boundary: only folders directly in our private root, owned by our euid, with the names this
engine gives them, are removed (and scoring jails' ``.jail-*.cfg`` files left by a killed driver, older
than :data:`RECENT_S`); nothing is followed through a symlink.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from reasearch.engine._runtime_root import _CODE_PREFIX, _MIRROR_PREFIX, runtime_root

__all__ = ["RECENT_S", "RuntimeFolder", "clean_runtime"]

RECENT_S = 600.0  # a folder modified this recently is kept (being built, or touched by a live pool)


@dataclass(frozen=True, slots=True)
class RuntimeFolder:
    """One runtime folder: where, its bytes (each inode counted once), whether a live process uses it."""

    path: Path
    bytes: int
    in_use: bool


def _is_runtime_name(name: str) -> bool:
    return name.startswith((_CODE_PREFIX, _MIRROR_PREFIX, ".stale-")) or ".build-" in name


def _is_stale_jail_config(entry: os.DirEntry[str]) -> bool:
    """An nsjail ``-C`` file of a scoring jail (``.jail-*.cfg``, ours, a plain file) older than RECENT_S: its
    job has ended (the file is removed then) or its driver was killed before it could remove it."""
    if not (entry.name.startswith(".jail-") and entry.name.endswith(".cfg")):
        return False
    try:
        st = os.lstat(entry.path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and time.time() - st.st_mtime > RECENT_S


def _size(top: Path) -> int:
    seen: set[tuple[int, int]] = set()
    total = 0
    for dirpath, _dirnames, filenames in os.walk(top, followlinks=False):
        for name in filenames:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def _mentions() -> bytes:
    """What the live processes we may read name: command lines, environments, memory maps (joined)."""
    chunks: list[bytes] = []
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        for part in ("cmdline", "environ", "maps"):
            try:
                with open(f"/proc/{entry.name}/{part}", "rb") as f:
                    chunks.append(f.read(8 << 20))
            except OSError:  # gone, or another user's
                continue
    return b"\n".join(chunks)


def clean_runtime(*, dry_run: bool = False, root: Path | None = None) -> list[RuntimeFolder]:
    """Lists the runtime folders and removes those no live process uses (none with ``dry_run``).

    Returns:
        Every runtime folder found, with its size and whether it was in use (kept).
    """
    root = root or runtime_root()
    used = _mentions()
    found: list[RuntimeFolder] = []
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if _is_stale_jail_config(entry) and not dry_run:  # a scoring jail's mount config whose driver died
            Path(entry.path).unlink(missing_ok=True)
            continue
        if not _is_runtime_name(entry.name):
            continue
        path = Path(entry.path)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue
        # A live pool touches its folders every few minutes and a builder writes into its .build- folder:
        # a folder changed within RECENT_S counts as in use even when no process names it yet.
        in_use = str(path).encode() in used or time.time() - st.st_mtime < RECENT_S
        found.append(RuntimeFolder(path, _size(path), in_use))
        if not in_use and not dry_run:
            shutil.rmtree(path, ignore_errors=True)
            marker = root / f".verified-{entry.name}"
            if marker.is_file() and not marker.is_symlink():
                marker.unlink(missing_ok=True)
    return found
