"""What the unit-square geometry tasks (circle packing, Heilbronn) share: kernel-aware hashing, seeds."""

from __future__ import annotations

import hashlib
from importlib import resources

from reasearch.evaluators.base import Task

__all__ = ["GeometryTask"]


class GeometryTask(Task):
    """A task over ``n`` objects in the unit square, scored with the compiled geometry kernels.

    Subclasses store ``n`` and keep their seed program as ``seed.py.txt`` in their package, with
    ``__N__`` where the size goes.
    """

    n: int

    def evaluator_hash(self) -> str:
        """The base hash (task and harness modules) extended with the geometry kernels' sources."""
        from reasearch.native.geometry import kernel_source_hash

        return hashlib.sha256((super().evaluator_hash() + kernel_source_hash()).encode()).hexdigest()[:16]

    def seed_program(self) -> str:
        package = type(self).__module__.rpartition(".")[0]
        text = resources.files(package).joinpath("seed.py.txt").read_text(encoding="utf-8")
        return text.replace("__N__", str(int(self.n)))
