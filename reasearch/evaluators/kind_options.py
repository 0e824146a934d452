"""The options one evaluation of a prompt task or of a training task takes, as one typed object each.

They are the ``options`` argument of ``PromptTask.evaluate`` and ``TrainingTask.evaluate`` (see
:mod:`reasearch.evaluators.kinds` for the kinds themselves). Neither ever changes a result's score: they
say which split is scored and who makes the student calls (prompt tasks), or where an experiment's
by-products go (training tasks).

Trust boundary: :meth:`ExperimentOptions.from_dict` reads the wire form of a request (another process's
data): unknown keys and wrong types are refused, never passed on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reasearch.errors import ConfigError

if TYPE_CHECKING:
    from reasearch.evaluators.prompt import StudentCaller

__all__ = ["ExperimentOptions", "PromptOptions"]


@dataclass(frozen=True, slots=True)
class PromptOptions:
    """Options of one prompt-task evaluation.

    Attributes:
        split: the split scored: ``validation`` (the default), or ``test``/``train`` for the trusted side only.
        caller: who makes the student calls (default: the student's client, directly; in a run, a ledger
            that serves repeats from the store and debits each call).
    """

    split: str = "validation"
    caller: StudentCaller | None = None


@dataclass(frozen=True, slots=True)
class ExperimentOptions:
    """Options of one experiment of a training task (where its by-products go; never its score).

    Attributes:
        experiment_dir: a host folder of the caller's (created if missing) that receives the training log
            as it is written (``train.log``) and ``status.json``, and where a file named ``STOP`` stops
            the experiment. None: the log goes with the scratch folder.
    """

    experiment_dir: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ExperimentOptions:
        """Reads the wire form (``EvalRequest.options``); an unknown key is a ConfigError, never ignored."""
        unknown = sorted(set(data) - {"experiment_dir"})
        if unknown:
            raise ConfigError(f"unknown experiment options {unknown}; the one option is experiment_dir")
        folder = data.get("experiment_dir")
        if folder is not None and not isinstance(folder, str):
            raise ConfigError(f"experiment_dir must be a folder path (str), not {type(folder).__name__}")
        return cls(experiment_dir=folder)

    def to_dict(self) -> dict[str, str]:
        """The wire form (empty when nothing is set)."""
        return {} if self.experiment_dir is None else {"experiment_dir": self.experiment_dir}
