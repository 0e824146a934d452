"""``reasearch bench``: figures that matter, measured side by side in one run.

The one implementation of every section's set-up, timing loop and statistics: ``reasearch bench``
(``reasearch/_cli/bench.py``) and the pytest entry points in ``benchmarks/`` both call
:func:`run_section`, so a figure is the same code timed by the same loop (:func:`time_calls`,
:func:`per_call_us`, :func:`fresh_processes`) and summed up by the same statistics (:func:`median`,
:func:`p95`) wherever it is read.

Each section module defines ``run(quick: bool) -> list[BenchRow]``; sections are listed in SECTIONS.
Trust boundary: the project's own code measured on this machine; nothing here runs a model's or a
stranger's candidate outside the sandbox the section measures.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import resource
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from reasearch.errors import ConfigError

__all__ = [
    "SECTIONS",
    "BenchRow",
    "busy_cpus",
    "cpu_ticks",
    "FreshProcess",
    "fresh_processes",
    "median",
    "p95",
    "p99",
    "per_call_us",
    "LONG_WHEN_NAMED",
    "MissingExtra",
    "run_section",
    "section_names",
    "table",
    "time_calls",
]

SECTIONS: tuple[str, ...] = (
    "reasearch._bench.coldstart",  # first: fresh processes, before this one has warmed anything
    "reasearch._bench.sandbox",
    "reasearch._bench.load",  # the warm pool beside a CPU burner at 0x, 1x, 2x the cores
    "reasearch._bench.geometry",
    "reasearch._bench.txn",
    "reasearch._bench.eplb",
    "reasearch._bench.arc",
    "reasearch._bench.store",
    "reasearch._bench.agent",
    "reasearch._bench.methods",
    "reasearch._bench.peers",
    "reasearch._bench.chaos",  # a soak: many drivers killed and resumed (short with --quick)
    "reasearch._bench.fleet",  # last: starts and stops Ray (a local instance, then a two-node cluster)
)
# Sections whose full run is long (the long chaos soak, ~40 min with every driver): a plain `reasearch bench`
# runs them short (as --quick); `--section NAME` runs them in full.
LONG_WHEN_NAMED: frozenset[str] = frozenset({"chaos"})


class MissingExtra(ConfigError):
    """A section needs a package of an optional extra that is not installed: a plain ``reasearch bench`` says so
    and goes on with the other sections; ``--section NAME`` fails with it (exit 2)."""


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

    def __post_init__(self) -> None:
        listener = _row_listener[0]
        if listener is not None:  # `reasearch bench` shows each figure as it is measured, not each section
            listener(self)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_row_listener: list[Callable[[BenchRow], None] | None] = [None]


@contextlib.contextmanager
def on_each_row(listener: Callable[[BenchRow], None]) -> Iterator[None]:
    """Calls ``listener`` with every row made while the block runs (progress of a section's figures)."""
    before, _row_listener[0] = _row_listener[0], listener
    try:
        yield
    finally:
        _row_listener[0] = before


LEGEND = ("ratio: the reference's figure over ours (above 1: ours is better, e.g. 3.2 = 3.2x faster); "
          "goal: the figure this project aims for; met: yes or NO against that goal (blank: no goal).")


def summary(rows: Sequence[BenchRow]) -> str:
    """One line: how many figures, how many goals were met, and which were not."""
    goals = [r for r in rows if r.met is not None]
    missed = [r for r in goals if not r.met]
    line = f"{len(rows)} figures; {len(goals) - len(missed)} of {len(goals)} goals met"
    if missed:
        line += f"; NOT met ({len(missed)}): " + "; ".join(f"{r.section} / {r.name}" for r in missed)
    return line


def section_names() -> list[str]:
    """The short names of the sections, in the order ``reasearch bench`` runs them."""
    return [s.rsplit(".", 1)[1] for s in SECTIONS]


def run_section(name: str, *, quick: bool) -> list[BenchRow]:
    """The rows of section ``name`` (a short name, e.g. ``"txn"``); ``quick``: fewer repetitions."""
    if name not in section_names():
        raise ConfigError(f"no bench section {name!r}; known: {section_names()}")
    rows: list[BenchRow] = importlib.import_module(f"reasearch._bench.{name}").run(quick=quick)
    return rows


# --- the timing loops -------------------------------------------------------------------------------


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


def per_call_us(fn: Callable[..., object], *, inner: int, repeat: int) -> float:
    """Median microseconds per call of ``fn`` (timed in batches of ``inner`` calls)."""

    def batch() -> None:
        for _ in range(inner):
            fn()

    return median(time_calls(batch, repeat=repeat)) / inner * 1e6


@dataclass(frozen=True, slots=True)
class FreshProcess:
    """One fresh process: its wall seconds (exec to exit), the CPU seconds of its whole reaped process
    tree, and what it wrote."""

    wall_s: float
    cpu_s: float
    returncode: int
    stdout: str
    stderr: str


def fresh_processes(argv: Sequence[str], *, runs: int, env: dict[str, str] | None = None) -> list[FreshProcess]:
    """Runs ``argv`` ``runs`` times, one fresh process after another, each timed from exec to exit.

    CPU is the kernel's accounting of reaped children (``RUSAGE_CHILDREN``), so it counts every process
    the child started and waited for. Exit statuses are returned, not judged: the caller says what a
    failure is."""
    out = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(list(argv), capture_output=True, text=True, errors="replace", env=env, check=False)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        out.append(FreshProcess(wall, cpu, proc.returncode, proc.stdout, proc.stderr))
    return out


# --- the statistics ---------------------------------------------------------------------------------


def cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) clock ticks of every CPU of the machine so far (``/proc/stat``); None elsewhere.

    Busy: user, nice, system, irq and softirq time; total adds idle, iowait and the time the
    hypervisor gave to others (steal)."""
    try:
        with open("/proc/stat", "rb") as fh:
            fields = [int(x) for x in fh.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    if len(fields) < 8:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    busy = user + nice + system + irq + softirq
    return busy, busy + idle + iowait + steal


def busy_cpus(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """How many CPUs the whole machine kept busy on average between two :func:`cpu_ticks` readings (every
    process: what was measured and whatever else ran); None without readings or time between them."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1]) * (os.cpu_count() or 1)


def median(xs: Iterable[float]) -> float:
    """The median of ``xs`` (every figure of a run of timings is summed up by it)."""
    return statistics.median(xs)


def p95(xs: Sequence[float]) -> float:
    """The 95th percentile of ``xs``: the nearest-rank value at 0.95 of the sorted timings."""
    return _nearest_rank(xs, 0.95)


def p99(xs: Sequence[float]) -> float:
    """The 99th percentile of ``xs``: the nearest-rank value at 0.99 of the sorted timings."""
    return _nearest_rank(xs, 0.99)


def _nearest_rank(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


# --- the table --------------------------------------------------------------------------------------


def _fmt(x: float | None) -> str:
    if x is None:
        return ""
    if math.isnan(x):  # not measured (the row's note says why)
        return "-"
    return f"{x:.4g}"


def table(rows: Sequence[BenchRow]) -> Any:
    """The rows as a ``rich`` table: section, figure, value, unit, reference, ratio, goal, met."""
    from rich.table import Table

    out = Table(title="reasearch bench")
    for col in ("section", "figure", "value", "unit", "reference", "ratio", "goal", "met"):
        out.add_column(col)
    for r in rows:
        met = "" if r.met is None else ("yes" if r.met else "NO")
        ref = f"{r.reference} {_fmt(r.reference_value)}".strip()
        out.add_row(r.section, r.name, _fmt(r.value), r.unit, ref, _fmt(r.ratio), r.goal, met)
    return out
