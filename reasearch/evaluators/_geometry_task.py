"""What the unit-square geometry tasks (circle packing, Heilbronn) share: kernel-aware hashing, seeds."""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import ClassVar

from reasearch.evaluators.base import Task

__all__ = ["GeometryTask"]


class GeometryTask(Task):
    """A task over ``n`` objects in the unit square, scored with the compiled geometry kernels.

    Subclasses store ``n``, set ``seed_package`` to their package, and keep their seed program there as
    ``seed.py.txt`` with ``__N__`` where the size goes.
    """

    n: int
    seed_package: ClassVar[str]

    def evaluator_hash(self) -> str:
        """The base hash (task and harness modules) extended with the geometry kernels' sources."""
        from reasearch.native.geometry import kernel_source_hash

        return hashlib.sha256((super().evaluator_hash() + kernel_source_hash()).encode()).hexdigest()[:16]

    def seed_program(self) -> str:
        text = resources.files(self.seed_package).joinpath("seed.py.txt").read_text(encoding="utf-8")
        return text.replace("__N__", str(int(self.n)))
