"""The ``Task`` base class: one door through which users, other optimizers and the agent evaluate."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import inspect
import platform
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from reasearch.engine import default_pool
from reasearch.engine.protocol import Limits, RunOutcome, RunRequest, SandboxRunner
from reasearch.evaluators.result import EvalResult, Provenance, Status
from reasearch.evaluators.spec import TaskSpec

__all__ = ["CandidateKind", "Task", "default_runner", "candidate_sha256", "package_versions"]

CandidateKind = Literal["program", "prompt", "repository"]

_FEEDBACK_TAIL = 4000  # characters of traceback/stderr handed to the agent


def default_runner() -> SandboxRunner:
    """The process-wide sandbox pool (started on first use, closed at exit)."""
    if package_versions.cache_info().currsize == 0:
        # A process's first evaluation waits ~0.1-0.2 s for its worker's jail; reading the package
        # metadata for its provenance (~40 ms) meanwhile takes it off that evaluation's path.
        threading.Thread(target=package_versions, name="reasearch-versions", daemon=True).start()
    return default_pool()


def candidate_sha256(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


@functools.cache
def package_versions() -> dict[str, str]:
    """Versions recorded in every result's provenance."""
    versions = {"python": platform.python_version()}
    for name in ("reasearch", "numpy", "scipy", "numba", "highspy"):
        try:
            from importlib.metadata import version

            versions[name] = version(name)
        except Exception:  # not installed: recorded as absent, never guessed
            versions[name] = "absent"
    return versions


@functools.cache
def _hash_modules(module_names: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for name in module_names:
        mod = sys.modules.get(name) or importlib.import_module(name)
        path = getattr(mod, "__file__", None)
        if path and Path(path).exists():
            h.update(name.encode())
            h.update(Path(path).read_bytes())
    return h.hexdigest()[:16]


class Task(ABC):
    """A registered optimization problem.

    Constructors only store keyword arguments (scikit-learn style); work happens in ``evaluate``.
    Subclasses set :attr:`harness` (the trusted function run inside the sandbox around the
    candidate), implement :meth:`_make_spec`, :meth:`describe`, :meth:`seed_program`,
    :meth:`score_solution` and, when the harness needs inputs, :meth:`payload`.
    """

    harness: ClassVar[str | None] = None
    #: What a candidate is: one Python program, a system prompt, or a repository (training tasks).
    #: The agent and the CLI choose their tools and wording from it.
    candidate_kind: ClassVar[CandidateKind] = "program"
    #: The file a candidate is kept in in the agent's workspace (and named after by the CLI).
    candidate_file: ClassVar[str] = "candidate.py"
    #: Where a score is weaker than the trusted/untrusted split: one line every result and report shows
    #: (a peer's folder: its evaluator shares the candidate's jail). Empty: the split holds.
    trust_note: ClassVar[str] = ""

    def budget_estimate(self) -> dict[str, float]:
        """What one evaluation is expected to cost, per budget unit, checked against the caps before it
        runs; its first unit is the one the task's budget is counted in. Default: one evaluation."""
        return {"evaluations": 1.0}

    def evaluation_costs(self, result: EvalResult) -> dict[str, float]:
        """What one finished evaluation cost, per unit, from what the trusted side measured (debited
        with its result). Default: the estimate."""
        return self.budget_estimate()

    @abstractmethod
    def _make_spec(self) -> TaskSpec:
        """Builds this task's spec from its parameters."""

    @property
    def spec(self) -> TaskSpec:
        spec = self.__dict__.get("_spec")
        if spec is None:
            spec = self._make_spec()
            if not spec.task_class:
                cls = type(self)
                spec = dataclasses.replace(spec, task_class=f"{cls.__module__}:{cls.__qualname__}")
            self.__dict__["_spec"] = spec
        return spec

    @property
    def id(self) -> str:
        return self.spec.id

    @abstractmethod
    def describe(self) -> str:
        """The problem statement, candidate API and limits, as the agent will read them."""

    @abstractmethod
    def seed_program(self) -> str:
        """Source text of the starting program."""

    @abstractmethod
    def score_solution(self, data: Any, *, seed: int | None = None) -> EvalResult:
        """Trusted scoring of raw candidate output (no sandbox). Bad data gives ``INVALID``."""

    def constrain(self, parent: str, proposed: str) -> str | None:
        """What an optimizer may evaluate of a candidate it derived from ``parent``: ``proposed`` as it is by
        default; a task whose format fixes parts of the program (an OpenEvolve folder's text outside its
        EVOLVE-BLOCK markers) restores them, or answers None to drop the proposal."""
        return proposed

    def payload(self, seed: int | None) -> dict[str, Any]:
        """Plain data handed to the harness inside the sandbox (never hidden answers)."""
        return {"seed": seed}

    def limits(self) -> Limits:
        return Limits(wall_s=self.spec.time_limit_s, memory_mb=self.spec.memory_mb)

    def build_request(self, candidate_source: str, *, seed: int | None = None) -> RunRequest:
        return RunRequest(
            source=candidate_source,
            entry=self.spec.entries,
            harness=self.harness,
            payload=self.payload(seed),
            limits=self.limits(),
        )

    def evaluate(
        self,
        candidate_source: str,
        *,
        seed: int | None = None,
        executor: SandboxRunner | None = None,
    ) -> EvalResult:
        """Runs the candidate in the sandbox and scores its answer on the trusted side.

        Args:
            candidate_source: the candidate program's source text.
            seed: passed to the harness (tasks with randomness use it); recorded in provenance.
            executor: a sandbox runner; default: the process-wide warm pool.

        Returns:
            An :class:`EvalResult`; candidate failures are statuses, never exceptions.
        """
        if not isinstance(candidate_source, str):
            raise TypeError(f"candidate_source must be str, not {type(candidate_source).__name__}")
        runner = executor if executor is not None else default_runner()
        outcome = runner.run(self.build_request(candidate_source, seed=seed))
        return self.result_from_outcome(outcome, candidate_source, seed=seed)

    def result_from_outcome(self, outcome: RunOutcome, candidate_source: str, *, seed: int | None) -> EvalResult:
        """Turns what the sandbox observed into a scored, provenance-stamped result."""
        prov = self.provenance(candidate_source, seed=seed, sandbox_mode=outcome.sandbox_mode)
        if outcome.status is not Status.OK:
            return EvalResult.failure(
                outcome.status,
                failure_feedback(outcome),
                wall_s=outcome.wall_s,
                cpu_s=outcome.cpu_s,
                metrics={"exit_code": outcome.exit_code, "signal": outcome.signal},
                provenance=prov,
            )
        result = self.score_solution(outcome.value, seed=seed)
        return result.with_(wall_s=outcome.wall_s, cpu_s=outcome.cpu_s, provenance=prov)

    def provenance(self, candidate_source: str, *, seed: int | None, sandbox_mode: str) -> Provenance:
        spec = self.spec
        return Provenance(
            task_id=spec.id,
            task_version=spec.version,
            evaluator_hash=self.evaluator_hash(),
            candidate_sha256=candidate_sha256(candidate_source),
            seed=seed,
            sandbox_mode=sandbox_mode,
            versions=package_versions(),
            params=dict(spec.params),
        )

    def evaluator_hash(self) -> str:
        """Hash of the source of this task's modules (its class hierarchy and its harness)."""
        names = [c.__module__ for c in type(self).__mro__ if c.__module__.startswith("reasearch.")]
        if self.harness:
            names.append(self.harness.split(":", 1)[0])
        return _hash_modules(tuple(dict.fromkeys(names)))

    def result(self, score: float, *, metrics: Mapping[str, Any] | None = None, feedback: str = "",
               solution: Mapping[str, Any] | None = None) -> EvalResult:
        """An ``OK`` result with the normalized score filled in (for ``score_solution``)."""
        return EvalResult(
            status=Status.OK,
            score=float(score),
            normalized_score=self.spec.normalize(score),
            metrics=dict(metrics or {}),
            feedback=feedback,
            wall_s=0.0,
            cpu_s=0.0,
            solution=solution,
        )

    def invalid(self, feedback: str, *, metrics: Mapping[str, Any] | None = None) -> EvalResult:
        """An ``INVALID`` result (the candidate ran, but its answer breaks a constraint)."""
        return EvalResult.failure(Status.INVALID, feedback, metrics=metrics)

    def shipment(self) -> Mapping[str, Any] | None:
        """Plain data a node without this machine's files needs before it rebuilds the task from its spec (a task
        folder's content); None (the default) when the spec suffices. A Ray executor sends it with the spec."""
        return None

    @classmethod
    def receive_shipment(cls, shipment: Mapping[str, Any]) -> None:
        """Makes a :meth:`shipment` available in this process (called on the node before the task is rebuilt)."""
        return None  # the default task ships nothing

    def get_params(self) -> dict[str, Any]:
        """The constructor's keyword arguments, as stored on the instance."""
        sig = inspect.signature(type(self).__init__)
        return {
            name: getattr(self, name)
            for name, p in sig.parameters.items()
            if name != "self" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
        }

    def __getstate__(self) -> dict[str, Any]:
        # Caches (solver models, loaded data) are rebuilt on demand; only parameters travel.
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"


def failure_feedback(outcome: RunOutcome) -> str:
    """Text for the agent explaining a failed run: the parent's verdict, then the traceback/stderr tail."""
    parts = [f"{outcome.status.value}: {outcome.error.strip() or 'no further detail'}"]
    if outcome.stderr.strip() and outcome.stderr.strip() not in outcome.error:
        parts.append("stderr (tail):\n" + outcome.stderr[-_FEEDBACK_TAIL:])
    text = "\n".join(parts)
    return text[-(_FEEDBACK_TAIL * 2):]
