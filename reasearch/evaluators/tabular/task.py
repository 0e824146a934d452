"""``tabular/csv-v2``: time-series / tabular forecasting scored like a competition with a private split.

The candidate is a repository whose ``train.py`` runs in a training jail that reads only the public
folder (``train.csv`` with the target, ``val.csv`` and ``test.csv`` without it) and writes two prediction
files to ``REASEARCH_OUT_DIR``: ``val_predictions.csv`` (the validation period: the experiment's score)
and ``submission.csv`` (the test period). Nothing of the candidate runs at scoring: the trusted side
reads both files through the guarded reader (:mod:`reasearch.evaluators.outputs`), validates them
(header, every id once, finite numbers) and scores the validation predictions on labels held only in
this process's memory. The test labels are used by :meth:`TabularTask.score_submission` alone, which the
agent reaches through ``submit`` (a separate, small ``submissions`` budget), never through an experiment.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from reasearch.engine.gpu import SlotLease
from reasearch.engine.protocol import SandboxRunner
from reasearch.errors import ConfigError
from reasearch.evaluators._secret import derive_seed, fingerprint
from reasearch.evaluators.kind_options import ExperimentOptions
from reasearch.evaluators.outputs import OutputError, read_output
from reasearch.evaluators.params import Range, meta
from reasearch.evaluators.result import EvalResult
from reasearch.evaluators.spec import TaskSpec
from reasearch.evaluators.tabular import BEST_KNOWN_SOURCE
from reasearch.evaluators.tabular._data import Split, load_split
from reasearch.evaluators.tabular.metrics import (
    DIRECTIONS,
    METRICS,
    PredictionError,
    parse_predictions,
)
from reasearch.evaluators.training import TrainingParams, TrainingTask, heldout_flags

__all__ = ["SUBMISSION_FILE", "TabularParams", "TabularTask"]

SUBMISSION_FILE = "submission.csv"
VAL_FILE = "val_predictions.csv"
_BYTES_PER_ROW = 128  # a prediction file may hold this much per row (plus a header's worth)
_own = threading.local()  # the caller's experiment folder of the evaluation running in this thread


@dataclass(frozen=True, slots=True)
class TabularParams(TrainingParams):
    """The parameters of ``tabular/csv-v2`` (constructor, ``--params`` and ``spec.params`` come from here)."""

    family: ClassVar[str] = "tabular/csv-v2"

    data: str = field(default='default', metadata=meta(
        "default (a generated daily series, the same on every machine but for the held-out rows' noise, which the "
        "evaluator secret draws; target sales) or a CSV path."))
    target: str = field(default='', kw_only=True, metadata=meta(
        'the column to predict (default sales for the default data; required otherwise).'))
    time: str = field(default='', kw_only=True, metadata=meta(
        'the time column (default: the first column named time, date, timestamp, datetime or ds).'))
    metric: str = field(default='rmse', kw_only=True, metadata=meta(
        'rmse (default), mae, pearson or accuracy (class labels as numbers).', Range(choices=tuple(METRICS))))
    val_frac: float = field(default=0.2, kw_only=True, metadata=meta(
        'share of the train period (its end) held out as the validation period.', Range(ge=0.01, le=0.5)))
    test_frac: float = field(default=0.2, kw_only=True, metadata=meta(
        'share of all rows (the end) held out as the private test period.', Range(ge=0.01, le=0.5)))
    time_budget_s: float = field(default=60.0, kw_only=True, metadata=meta(
        'training seconds of one experiment unless it asks for another budget.'))
    grace_s: float = field(default=10.0, kw_only=True, metadata=meta(
        "at most this long to save after the budget's SIGTERM (save_grace_s: min(grace_s, max(10 s, 5% of the "
        "budget))); then the run is killed and scored TIMEOUT.", Range(ge=0)))
    max_submissions: int = field(default=5, kw_only=True, metadata=meta(
        "how many private-test scores (submit) one run may ask for (a run's submissions cap, when lower, wins).",
        Range(ge=0, le=1000)))

    def __post_init__(self) -> None:
        TrainingParams.__post_init__(self)  # zero-argument super() does not work in a slots dataclass (Python < 3.14)
        if self.data != "default" and not self.target:
            raise ConfigError("tabular/csv-v2: a data file needs -p target=COLUMN (the column to predict)")


class TabularTask(TrainingTask[TabularParams]):
    """Forecast a target column from a time-ordered table; scored on a validation period, submitted on a
    private test period.

    Parameters: :class:`TabularParams`.
    """

    scoring_packages = ()  # no scoring jail: nothing of the candidate runs at scoring (its CSV files are parsed)

    @property
    def max_submissions(self) -> int:
        """How many private-test scores one run may ask for (the agent's ``submit`` tool reads it)."""
        return int(self.params.max_submissions)

    def _make_spec(self) -> TaskSpec:
        return TaskSpec(
            id="tabular/csv-v2", version=2, direction=DIRECTIONS[self.params.metric],
            time_limit_s=float(self.params.max_time_budget_s) + float(self.params.grace_s) + 60.0,
            memory_mb=int(self.params.memory_mb), entry_point="train.py", deterministic=False, params=self.get_params(),
            best_known_source=BEST_KNOWN_SOURCE)

    # ------------------------------------------------------------ data and seed
    def _target(self) -> str:
        return self.params.target or "sales"

    def split(self) -> Split:
        """The prepared split (public files written once; labels in memory only)."""
        seed = derive_seed("tabular/csv-v2 held-out noise", {"version": 2}) if self.params.data == "default" else 0
        return load_split(str(self.params.data), self._target(), str(self.params.time), float(self.params.val_frac),
                          float(self.params.test_frac), seed)

    def train_data_dir(self) -> Path:
        return self.split().public_dir

    def job_env(self) -> dict[str, str]:
        return {"REASEARCH_METRIC": str(self.params.metric)}

    def heldout_public(self) -> bool:
        """False: the default series is generated from the evaluator secret, and a user's CSV is the user's."""
        return False

    def seed_files(self) -> dict[str, str]:
        seed = resources.files("reasearch.evaluators.tabular") / "seed"
        return {"train.py": (seed / "train.py.txt").read_text(encoding="utf-8")}

    def describe(self) -> str:
        p = self.params
        s = self.split()
        what = ("a generated daily series (target `sales`; trend with regime changes, weekly and yearly "
                "seasonality, promotions, price, temperature, autocorrelated noise; the held-out periods' noise "
                "is drawn from this evaluator's secret)" if p.data == "default"
                else f"the file {p.data}")
        better = "higher" if DIRECTIONS[p.metric] == "maximize" else "lower"
        return f"""# tabular/csv-v2: forecast `{s.target_col}` on a time-ordered table ({p.metric}, {better} is \
better)

Data: {what}. Rows are sorted by `{s.time_col}` and cut in time order: train ({s.n_train} rows), a
validation period ({len(s.val_ids)} rows, the end of the train period) and a private test period
({len(s.test_ids)} rows, the end of the data). Every row has an integer `row_id`.

The candidate is the repository in your workspace (train.py and any files you add), under git. An
experiment (`run_experiment`) runs `python3 train.py` in a fresh sandbox (no network; NumPy and torch
importable) with these environment variables:

- REASEARCH_DATA_DIR: train.csv (row_id, {s.time_col}, features, {s.target_col}), val.csv and test.csv
  (row_id, {s.time_col}, features: no target), meta.json (the column names). The validation and test
  targets are never available to training.
- REASEARCH_OUT_DIR: the only writable folder. train.py must write there val_predictions.csv (every
  val.csv row) and submission.csv (every test.csv row), each with the header `row_id,prediction`, one
  row per id, finite numbers.
- REASEARCH_METRIC: {self.params.metric}. REASEARCH_TIME_BUDGET_S: training seconds. {self.describe_budget()}

Metric (trusted, fixed): {self.params.metric} of val_predictions.csv on the validation period's targets is the
experiment's score. A malformed file (missing or extra ids, NaN, wrong header) is INVALID.
submission.csv is validated with every experiment; its score on the private test period is only
available through `submit(step)` ({int(self.params.max_submissions)} submissions per run, as a competition
limits them): submit an experiment whose validation score you trust.
Print JSON lines such as {{"step": 10, "loss": 0.4}} to show the training curve.
"""

    # ------------------------------------------------------------ trusted side
    def _score(self, pred: np.ndarray, truth: np.ndarray) -> float:
        return METRICS[str(self.params.metric)](pred, truth)

    def score_solution(self, data: Any, *, seed: int | None = None) -> EvalResult:
        """Scores validation predictions given as ``{"predictions": [one number per validation row]}``."""
        s = self.split()
        if not isinstance(data, dict) or not isinstance(data.get("predictions"), list):
            return self.invalid("expected {'predictions': [one number per validation row]}")
        try:
            pred = np.asarray(data["predictions"], dtype=np.float64)
        except (TypeError, ValueError):
            return self.invalid("predictions must be numbers")
        if pred.shape != (len(s.val_ids),) or not np.isfinite(pred).all():
            return self.invalid(f"expected {len(s.val_ids)} finite predictions, got shape {pred.shape}")
        value = self._score(pred, s.val_labels)
        return self.result(value, metrics={f"val_{self.params.metric}": value, "val_rows": len(s.val_ids),
                                           "data": s.name, "split_key": s.key, **heldout_flags(False, {})},
                           feedback=f"val_{self.params.metric} {value:.5g} over the {len(s.val_ids)} validation rows")

    def trusted_evaluation(self, *, exp_dir: Path, repo_dir: Path, ckpt_dir: Path, lease: SlotLease) -> EvalResult:
        s = self.split()
        try:
            val = parse_predictions(read_output(ckpt_dir / VAL_FILE, _cap(len(s.val_ids))), s.val_ids, VAL_FILE)
            raw = read_output(ckpt_dir / SUBMISSION_FILE, _cap(len(s.test_ids)))
            parse_predictions(raw, s.test_ids, SUBMISSION_FILE)
        except (OutputError, PredictionError) as exc:
            return self.invalid(f"{exc}; train.py must write {VAL_FILE} and {SUBMISSION_FILE} (header "
                                "row_id,prediction, one row per id) in REASEARCH_OUT_DIR")
        res = self.score_solution({"predictions": val.tolist()})
        digest = hashlib.sha256(raw).hexdigest()
        own = getattr(_own, "folder", None)
        if own is not None:  # what `submit` scores later: the validated bytes, kept beside the training log
            (Path(own) / SUBMISSION_FILE).write_bytes(raw)
        return res.with_(metrics={**dict(res.metrics), "submission_rows": len(s.test_ids),
                                  "submission_sha256": digest},
                         feedback=res.feedback + f"; {SUBMISSION_FILE} valid ({len(s.test_ids)} rows, sha256 "
                                                 f"{digest[:12]}): `submit` scores it on the private test period")

    def evaluate(self, candidate_source: str, *, seed: int | None = None, executor: SandboxRunner | None = None,
                 options: ExperimentOptions | None = None) -> EvalResult:
        _own.folder = options.experiment_dir if options is not None else None
        try:
            return super().evaluate(candidate_source, seed=seed, executor=executor, options=options)
        finally:
            _own.folder = None

    def score_submission(self, data: bytes) -> EvalResult:
        """Scores a submission file's bytes on the private test period (trusted side; costs a submission)."""
        p = self.params
        s = self.split()
        try:
            pred = parse_predictions(data, s.test_ids, SUBMISSION_FILE)
        except PredictionError as exc:
            return self.invalid(str(exc))
        value = self._score(pred, s.test_labels)
        return self.result(value, metrics={f"test_{p.metric}": value, "test_rows": len(s.test_ids),
                                           "submission_sha256": hashlib.sha256(data).hexdigest(),
                                           "secret_fingerprint": fingerprint() if p.data == "default" else None,
                                           **heldout_flags(False, {})},
                           feedback=f"private test {p.metric} {value:.5g} over {len(s.test_ids)} rows")


def _cap(rows: int) -> int:
    return 4096 + _BYTES_PER_ROW * rows
