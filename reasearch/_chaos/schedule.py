"""A soak's schedule: its runs (which driver each), their faults, and the moments they strike, drawn from a seed.

:func:`make_schedule` draws everything from ``random.Random(seed)``: per run its driver, and the request
numbers (of that run's calls to the endpoint) at which each fault strikes; the same seed gives the same
schedule (:meth:`Schedule.describe` prints it). See :mod:`reasearch._chaos.soak` for what each fault does.

Trust boundary: pure data; runs nothing.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from reasearch._chaos.endpoint import ENDPOINT_FAULTS
from reasearch.errors import ConfigError

__all__ = ["DRIVERS", "FAULTS", "GROUPS", "HARNESS_ONLY", "METHODS", "PROMPT_TASK", "PROMPT_TEST", "TASK",
           "TRAINING_ONLY", "Fault", "RunPlan", "Schedule", "make_schedule"]

METHODS = ("best-of-n", "evolve", "reflect", "agent")  # one run per driver (the default draw)
GROUPS = ("compare", "fleet")  # one driver of two runs, a fleet's members sharing one model name
# Also a `compare` (best-of-n and evolve, one seed), a fleet (2 agent members), an MCP session (its client proposes
# from the endpoint; `reasearch mcp`, the server, is what is killed), a prompt task (best-of-n on gsm8k/v1, synthetic
# data, its student the soak's fake student server), a training task (an agent's experiments on the toy training
# task: one training job each, on a leased slot).
DRIVERS = (*METHODS, *GROUPS, "mcp", "prompt", "training")
PROMPT_TASK, PROMPT_TEST = "gsm8k/v1", 10  # the sealed test pass: PROMPT_TEST student calls beyond the cap
TASK = "heilbronn/n11-v1"
FAULTS = ("kill_driver", "kill_worker", *ENDPOINT_FAULTS, "sqlite_lock", "store_restart", "disk_full", "clock_jump",
          "kill_job")
HARNESS_ONLY = ("kill_worker", "sqlite_lock", "store_restart", "disk_full", "clock_jump", "kill_job")  # after a reply
TRAINING_ONLY = ("kill_job",)  # kinds that strike only a training run (drawn for no other run)


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault: its kind, the run's request number it strikes at, and a delay or length in seconds."""

    kind: str
    request: int
    seconds: float = 0.0
    hold: bool = False  # kill_driver: while the endpoint holds the request (else ``seconds`` after its reply)


@dataclass(frozen=True, slots=True)
class RunPlan:
    """One run of a soak and the faults scheduled for it."""

    run_id: str
    method: str
    evaluations: int
    faults: tuple[Fault, ...]

    def caps(self) -> dict[str, float]:
        if self.method == "prompt":  # student calls: one per validation question an evaluation asks
            return {"student_calls": float(10 * self.evaluations)}
        if self.method in GROUPS:  # per member: a fleet's caps are its task's unit only
            return {"evaluations": float(self.member_evaluations)}
        if self.method == "training":  # one experiment per reply (a new settings.json, then run_experiment)
            return {"experiments": float(self.evaluations), "model_calls": float(4 * self.evaluations + 20)}
        return {"evaluations": float(self.evaluations), "model_calls": float(4 * self.evaluations + 20)}

    @property
    def member_evaluations(self) -> int:
        """A compare's or fleet's per-member cap: its two members share the run's evaluations."""
        return max(3, self.evaluations // 2)

    def members(self) -> tuple[str, ...]:
        """The run ids this plan's driver makes: its own, or its fleet's two members' (``FLEET-m000``...)."""
        return (f"{self.run_id}-m000", f"{self.run_id}-m001") if self.method in GROUPS else (self.run_id,)


@dataclass(frozen=True, slots=True)
class Schedule:
    """A soak's runs and faults, drawn from ``seed``."""

    seed: int
    runs: tuple[RunPlan, ...]

    def describe(self) -> str:
        lines = [f"chaos schedule, seed {self.seed}: {len(self.runs)} runs"]
        for r in self.runs:
            faults = ", ".join(f"{f.kind}{'(hold)' if f.hold else ''}@{f.request}"
                               + (f"+{f.seconds:.2f}s" if f.seconds else "") for f in r.faults)
            lines.append(f"  {r.run_id} {r.method} {r.evaluations} evaluations: {faults or 'no faults'}")
        return "\n".join(lines)


def make_schedule(seed: int, *, runs: int, evaluations: int, kills: int, faults: int,
                  kinds: Sequence[str] | None = None, methods: Sequence[str] = METHODS) -> Schedule:
    """``runs`` runs of ``evaluations`` each; per run ``kills`` driver kills and ``faults`` other faults (of
    ``kinds``; default every kind, ``kill_job`` only where a training run can be drawn), each at a distinct request
    number of that run, all drawn from ``random.Random(seed)``. A training-only kind is never drawn for another
    run (the next kind of the deck is)."""
    if kinds is None:
        kinds = [k for k in FAULTS if k not in TRAINING_ONLY or "training" in methods]
    if not methods or set(methods) - set(DRIVERS):
        raise ConfigError(f"unknown or no drivers {sorted(set(methods) - set(DRIVERS))}; known: {list(DRIVERS)}")
    unknown = sorted(set(kinds) - set(FAULTS))
    if unknown:
        raise ConfigError(f"unknown chaos faults {unknown}; known: {list(FAULTS)}")
    for name, value, least in (("runs", runs, 1), ("evaluations", evaluations, 3), ("kills", kills, 0),
                               ("faults", faults, 0)):
        if value < least:
            raise ConfigError(f"a soak needs {name} >= {least}, not {value}")
    rng = random.Random(seed)
    plans = []
    others = [k for k in kinds if k != "kill_driver"]
    if faults and not others:
        raise ConfigError("faults > 0 needs a fault kind other than kill_driver")
    deck: list[str] = []
    for i in range(runs):
        method = rng.choice(list(methods))
        # A run asks about one model call per evaluation: its requests are numbered 1..~evaluations.
        span = max(evaluations - 1, 2)
        picks = rng.sample(range(2, span + 2), min(kills + faults, span))
        chosen: list[Fault] = []
        for j, n in enumerate(sorted(picks)):
            if j < kills:
                hold = rng.random() < 0.5
                chosen.append(Fault("kill_driver", n, 0.0 if hold else round(rng.uniform(0.0, 0.4), 3), hold))
            else:  # from a shuffled deck of the kinds: every kind is drawn once before any is drawn again
                if not deck:
                    deck = rng.sample(others, len(others))
                at = _last_applicable(deck, method)
                if at is None:  # only training-only kinds left for another run: a fresh deck
                    deck = rng.sample(others, len(others))
                    at = _last_applicable(deck, method)
                    if at is None:
                        continue  # no kind applies to this run
                kind = deck.pop(at)
                seconds = round(rng.uniform(0.2, 1.5), 3) if kind == "sqlite_lock" else 0.0
                if kind == "kill_worker":
                    seconds = round(rng.uniform(0.0, 0.2), 3)
                if kind == "kill_job":  # killed this long after the training job was first seen (it trains 0.3 s)
                    seconds = round(rng.uniform(0.0, 0.2), 3)
                chosen.append(Fault(kind, n, seconds))
        rng.shuffle(chosen)  # kills at random points of the run, not only its first requests
        numbers = sorted(f.request for f in chosen)
        faults_at = tuple(Fault(f.kind, n, f.seconds, f.hold) for f, n in zip(chosen, numbers, strict=True))
        plans.append(RunPlan(f"chaos-s{seed}-r{i:04d}", method, evaluations, faults_at))
    return Schedule(seed, tuple(plans))


def _last_applicable(deck: list[str], method: str) -> int | None:
    """The index of the deck's last kind that may strike a run of ``method`` (None: none may)."""
    return next((i for i in range(len(deck) - 1, -1, -1) if deck[i] not in TRAINING_ONLY or method == "training"),
                None)
