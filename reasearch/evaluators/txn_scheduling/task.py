"""``txn_scheduling/v1``: order 3 x 100 database transactions to minimize the total makespan."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

from reasearch.engine.protocol import RunRequest
from reasearch.evaluators.base import Task
from reasearch.evaluators.params import Parametrized, Range, TaskParams, meta, spec_params
from reasearch.evaluators.result import EvalResult
from reasearch.evaluators.spec import TaskSpec
from reasearch.evaluators.txn_scheduling.workload import Workload, load_workloads, workload_texts

__all__ = ["TxnSchedulingTask", "TxnSchedulingParams", "BEST_KNOWN_TOTAL", "SCORE_VARIANTS", "SEED_SCORE",
           "adrs_score"]

TASK_ID = "txn_scheduling/v1"
BEST_KNOWN_TOTAL = 225.0
"""Best total of the published evolved programs (ADRS txn_scheduling reports 225-241)."""
SEED_SCORE = 358.0
"""Total of the seed program under seed 0 (seeds 0-9: 354-392, mean 370.0)."""
_SHIFT = 0.10  # the published 0-100 score puts 100 at lower bound + 10% of (sequential - lower bound)


SCORE_VARIANTS: dict[str, str] = {
    "makespan": "total makespan over the three workloads (minimize; default)",
    "adrs": "0-100 (maximize): 0 at sequential order, 100 at lower bound + 10% of (sequential - lower bound), "
            "clamped; UCB-ADRS/ADRS-Leaderboard problems/txn_scheduling/evaluator.py (calculate_score), here "
            "on the recomputed total, never a self-reported one",
}
"""Named scores (``-p score=NAME``), computed on the trusted side, each with its source."""


def adrs_score(total: float, sequential: float, lower_bound: float) -> float:
    """The published leaderboard's 0-100 score: 0 at sequential order, 100 at the shifted lower bound."""
    target = lower_bound + _SHIFT * (sequential - lower_bound)
    return max(0.0, min(100.0, (sequential - total) / (sequential - target) * 100.0))


@functools.cache
def _compat_files() -> tuple[tuple[str, bytes], ...]:
    """Modules published programs import (``txn_simulator``, ``workloads``), placed beside the candidate."""
    simulator = (
        '"""Compatibility module: the published ``txn_simulator.Workload`` is reasearch\'s compiled one."""\n'
        "from reasearch.evaluators.txn_scheduling.workload import Workload\n"
    )
    lines = ['"""Compatibility module: the three workloads as JSON texts, as published."""']
    for i, texts in enumerate(workload_texts().values(), start=1):
        lines.append(f"WORKLOAD_{i} = {json.dumps(json.dumps(texts))}")
    return (("txn_simulator.py", simulator.encode()), ("workloads.py", ("\n".join(lines) + "\n").encode()))


@dataclass(frozen=True, slots=True)
class TxnSchedulingParams(TaskParams):
    """The parameters of ``txn_scheduling/v1`` (constructor, ``--params`` and ``spec.params`` come from here)."""

    family: ClassVar[str] = "txn_scheduling"

    time_limit_s: float = field(default=60.0, kw_only=True, metadata=meta(
        "wall-time limit of one evaluation (all three workloads together).", Range(gt=0, le=86_400)))
    num_seqs: int = field(default=10, kw_only=True, metadata=meta(
        "the second argument passed to get_best_schedule (the published evaluator passes 10).", Range(ge=1)))
    memory_mb: int = field(default=1024, kw_only=True, metadata=meta(
        "address-space limit of one evaluation (NumPy needs 256 MB).", Range(ge=256)))
    score: str = field(default="makespan", kw_only=True, metadata=meta(
        'the score variant, a key of SCORE_VARIANTS (default "makespan", ours).', Range(choices=tuple(SCORE_VARIANTS))))


class TxnSchedulingTask(Parametrized[TxnSchedulingParams], Task):
    """Transaction scheduling on the three published workloads (minimize the total makespan).

    Parameters: :class:`TxnSchedulingParams` (``time_limit_s``, ``num_seqs``, ``memory_mb``, ``score``).
    """

    harness: ClassVar[str] = "reasearch.evaluators.txn_scheduling.harness:run_schedules"

    def _make_spec(self) -> TaskSpec:
        p = self.params
        adrs = p.score == "adrs"
        return TaskSpec(
            id=TASK_ID,
            version=1,
            direction="maximize" if adrs else "minimize",
            time_limit_s=p.time_limit_s,
            memory_mb=p.memory_mb,
            best_known=self._variant(BEST_KNOWN_TOTAL) if adrs else BEST_KNOWN_TOTAL,
            best_known_source="best published evolved program (ADRS txn_scheduling: 225-241)",
            entry_point="get_best_schedule",
            seed_score=self._variant(SEED_SCORE) if adrs else SEED_SCORE,
            seed_score_rtol=1e-12 if adrs else 0.0,
            params=spec_params(p),
        )

    def _variant(self, total: float) -> float:
        """The selected score of a total makespan (the total itself, or the ADRS 0-100 score)."""
        if self.params.score != "adrs":
            return float(total)
        seq, lb = self._references()
        return adrs_score(total, sum(seq), sum(lb))

    def _workloads(self) -> list[Workload]:
        """The trusted side's simulators (built once per task object; never sent to a sandbox)."""
        cached = self.__dict__.get("_trusted")
        if cached is None:
            cached = load_workloads()
            self.__dict__["_trusted"] = cached
        return cached

    def _references(self) -> tuple[list[int], list[int]]:
        """Sequential-order makespans and lower bounds (longest transaction) per workload."""
        wls = self._workloads()
        return [w.get_opt_seq_cost(range(w.num_txns)) for w in wls], [w.lower_bound() for w in wls]

    def evaluator_hash(self) -> str:
        """Also covers what scores depend on beyond the task's modules: the simulator's sources and the data."""
        return _support_hash(super().evaluator_hash())

    def describe(self) -> str:
        seq, lb = self._references()
        sizes = ", ".join(f"{w.name}: {w.num_txns} txns, {w.num_keys} keys" for w in self._workloads())
        return f"""\
Transaction scheduling ({TASK_ID}): order the transactions of three workloads ({sizes}) so that the
sum of their makespans is as small as possible (minimize).

Write `get_best_schedule(workload, num_seqs)` (or `get_best_schedule(workload)`; a `seed` parameter gets the
evaluation seed), called once per workload (num_seqs = {self.params.num_seqs}); return
a schedule (a list with every transaction index 0..num_txns-1 exactly once) or `(makespan, schedule)`.
`random` and `numpy.random` are seeded before the first call. Self-reported makespans are ignored: the
evaluator recomputes each one, and a short, duplicated or out-of-range schedule is INVALID.

Cost model (exactly the published simulator's): transaction i is a rigid block of txn_len unit slots,
its op at 1-based position pos runs at start+pos-1. Transactions are placed in schedule order, each at
the earliest start >= 1 where, for every op on a key that already holds locks: a write, or any op
when the key's latest lock is a write, runs after that latest lock; a read behind a read runs after
the key's latest write (anywhere if never written). Ops of one transaction never wait for each other.
Makespan = the latest end. References: sequential order {sum(seq)} ({' + '.join(map(str, seq))}),
lower bound {sum(lb)} ({' + '.join(map(str, lb))}: the longest transaction), best published {BEST_KNOWN_TOTAL:g}.

The `workload` object (compiled; `from txn_simulator import Workload` and `from workloads import
WORKLOAD_1, WORKLOAD_2, WORKLOAD_3` also work, as in published programs):
  workload.num_txns                      number of transactions
  workload.txns[i]                       list of (op_type 'r'|'w', key str, pos, txn_len) of transaction i
  workload.get_opt_seq_cost(seq)         makespan of a schedule or prefix (a few microseconds)
  state = workload.new_state()           an empty prefix
  workload.peek(state, t)                makespan if t were appended (state unchanged); O(ops of t)
  workload.extend(state, t)              append t to the prefix, return the new makespan
  workload.peek_all(state)               [peek(state, t) for every t]
  state.copy(), state.makespan, state.sequence, len(state)
peek/extend equal get_opt_seq_cost of the extended prefix exactly, without recomputing the prefix.

Limits: {self.params.time_limit_s:g} s wall time for all three workloads, {self.params.memory_mb} MB memory, no network.
Score: {self._score_line()}; feedback gives each workload's makespan.
"""

    def _score_line(self) -> str:
        if self.params.score == "adrs":
            return "score variant 'adrs', " + SCORE_VARIANTS["adrs"]
        return "total makespan (lower is better)"

    def seed_program(self) -> str:
        return resources.files(__package__).joinpath("seed.py.txt").read_text(encoding="utf-8")

    def payload(self, seed: int | None) -> dict[str, Any]:
        return {
            "seed": 0 if seed is None else int(seed),
            "num_seqs": self.params.num_seqs,
            "workloads": [{"name": name, "txns": texts} for name, texts in workload_texts().items()],
        }

    def build_request(self, candidate_source: str, *, seed: int | None = None) -> RunRequest:
        request = super().build_request(candidate_source, seed=seed)
        return RunRequest(
            source=request.source,
            entry=request.entry,
            harness=request.harness,
            payload=request.payload,
            limits=request.limits,
            files={**dict(_compat_files()), **dict(request.files)},
        )

    def render_png(self, result: EvalResult | Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
        """Draws an OK result's schedules as Gantt charts (see :func:`render_schedules`)."""
        from reasearch.evaluators.txn_scheduling.render import render_schedules

        return render_schedules(result, path)

    def score_solution(self, data: Any, *, seed: int | None = None) -> EvalResult:
        """Validates the schedules and recomputes every makespan (trusted side)."""
        wls = self._workloads()
        if not isinstance(data, dict) or not isinstance(data.get("schedules"), list):
            return self.invalid(f"expected {{'schedules': [one list per workload]}}, got {_short(data)}")
        schedules = data["schedules"]
        if len(schedules) != len(wls):
            return self.invalid(f"expected {len(wls)} schedules (one per workload), got {len(schedules)}")
        problems = [p for w, s in zip(wls, schedules, strict=True) if (p := _schedule_problem(w, s))]
        if problems:
            return self.invalid("; ".join(problems), metrics={"invalid_workloads": len(problems)})

        makespans = [w.get_opt_seq_cost(s) for w, s in zip(wls, schedules, strict=True)]
        total = sum(makespans)
        seq, lb = self._references()
        metrics: dict[str, Any] = {f"makespan_{w.name}": m for w, m in zip(wls, makespans, strict=True)}
        metrics.update(
            total_makespan=total,
            sequential_makespan=sum(seq),
            lower_bound=sum(lb),
            adrs_score=round(adrs_score(total, sum(seq), sum(lb)), 6),
        )
        lines = [
            f"total makespan {total} = " + " + ".join(f"{w.name} {m}" for w, m in zip(wls, makespans, strict=True)),
            f"per workload, sequential order: {' / '.join(map(str, seq))}; lower bound: {' / '.join(map(str, lb))}",
        ]
        reported = data.get("reported")
        if isinstance(reported, list) and len(reported) == len(wls):
            wrong = [
                f"{w.name} reported {r:g}, recomputed {m}"
                for w, r, m in zip(wls, reported, makespans, strict=False)
                if isinstance(r, (int, float)) and not isinstance(r, bool) and math.isfinite(r) and r != m
            ]
            metrics["reported_mismatches"] = len(wrong)
            if wrong:
                lines.append("self-reported makespans differ (ignored): " + "; ".join(wrong))
        score = self.params.score
        if score != "makespan":
            lines.append(f"score variant {score!r}: {self._variant(total):.6g} ({SCORE_VARIANTS[score]})")
        return self.result(self._variant(total), metrics=metrics, feedback="\n".join(lines),
                           solution={"schedules": [list(s) for s in schedules]})


@functools.cache
def _support_hash(base: str) -> str:
    """``base`` combined with the workload module, the simulator (Cython source and twin) and the workloads."""
    h = hashlib.sha256(base.encode())
    for package, name in (
        ("reasearch.evaluators.txn_scheduling", "workload.py"),
        ("reasearch.evaluators.txn_scheduling", "data/workloads.json"),
        ("reasearch.native", "_txn.pyx"),
        ("reasearch.native", "txn.py"),
    ):
        h.update(name.encode())
        h.update(resources.files(package).joinpath(name).read_bytes())
    return h.hexdigest()[:16]


def _short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 80 else text[:77] + "..."


def _schedule_problem(workload: Workload, schedule: Any) -> str:
    """Why ``schedule`` is not a permutation of the workload's transactions ('' when it is)."""
    name, n = workload.name, workload.num_txns
    if isinstance(schedule, dict) and isinstance(schedule.get("error"), str):
        return f"{name}: get_best_schedule {schedule['error'][:200]}"
    if not isinstance(schedule, list):
        return f"{name}: the schedule must be a list of transaction indices, got {_short(schedule)}"
    seen: dict[int, int] = {}
    for i, x in enumerate(schedule):
        if type(x) is not int:
            return f"{name}: entry {i} is {_short(x)}, not a transaction index (int)"
        if not 0 <= x < n:
            return f"{name}: entry {i} is {x}, outside 0..{n - 1}"
        if x in seen:
            return f"{name}: transaction {x} appears twice (entries {seen[x]} and {i})"
        seen[x] = i
    if len(schedule) != n:
        missing = [t for t in range(n) if t not in seen]
        shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
        return (
            f"{name}: {len(schedule)} entries, but every one of the {n} transactions must appear once "
            f"(missing: {shown})"
        )
    return ""
