"""``reasearch bench``: figures that matter, measured side by side in one run.

Each section module defines ``run(quick: bool) -> list[BenchRow]``; sections are listed in SECTIONS.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["BenchRow", "SECTIONS", "time_calls"]

SECTIONS: tuple[str, ...] = (
    "reasearch._bench.coldstart",  # first: fresh processes, before this one has warmed anything
    "reasearch._bench.sandbox",
    "reasearch._bench.geometry",
    "reasearch._bench.txn",
    "reasearch._bench.eplb",
    "reasearch._bench.arc",
    "reasearch._bench.store",
    "reasearch._bench.agent",
    "reasearch._bench.methods",
)


@dataclass(frozen=True, slots=True)
class BenchRow:
    """One measured figure, with its reference and goal where there is one."""

    section: str
    name: str
    value: float
    unit: str
    reference: str = ""
    reference_value: float | None = None
    ratio: float | None = None  # how many times better than the reference (>1 = better)
    goal: str = ""
    met: bool | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def time_calls(fn: Callable[[], Any], *, repeat: int, warmup: int = 1) -> list[float]:
    """Wall seconds of each of ``repeat`` calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def median(xs: list[float]) -> float:
    return statistics.median(xs)
