"""The worker's scratch folders: one per evaluation, made ahead, removed once its process tree is dead.

Part of the :class:`~reasearch.engine._supervisor.Supervisor` (a base class of it): the folder each
candidate runs in (``candidate.py`` and the request's files, handed to the child's uid), the dummy
candidate the children warm up on, and the clean-up after a candidate, whose failure (or a scratch
filesystem short of space) retires the worker.

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

TYPE_CHECKING = False  # as typing's, without importing typing into the worker's image (see _pump.Child)
if TYPE_CHECKING:
    from reasearch.engine._pump import Child

__all__ = ["ScratchFolders"]


class ScratchFolders:
    """The supervisor's scratch folders (the attributes below are set by ``Supervisor.__init__``)."""

    scratch_root: str
    scratch_one: str
    child_uid: int | None
    counter: int
    prepared: str | None
    session: Child | None
    retire_reason: str | None
    min_free_bytes: int

    def make_prewarm(self) -> str | None:
        """A world-readable dummy candidate the children warm up on (see ``_child._prewarm``)."""
        path = os.path.join(self.scratch_root, "prewarm")
        try:
            os.makedirs(path, mode=0o755, exist_ok=True)
            os.chmod(path, 0o755)
            with open(os.path.join(path, "candidate.py"), "w") as fh:
                fh.write(PREWARM_SOURCE)
            os.chmod(os.path.join(path, "candidate.py"), 0o644)
        except OSError:
            return None
        return path

    def prepare_scratch(self) -> None:
        """Makes the next request's (empty) scratch folder ahead, after a child's clean-up: off the
        caller's path. Only the worker and the pre-forked child (which runs no candidate code before
        its request) live meanwhile, so the folder is still empty when the request comes."""
        path = self.scratch_path(self.counter + 1)
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

    def scratch_path(self, n: int) -> str:
        """The scratch folder of request ``n``: one name for every evaluation of this worker, the
        folder itself made afresh each time (removed with all it holds once the evaluation's whole
        process tree is dead, then made empty again). A constant name lets the worker build what a
        child needs for it once (the empty ``candidate`` module, see :meth:`spawn`) instead of each
        child building it after its fork. A request that comes while a session holds that folder
        (the engine reserves the worker for a session, so none should) gets a name of its own."""
        if self.session is None:
            return self.scratch_one
        return f"{self.scratch_one}-{n}"

    def make_scratch(self, files: dict[str, bytes], source: str) -> str:
        for name in files:  # before anything is made: a refused request leaves nothing behind
            if name in ("", ".", "..") or "/" in name or "\0" in name:
                raise ValueError(f"bad scratch file name {name!r}: plain names only")
        self.counter += 1
        path = self.scratch_path(self.counter)
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

    def remove_scratch(self, path: str) -> None:
        """Removes a folder a dead candidate wrote; a failure retires this worker (see ``loop``).

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
            return
        except OSError:
            pass
        if not remove_tree(path) and self.retire_reason is None:
            self.retire_reason = f"could not remove {path} after a candidate"

    def check_space(self) -> None:
        """Retires this worker when its scratch filesystem is short of space after clean-up."""
        free = free_bytes(self.scratch_root)
        if free is not None and free < self.min_free_bytes and self.retire_reason is None:
            self.retire_reason = (f"only {free >> 20} MiB free on the scratch filesystem after clean-up "
                                  f"(at least {self.min_free_bytes >> 20} MiB wanted)")
