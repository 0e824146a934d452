"""The worker's scratch folders: one per evaluation, made ahead, removed once its process tree is dead.

An object the :class:`~reasearch.engine._supervisor.Supervisor` holds (``supervisor.scratch``), with its
own state (the request counter, the folder made ahead): the folder each candidate runs in
(``candidate.py`` and the request's files, handed to the child's uid), the dummy candidate the children
warm up on, and the clean-up after a candidate, whose failure (or a scratch filesystem short of space)
is the reason it returns for the supervisor to retire the worker.

Trust: runs in the worker, inside the jail, as engine code. What it removes was written by a hostile
candidate: names are never followed (``O_NOFOLLOW``, ``dir_fd``), and anything but the common case goes
to :func:`~reasearch.engine._cleanup.remove_tree`. The jailed worker imports this module: it imports
neither ``typing`` nor ``dataclasses`` (see ``tests/engine/test_images.py``).
"""

from __future__ import annotations

import os

from reasearch.engine import _wire
from reasearch.engine._child import PREWARM_SOURCE
from reasearch.engine._cleanup import free_bytes, remove_tree

__all__ = ["ScratchFolders"]


class ScratchFolders:
    """The worker's scratch folders under ``root``.

    Whether a session holds the worker's one folder is the supervisor's to know: the methods that name
    a request's folder take it as ``held`` (see :meth:`path`). A failed removal or a filesystem short of
    space is returned as the reason to retire the worker, for the supervisor to act on.

    Args:
        root: the folder under which each evaluation gets its own folder.
        child_uid: the uid each child drops to, which owns its folder and files (None: the worker's own).
        min_free_bytes: below this much free space after clean-up, the worker should retire.
    """

    __slots__ = ("root", "one", "child_uid", "min_free_bytes", "counter", "prepared")

    def __init__(self, root: str, child_uid: int | None, min_free_bytes: int = 0) -> None:
        self.root = root
        self.one = os.path.join(root, "eval")  # see path
        self.child_uid = child_uid
        self.min_free_bytes = min_free_bytes
        self.counter = 0  # requests given a folder so far
        self.prepared: str | None = None  # the next request's folder, made ahead

    def make_prewarm(self) -> str | None:
        """A world-readable dummy candidate the children warm up on (see ``_child._prewarm``)."""
        path = os.path.join(self.root, "prewarm")
        try:
            os.makedirs(path, mode=0o755, exist_ok=True)
            os.chmod(path, 0o755)
            with open(os.path.join(path, "candidate.py"), "w") as fh:
                fh.write(PREWARM_SOURCE)
            os.chmod(os.path.join(path, "candidate.py"), 0o644)
        except OSError:
            return None
        return path

    def prepare(self, held: bool) -> None:
        """Makes the next request's (empty) folder ahead, after a child's clean-up: off the caller's
        path. Only the worker and the pre-forked child (which runs no candidate code before its
        request) live meanwhile, so the folder is still empty when the request comes."""
        path = self.path(self.counter + 1, held)
        self.prepared = None
        if not remove_tree(path):
            return
        try:
            os.mkdir(path, 0o700)
            if self.child_uid is not None:
                os.chown(path, self.child_uid, self.child_uid)
        except OSError:
            return
        self.prepared = path

    def path(self, n: int, held: bool) -> str:
        """The folder of request ``n``: one name for every evaluation of this worker, the folder
        itself made afresh each time (removed with all it holds once the evaluation's whole process
        tree is dead, then made empty again). A constant name lets the worker build what a child
        needs for it once (the empty ``candidate`` module, see ``ChildForks.spawn``) instead of each
        child building it after its fork. A request that comes while a session holds that folder
        (``held``; the engine reserves the worker for a session, so none should) gets a name of its own."""
        if not held:
            return self.one
        return f"{self.one}-{n}"

    def next_path(self, held: bool) -> str:
        """The folder the next request will most likely be handed (see :meth:`path`)."""
        return self.path(self.counter + 1, held)

    def make(self, files: dict[str, bytes], source: str, held: bool) -> str:
        """The next request's folder holding ``candidate.py`` and ``files``, owned by the child's uid.

        Raises:
            ValueError: a file name that is not one plain name (nothing is made).
            OSError: the folder cannot be cleared or made.
        """
        for name in files:  # before anything is made: a refused request leaves nothing behind
            if name in ("", ".", "..") or "/" in name or "\0" in name:
                raise ValueError(f"bad scratch file name {name!r}: plain names only")
        self.counter += 1
        path = self.path(self.counter, held)
        ready, self.prepared = self.prepared == path, None
        if not ready:
            if not remove_tree(path):
                raise OSError(f"cannot clear the scratch dir {path}")
            os.mkdir(path, 0o700)
        if not ready and self.child_uid is not None:
            os.chown(path, self.child_uid, self.child_uid)
        self.write_file(path, "candidate.py", source.encode("utf-8", "surrogatepass"))
        for name, data in files.items():
            self.write_file(path, name, data)
        return path

    def write_file(self, folder: str, name: str, data: bytes) -> None:
        """Writes one scratch file (never through a link) and hands it to the child's uid: a plain
        ``open``/``write``/``fchown``, without a buffered file object."""
        fd = os.open(f"{folder}/{name}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o666)
        try:
            _wire.write_all(fd, data)
            if self.child_uid is not None:
                os.fchown(fd, self.child_uid, self.child_uid)
        finally:
            os.close(fd)

    def remove(self, path: str) -> str | None:
        """Removes a folder a dead candidate wrote; returns why the worker must retire when that failed
        (else None).

        The common case first: the candidate left only ``candidate.py``, so unlinking that name
        (a link or a file; never followed, nor is ``path`` itself) empties the folder and ``rmdir``
        succeeds. Anything else (more entries, a folder under that name, a chmod) makes ``rmdir``
        fail, and the full iterative removal runs.
        """
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.unlink("candidate.py", dir_fd=fd)
            finally:
                os.close(fd)
            os.rmdir(path)
            return None
        except OSError:
            pass
        return None if remove_tree(path) else f"could not remove {path} after a candidate"

    def short_of_space(self) -> str | None:
        """Why the worker must retire when its scratch filesystem is short of space after clean-up, else None."""
        free = free_bytes(self.root)
        if free is not None and free < self.min_free_bytes:
            return (f"only {free >> 20} MiB free on the scratch filesystem after clean-up "
                    f"(at least {self.min_free_bytes >> 20} MiB wanted)")
        return None
