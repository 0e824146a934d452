"""What the unit-square geometry tasks (circle packing, Heilbronn) share: kernel-aware hashing, seeds."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from importlib import resources
from typing import ClassVar, TypeVar

from reasearch.evaluators.base import Task
from reasearch.evaluators.params import Parametrized, TaskParams, meta

__all__ = ["GeometryParams", "GeometryTask"]


@dataclass(frozen=True, slots=True)
class GeometryParams(TaskParams):
    """What every unit-square task takes: a size (each family declares its own default and range) and limits."""

    n: int = field(default=2, metadata=meta("number of objects."))
    time_limit_s: float = field(default=60.0, kw_only=True, metadata=meta("wall-time limit of one evaluation."))
    memory_mb: int = field(default=2048, kw_only=True, metadata=meta("address-space limit of one evaluation."))


GP = TypeVar("GP", bound=GeometryParams)


class GeometryTask(Parametrized[GP], Task):
    """A task over ``n`` objects in the unit square, scored with the compiled geometry kernels.

    Subclasses name their :class:`GeometryParams` declaration as the type argument, set ``seed_package`` to
    their package, and keep their seed program there as ``seed.py.txt`` with ``__N__`` where the size goes.
    """

    seed_package: ClassVar[str]

    @property
    def n(self) -> int:
        """The number of objects."""
        return self.params.n

    def evaluator_hash(self) -> str:
        """The base hash (task and harness modules) extended with the geometry kernels' sources."""
        from reasearch.native.geometry import kernel_source_hash

        return hashlib.sha256((super().evaluator_hash() + kernel_source_hash()).encode()).hexdigest()[:16]

    def seed_program(self) -> str:
        text = resources.files(self.seed_package).joinpath("seed.py.txt").read_text(encoding="utf-8")
        return text.replace("__N__", str(self.n))
