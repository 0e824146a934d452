"""``evolve``: an island-model evolutionary loop with MAP-Elites grids, in the AlphaEvolve/OpenEvolve manner.

A program database split into islands. Each island keeps a MAP-Elites grid over feature dimensions:
the task's own (``task.feature_values(source, result) -> {name: value}``) or, by default, code length
and score, each scaled min-max over the values seen so far and cut into ``feature_bins`` bins; a
cell holds the best program that falls in it. Each iteration works on the next island (round robin):
a parent is drawn (exploration: any program of the island; exploitation: a grid elite; else the
island's best), inspirations are shown beside it (the best programs overall and a few random ones of
the island), the model proposes a child as SEARCH/REPLACE edits (``diff_based_evolution``) or as a full
rewrite, and the child is evaluated and placed. Every ``migration_interval`` evaluations the best
``migration_rate`` of each island is copied to the next island (a ring). Cascade: a child that does
not compile is dropped before it spends anything (stage 0); a task with a cheap stage
(``task.cheap_stage(source) -> EvalResult``, none registered today) gates the full evaluation on it
reaching ``cascade_threshold`` of the parent's normalized score. Such a stage must run the candidate
in the task's sandbox, and its cost is not debited here: a task that adds one must also say what it
costs in the run's units (no registered task does yet).

Defaults follow OpenEvolve's ``DatabaseConfig`` and ``Config`` (openevolve/config.py, v0.2):
``num_islands=5``, ``migration_interval=50``, ``migration_rate=0.1``, ``feature_bins=10``,
``exploration_ratio=0.2``, ``exploitation_ratio=0.7``, ``num_top_programs=3``,
``num_diverse_programs=2``, ``population_size=1000``, ``diff_based_evolution=True``; the cascade's
first threshold ``0.5`` is OpenEvolve's ``cascade_thresholds[0]``.

Trust boundary: as :mod:`reasearch.methods._driver` (replies are parsed, never run on the host).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

from reasearch.errors import ConfigError
from reasearch.methods._driver import Candidate, MethodDriver

__all__ = ["EvolveConfig", "ProgramDatabase", "evolve"]


@dataclass(frozen=True, slots=True)
class EvolveConfig:
    """Settings of ``evolve`` (defaults: OpenEvolve's, see the module docstring).

    Attributes:
        num_islands: separate populations.
        migration_interval: evaluations between migrations.
        migration_rate: fraction of each island's best copied to the next island at a migration.
        feature_dimensions: MAP-Elites axes; ``()`` = the task's own, else ``("complexity", "score")``.
        feature_bins: bins per axis.
        exploration_ratio: chance the parent is any program of the island.
        exploitation_ratio: chance the parent is a grid elite of the island (else: the island's best).
        num_top_programs: inspirations taken from the best programs overall.
        num_diverse_programs: inspirations drawn at random from the island.
        population_size: programs kept over all islands (the worst non-elite of an island is dropped).
        diff_based_evolution: ask for SEARCH/REPLACE edits (a full rewrite is accepted too) instead of rewrites.
        cascade_threshold: with a task's cheap stage, the fraction of the parent's normalized score it
            must reach before the full evaluation runs.
    """

    num_islands: int = 5
    migration_interval: int = 50
    migration_rate: float = 0.1
    feature_dimensions: tuple[str, ...] = ()
    feature_bins: int = 10
    exploration_ratio: float = 0.2
    exploitation_ratio: float = 0.7
    num_top_programs: int = 3
    num_diverse_programs: int = 2
    population_size: int = 1000
    diff_based_evolution: bool = True
    cascade_threshold: float = 0.5

    def __post_init__(self) -> None:
        if self.num_islands < 1 or self.migration_interval < 1 or self.feature_bins < 1 or self.population_size < 1:
            raise ConfigError("num_islands, migration_interval, feature_bins and population_size must be >= 1")
        if not (0 <= self.migration_rate <= 1 and 0 <= self.exploration_ratio
                and 0 <= self.exploitation_ratio and self.exploration_ratio + self.exploitation_ratio <= 1):
            raise ConfigError("migration_rate is in [0, 1]; exploration_ratio + exploitation_ratio <= 1, both >= 0")
        if self.num_top_programs < 0 or self.num_diverse_programs < 0:
            raise ConfigError("num_top_programs and num_diverse_programs must be >= 0")
        object.__setattr__(self, "feature_dimensions", tuple(self.feature_dimensions))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["feature_dimensions"] = list(self.feature_dimensions)
        return d


@dataclass(slots=True)
class _Island:
    members: list[str] = field(default_factory=list)  # candidate ids, in arrival order
    grid: dict[tuple[int, ...], str] = field(default_factory=dict)  # cell -> elite candidate id


class ProgramDatabase:
    """Islands of evaluated programs, each with a MAP-Elites grid (deterministic: replays identically)."""

    def __init__(self, driver: MethodDriver, config: EvolveConfig) -> None:
        self.driver = driver
        self.config = config
        self.islands = [_Island() for _ in range(config.num_islands)]
        self.programs: dict[str, Candidate] = {}
        self.features: dict[str, dict[str, float]] = {}
        self._seen: dict[str, tuple[float, float]] = {}  # feature -> (min, max) over values seen

    # ------------------------------------------------------------ features
    def _raw_features(self, cand: Candidate) -> dict[str, float]:
        own = getattr(self.driver.task, "feature_values", None)
        if callable(own) and not self.config.feature_dimensions:
            values = {str(k): float(v) for k, v in dict(own(cand.source, cand.result)).items()}
        else:
            score = float(cand.result.score) if cand.ok and cand.result.score is not None else 0.0
            if cand.ok and self.driver.spec.direction == "minimize":
                score = -score
            values = {"complexity": float(len(cand.source)), "score": score}
        dims = self.config.feature_dimensions or tuple(values)
        missing = [d for d in dims if d not in values]
        if missing:
            raise ConfigError(f"feature dimensions {missing} are not known for {self.driver.spec.id}; "
                              f"known: {sorted(values)}")
        return {d: values[d] for d in dims}

    def cell(self, cid: str) -> tuple[int, ...]:
        out = []
        for name, value in self.features[cid].items():
            lo, hi = self._seen[name]
            frac = 0.0 if hi <= lo else (value - lo) / (hi - lo)
            out.append(min(self.config.feature_bins - 1, int(frac * self.config.feature_bins)))
        return tuple(out)

    # ------------------------------------------------------------ placing
    def add(self, cand: Candidate, island: int) -> None:
        """Places an evaluated program on ``island`` (its grid cell keeps the better of the two)."""
        if cand.id not in self.programs:
            self.programs[cand.id] = cand
            self.features[cand.id] = self._raw_features(cand)
            for name, value in self.features[cand.id].items():
                lo, hi = self._seen.get(name, (value, value))
                self._seen[name] = (min(lo, value), max(hi, value))
        isl = self.islands[island]
        if cand.id in isl.members:
            return
        isl.members.append(cand.id)
        if cand.ok:
            key = self.cell(cand.id)
            held = isl.grid.get(key)
            if held is None or self.driver.better(cand, self.programs[held]):
                isl.grid[key] = cand.id
        self._trim(isl)

    def _trim(self, isl: _Island) -> None:
        cap = max(1, self.config.population_size // self.config.num_islands)
        elites = set(isl.grid.values())
        while len(isl.members) > cap:
            others = [c for c in isl.members if c not in elites]
            if not others:
                return
            worst = min(others, key=self._rank)
            isl.members.remove(worst)

    def _rank(self, cid: str) -> float:
        """Larger is better whatever the direction; failures rank below every OK program."""
        c = self.programs[cid]
        if not c.ok or c.result.score is None:  # an OK result always has a score
            return float("-inf")
        s = float(c.result.score)
        return s if self.driver.spec.direction == "maximize" else -s

    def best_of(self, ids: list[str]) -> str:
        return max(ids, key=self._rank)

    # ------------------------------------------------------------ sampling
    def parent(self, island: int, rng: random.Random) -> Candidate:
        isl = self.islands[island]
        pool = isl.members or list(self.programs)
        r = rng.random()
        if r < self.config.exploration_ratio:
            cid = rng.choice(pool)
        elif r < self.config.exploration_ratio + self.config.exploitation_ratio and isl.grid:
            cid = rng.choice(sorted(isl.grid.values()))
        else:
            cid = self.best_of(pool)
        return self.programs[cid]

    def inspirations(self, island: int, parent: str, rng: random.Random) -> list[Candidate]:
        ranked = sorted((c for c in self.programs if c != parent and self.programs[c].ok), key=self._rank, reverse=True)
        top = ranked[: self.config.num_top_programs]
        rest = [c for c in self.islands[island].members if c != parent and c not in top]
        diverse = rng.sample(rest, min(self.config.num_diverse_programs, len(rest)))
        return [self.programs[c] for c in [*top, *diverse]]

    def migrate(self) -> None:
        """Copies the best ``migration_rate`` of each island to the next one (ring)."""
        moves = []
        for i, isl in enumerate(self.islands):
            ok = [c for c in isl.members if self.programs[c].ok]
            if not ok:
                continue
            k = max(1, int(len(ok) * self.config.migration_rate))
            moves += [(c, (i + 1) % len(self.islands)) for c in sorted(ok, key=self._rank, reverse=True)[:k]]
        for cid, dest in moves:
            self.add(self.programs[cid], dest)


def _prompt(driver: MethodDriver, parent: Candidate, inspirations: list[Candidate], diff: bool, iteration: int) -> str:
    parts = [f"# Task\n{driver.task.describe()}", f"(evolution iteration {iteration})"]
    if inspirations:
        parts.append("# Other programs of the population, for inspiration")
        for c in inspirations:
            score = f"{c.result.score:.12g}" if c.ok else c.result.status.value
            parts.append(f"## Program {c.id[:12]} (score {score})\n{driver.block(c.source)}")
    parts.append(f"# Parent to improve ({driver.describe_result(parent, 2000)})\n{driver.block(parent.source)}")
    if diff:
        parts.append("Propose an improvement of the parent as one or more edits, each in the form\n"
                     "<<<<<<< SEARCH\n(exact lines of the parent)\n=======\n(their replacement)\n>>>>>>> REPLACE\n"
                     "or, for a larger change, the full new candidate in one fenced block.")
    else:
        parts.append("Rewrite the parent into an improved candidate: the full new candidate in one fenced block.")
    return "\n\n".join(parts)


def evolve(driver: MethodDriver, config: EvolveConfig) -> str:
    """Runs the evolutionary loop on ``driver``'s run; returns why it stopped."""
    rng = random.Random(f"evolve:{driver.run.seed}")
    db = ProgramDatabase(driver, config)
    seed = driver.evaluate(driver.seed_program(), parent=None, note="seed")
    for island in range(config.num_islands):
        db.add(seed, island)
    cheap = getattr(driver.task, "cheap_stage", None)
    iteration = 0
    evaluated = 1
    while (reason := driver.stop_reason()) is None:
        island = iteration % config.num_islands
        iteration += 1
        parent = driver.pinned() or db.parent(island, rng)
        inspirations = db.inspirations(island, parent.id, rng)
        reply = driver.ask(
            driver.system_prompt(),
            _prompt(driver, parent, inspirations, config.diff_based_evolution, iteration),
            note=f"island {island}",
        )
        source = driver.candidate_from(reply, parent.source if config.diff_based_evolution else None)
        if source is None:
            driver.skipped()
            continue
        if callable(cheap) and parent.ok and not _passes_cheap(driver, cheap, source, parent, config):
            driver.skipped()
            continue
        child = driver.evaluate(source, parent=parent.id, note=f"evolve island {island} iteration {iteration}")
        db.add(child, island)
        evaluated += 1
        if evaluated % config.migration_interval == 0:
            db.migrate()
    return reason


def _passes_cheap(driver: MethodDriver, cheap: Any, source: str, parent: Candidate, config: EvolveConfig) -> bool:
    """The cascade's cheap stage (a task that declares one): recorded per step so a replay decides alike."""
    step = driver.next_step()
    rec = driver.recorded(step, "cascade")
    if rec is None:
        result = cheap(source)
        norm = driver.spec.normalize(result.score) if result.score is not None else None
        bar = driver.spec.normalize(parent.result.score) if parent.result.score is not None else None
        passed = norm is not None and (bar is None or norm >= config.cascade_threshold * bar)
        rec = driver.record(step, "cascade", {"passed": bool(passed), "score": result.score})
    return bool(rec["passed"])
