"""``best-of-n``: independent samples from the task description and the seed, no feedback between them.

Plain parallel sampling, the baseline an OpenEvolve user found to match evolution in an ablation: every
proposal sees only the task and the seed candidate (never another proposal or a score), and the best
of the evaluated samples is the answer. The seed itself is evaluated first, as every method does.

Trust boundary: as :mod:`reasearch.methods._driver` (replies are parsed, never run on the host).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reasearch.methods._driver import MethodDriver

__all__ = ["BestOfNConfig", "best_of_n"]


@dataclass(frozen=True, slots=True)
class BestOfNConfig:
    """Settings of ``best-of-n``.

    Attributes:
        samples: how many samples to draw; None (default) draws until the run's evaluation budget is
            spent (the budget is the n of best-of-n).
    """

    samples: int | None = None

    def __post_init__(self) -> None:
        if self.samples is not None and self.samples < 1:
            from reasearch.errors import ConfigError

            raise ConfigError(f"samples must be >= 1 (or None: the whole budget), not {self.samples}")

    def to_dict(self) -> dict[str, Any]:
        return {"samples": self.samples}


def best_of_n(driver: MethodDriver, config: BestOfNConfig) -> str:
    """Runs best-of-n on ``driver``'s run; returns why it stopped."""
    seed_cand = driver.evaluate(driver.seed_program(), parent=None, note="seed")
    drawn = 0
    while (reason := driver.stop_reason()) is None:
        base = driver.pinned() or seed_cand  # a person's pin replaces the starting candidate
        head = f"# Task\n{driver.task.describe()}\n\n# Starting candidate\n{driver.block(base.source)}\n\n"
        if config.samples is not None and drawn >= config.samples:
            return f"{config.samples} samples drawn"
        drawn += 1
        source = driver.candidate_from(driver.ask(driver.system_prompt(), head + (
            f"Write an improved version of this candidate (independent sample {drawn}: try your own idea). "
            "Reply with the full new candidate in one fenced block."), note=f"sample {drawn}"))
        if source is None:
            driver.skipped()
            continue
        driver.evaluate(source, parent=base.id, note=f"best-of-n sample {drawn}")
    return reason

