"""``reflect``: a GEPA-style reflective loop with a Pareto front over per-instance scores.

Each iteration draws a parent from the Pareto front (a candidate that is best on at least one
instance, drawn in proportion to how many instances it leads), shows the model the parent and the
evaluator's feedback on it, and asks for a fixed candidate; the child is evaluated and joins the pool.
Instances are what the task reports per item (``task.instance_scores(result) -> {id: score}``, or an
ARC set's per-task scores in ``metrics["tasks"]``); a task without them has one instance, its score,
and the front is the best candidate. On a prompt task the feedback is the student's outputs on a train
minibatch of ``reflection_minibatch_size`` examples (paid in student calls like any), the child is
tried on the same minibatch, and only a child that does better there is validated (GEPA's gate).
With ``use_merge``, after a child joins the front, two front candidates whose strengths differ (each
leads an instance the other does not) are merged by the model, at most ``max_merge_invocations`` times.

Defaults follow GEPA's ``optimize`` (gepa-ai/gepa, api.py): ``reflection_minibatch_size=3``,
``candidate_selection_strategy="pareto"``, ``skip_perfect_score=True``, ``use_merge=False``,
``max_merge_invocations=5``.

Trust boundary: as :mod:`reasearch.methods._driver` (replies are parsed, never run on the host).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from reasearch.errors import ConfigError
from reasearch.methods._driver import Candidate, MethodDriver

__all__ = ["ReflectConfig", "instance_scores", "pareto_front", "reflect"]


@dataclass(frozen=True, slots=True)
class ReflectConfig:
    """Settings of ``reflect`` (defaults: GEPA's, see the module docstring).

    Attributes:
        reflection_minibatch_size: train examples per reflection (prompt tasks).
        candidate_selection_strategy: ``pareto`` (a front candidate) or ``current_best``.
        skip_perfect_score: on a prompt task, skip the reflection when the parent got the whole minibatch right.
        use_merge: merge two front candidates whose strengths differ.
        max_merge_invocations: merges at most.
    """

    reflection_minibatch_size: int = 3
    candidate_selection_strategy: str = "pareto"
    skip_perfect_score: bool = True
    use_merge: bool = False
    max_merge_invocations: int = 5

    def __post_init__(self) -> None:
        if self.reflection_minibatch_size < 1 or self.max_merge_invocations < 0:
            raise ConfigError("reflection_minibatch_size must be >= 1 and max_merge_invocations >= 0")
        if self.candidate_selection_strategy not in ("pareto", "current_best"):
            raise ConfigError(f"candidate_selection_strategy is pareto or current_best, "
                              f"not {self.candidate_selection_strategy!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def instance_scores(task: Any, cand: Candidate) -> dict[str, float]:
    """Per-instance scores of an evaluation, larger is better (a failure scores -inf on every instance)."""
    own = getattr(task, "instance_scores", None)
    scores: Mapping[str, Any] | None = dict(own(cand.result)) if callable(own) else None
    tasks = cand.result.metrics.get("tasks") if scores is None else None
    if scores is None and isinstance(tasks, Mapping):
        scores = {str(k): (v.get("score") if isinstance(v, Mapping) else v) for k, v in tasks.items()}
    if not scores:
        scores = {"score": cand.result.score}
    sign = 1.0 if task.spec.direction == "maximize" else -1.0
    return {k: (sign * float(v) if cand.ok and isinstance(v, (int, float)) else float("-inf"))
            for k, v in scores.items()}


def pareto_front(scores: Mapping[str, Mapping[str, float]]) -> dict[str, int]:
    """``candidate -> number of instances it leads`` (ties lead together), over candidates leading >= 1."""
    instances = sorted({i for s in scores.values() for i in s})
    lead: dict[str, int] = {}
    for inst in instances:
        top = max(s.get(inst, float("-inf")) for s in scores.values())
        if top == float("-inf"):
            continue
        for cid, s in scores.items():
            if s.get(inst, float("-inf")) == top:
                lead[cid] = lead.get(cid, 0) + 1
    return lead


def _pick(front: dict[str, int], rng: random.Random) -> str:
    ids = sorted(front)
    return rng.choices(ids, weights=[front[c] for c in ids], k=1)[0]


class _Minibatches:
    """A prompt task's train minibatches: outcomes of a prompt on the next examples, paid per call."""

    def __init__(self, driver: MethodDriver, size: int) -> None:
        self.driver, self.size, self.index = driver, size, 0

    def next_ids(self) -> list[str]:
        batch = self.driver.splits.minibatch(self.index, self.size)
        self.index += 1
        return [ex.id for ex in batch]

    def run(self, prompt: str, ids: list[str]) -> tuple[float, str]:
        """(correct count, the outcomes as text) of ``prompt`` on ``ids``, as one step."""
        outcomes = self.driver.splits.run_train(prompt, ids, step=self.driver.next_step())
        text = "\n\n".join(f"example {o.id}: {'CORRECT' if o.correct else o.kind.upper()}\ninput: {o.input}\n"
                           f"reference: {o.reference}\nstudent output: {o.output[:1200]}" for o in outcomes)
        return float(sum(o.correct for o in outcomes)), text


def reflect(driver: MethodDriver, config: ReflectConfig) -> str:
    """Runs the reflective loop on ``driver``'s run; returns why it stopped."""
    rng = random.Random(f"reflect:{driver.run.seed}")
    pool: dict[str, Candidate] = {}
    scores: dict[str, dict[str, float]] = {}
    ancestry: dict[str, str | None] = {}

    def join(c: Candidate) -> None:
        if c.id not in pool:
            pool[c.id], scores[c.id], ancestry[c.id] = c, instance_scores(driver.task, c), c.parent

    join(driver.evaluate(driver.seed_program(), parent=None, note="seed"))
    batches = _Minibatches(driver, config.reflection_minibatch_size) if driver.splits is not None else None
    merges = 0
    iteration = 0
    while (reason := driver.stop_reason()) is None:
        iteration += 1
        front = pareto_front(scores) or {next(iter(pool)): 1}
        if config.candidate_selection_strategy == "current_best":
            best = driver.best()
            parent = best if best is not None and best.id in pool else pool[_pick(front, rng)]
        else:
            parent = pool[_pick(front, rng)]
        parent = driver.pinned() or parent  # a person's pin
        feedback = driver.describe_result(parent)
        ids: list[str] = []
        parent_batch = 0.0
        if batches is not None:
            ids = batches.next_ids()
            parent_batch, outcomes = batches.run(parent.source, ids)
            if config.skip_perfect_score and parent_batch >= len(ids):
                driver.skipped()
                continue
            feedback += f"\n\nThe student's outputs with this prompt on train examples:\n{outcomes}"
        user = (f"# Task\n{driver.task.describe()}\n\n(reflection {iteration})\n\n"
                f"# What the evaluator said about the current candidate\n"
                f"{feedback}\n\n# Current candidate\n{driver.block(parent.source)}\n\n"
                "Read the feedback, find what went wrong or what limits the score, and fix it. Reply with the "
                "full fixed candidate in one fenced block.")
        source = driver.candidate_from(driver.ask(driver.system_prompt(), user, note=f"reflect {iteration}"))
        if source is None:
            driver.skipped()
            continue
        if batches is not None:
            try:
                child_batch, _ = batches.run(source, ids)
            except ConfigError:  # the task refuses this prompt (too long, empty): nothing was spent
                driver.skipped()
                continue
            if child_batch <= parent_batch or driver.stop_reason() is not None:
                driver.skipped()
                continue
        child = driver.evaluate(source, parent=parent.id, note=f"reflect iteration {iteration}")
        join(child)
        if config.use_merge and merges < config.max_merge_invocations and child.id in pareto_front(scores):
            pair = _merge_pair(pareto_front(scores), scores, rng)
            if pair is not None and driver.stop_reason() is None:
                merges += 1
                merged = _merge(driver, pool[pair[0]], pool[pair[1]], merges)
                if merged is not None:
                    join(merged)
    return reason


def _merge_pair(front: dict[str, int], scores: Mapping[str, Mapping[str, float]],
                rng: random.Random) -> tuple[str, str] | None:
    """Two front candidates each strictly better than the other on some instance (strengths differ)."""
    ids = sorted(front)
    pairs = [(a, b) for i, a in enumerate(ids) for b in ids[i + 1:]
             if any(scores[a][k] > scores[b].get(k, float("-inf")) for k in scores[a])
             and any(scores[b][k] > scores[a].get(k, float("-inf")) for k in scores[b])]
    return rng.choice(pairs) if pairs else None


def _merge(driver: MethodDriver, a: Candidate, b: Candidate, n: int) -> Candidate | None:
    user = (f"# Task\n{driver.task.describe()}\n\nTwo candidates are each best on different instances.\n\n"
            f"# Candidate A ({driver.describe_result(a, 1500)})\n{driver.block(a.source)}\n\n"
            f"# Candidate B ({driver.describe_result(b, 1500)})\n{driver.block(b.source)}\n\n"
            "Merge them into one candidate that keeps the strengths of both. Reply with the full merged "
            "candidate in one fenced block.")
    source = driver.candidate_from(driver.ask(driver.system_prompt(), user, note=f"merge {n}"))
    if source is None:
        driver.skipped()
        return None
    return driver.evaluate(source, parent=b.id, note=f"reflect merge {n} of {a.id[:12]} and {b.id[:12]}")
