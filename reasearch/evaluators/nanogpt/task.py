"""``nanogpt/v2``: train a byte-level GPT within a time budget; scored by validation bits per byte.

The candidate is a repository (``train.py``, ``model.py`` and whatever else it adds). Training runs in a
jail with only the training split; the default corpus (``generated``: text of a public generator sampled
under the evaluator secret, :mod:`._generate`) is *sealed*: its held-out text exists nowhere else, so it
cannot be carried, recited or rebuilt, only predicted. The public corpora (``shakespeare``, ``stdlib``)
are not: their results say ``metrics["heldout_public"] is True`` and ``metrics["sealed"] is False``, and a
repository that carries their held-out split is ``INVALID`` before it trains
(:func:`reasearch.evaluators.heldout_content.find_heldout_content`; v1 scored tiny Shakespeare by default
and called it sealed). The trusted evaluation then runs the
fixed module ``_infer.py`` twice in fresh jails: once on evenly spaced held-out windows, once on the same
windows with every row's suffix (from a random position on) replaced by other held-out text, in an order
the candidate cannot tell apart. The trusted side (this process) computes the metric from the raw logits
of the first run, and checks that each row's log-probabilities before its cut agree in both runs (in a
space the candidate cannot rescale: see :func:`causality_gap`): a model whose earlier predictions move
when later bytes change peeks at the future and is ``INVALID``.

Candidate code in the scoring jails sees held-out bytes: what it prints or raises there never reaches
the agent (feedback gives the step, a built-in exception class and a ``file:line`` of the repository,
checked by :mod:`reasearch.evaluators._scoring_report`); the jails' logs stay on the host for a person
(``metrics["scoring_log_dir"]``).
"""

from __future__ import annotations

import functools
import json
import math
import os
import secrets
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from reasearch.engine.files import UntrustedFileError, read_npy, read_untrusted
from reasearch.engine.gpu import SlotLease
from reasearch.engine.training import run_job
from reasearch.errors import ConfigError
from reasearch.evaluators._scoring_report import REPORT_NAME, WITHHELD, describe_failure
from reasearch.evaluators.heldout_content import HeldoutFingerprint
from reasearch.evaluators.nanogpt._data import DEFAULT_CORPUS, Corpus, corpus_is_public, load_corpus
from reasearch.evaluators.params import Range, meta
from reasearch.evaluators.result import EvalResult, Provenance, Status
from reasearch.evaluators.spec import TaskSpec
from reasearch.evaluators.training import (
    TORCH_SCORING_PACKAGES,
    TrainingParams,
    TrainingTask,
    scoring_jail_note,
)

__all__ = ["CAUSALITY_FLOOR", "CAUSALITY_TOL", "NanoGPTParams", "NanoGPTTask", "bits_per_byte", "causality_gap"]

_MAX_CONFIG_BYTES = 64 * 1024
_MAX_BLOCK = 4096
_BATCH_TOKENS = 8192  # tokens per inference batch
# The causality check compares log-probabilities (nats) clipped at this floor, with this absolute tolerance.
# A peeking model can move a checked log-probability by at most CAUSALITY_TOL unseen, so it gains at most
# ~CAUSALITY_TOL / ln 2 bits per byte; below the floor a byte already costs >= 20 nats, more than any model
# worth scoring pays, so nothing is won by peeking there.
CAUSALITY_FLOOR = -20.0
CAUSALITY_TOL = 1e-4
# The steps of _infer.py, as the feedback names them.
_INFER_STEPS = {
    "weights": "while loading the weights (torch.load(weights_only=True), or safetensors): model.pt must hold a "
               "state_dict of plain tensors, and config.json a JSON object",
    "import": "while importing model.py", "build": "in build_model(config)",
    "load_state_dict": "in load_state_dict(the saved weights)", "forward": "during model(idx) on held-out windows",
    "output": "checking the output: model(idx) must return float logits [B, T, 256] (or a tuple whose first item "
              "is that)",
}


@functools.lru_cache(maxsize=4)
def _fingerprint(corpus: Corpus) -> HeldoutFingerprint:
    train = (corpus.train_dir / "train.bin").read_bytes()
    what = ("tiny Shakespeare's held-out split" if corpus.name == "shakespeare"
            else f"corpus {corpus.name!r}'s held-out split")
    return HeldoutFingerprint.of(corpus.val_path.read_bytes(), exclude=train, what=what)


def bits_per_byte(logits: np.ndarray, targets: np.ndarray) -> float:
    """Mean cross-entropy of ``targets`` under ``softmax(logits)``, in bits (float64 throughout)."""
    z = logits.astype(np.float64)
    z -= z.max(axis=-1, keepdims=True)
    logz = np.log(np.exp(z).sum(axis=-1))
    picked = np.take_along_axis(z, targets[..., None].astype(np.int64), axis=-1)[..., 0]
    return float(np.mean(logz - picked) / math.log(2))


def _clipped_log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    z -= z.max(axis=-1, keepdims=True)
    z -= np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return np.maximum(z, CAUSALITY_FLOOR)


def causality_gap(a: np.ndarray, b: np.ndarray) -> float:
    """Largest difference between two runs' predictions, as ``max |clip(log_softmax)|`` (nats).

    Adding a constant to a row of logits, or scaling them, changes nothing here unless it changes the
    probabilities; the tolerance it is compared with is absolute (:data:`CAUSALITY_TOL`), so a model cannot
    buy itself slack by inflating its logits.
    """
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(_clipped_log_softmax(a) - _clipped_log_softmax(b))))


@dataclass(frozen=True, slots=True)
class NanoGPTParams(TrainingParams):
    """The parameters of ``nanogpt/v2`` (constructor, ``--params`` and ``spec.params`` come from here)."""

    family: ClassVar[str] = "nanogpt/v2"

    corpus: str = field(default='generated', metadata=meta(
        '"generated" (default: a public generator\'s text sampled under the evaluator secret; sealed), "shakespeare" '
        '(tiny Shakespeare: public held-out data, NOT sealed), "stdlib" (the Python standard library\'s sources: '
        'public, and a jail can read them: NOT sealed) or a text file path (the user\'s own data: sealed unless a '
        'jail can read it).'))
    time_budget_s: float = field(default=300.0, kw_only=True, metadata=meta(
        'training seconds of one experiment unless it asks for another budget (paper: 300 on a GPU; tests: a few '
        'seconds on CPU).'))
    eval_tokens: int = field(default=65536, kw_only=True, metadata=meta(
        "how many held-out bytes are predicted (the metric's fixed token count).", Range(ge=256, le=4194304)))
    eval_time_limit_s: float = field(default=300.0, kw_only=True, metadata=meta(
        'wall limit of each trusted inference run.'))


class NanoGPTTask(TrainingTask[NanoGPTParams]):
    """Byte-level GPT language modelling under a training time budget (minimize validation bpb).

    Parameters: :class:`NanoGPTParams`.
    """

    # The scoring jail's runtime (``_infer.py`` and the candidate's model.py): NumPy, torch, safetensors.
    scoring_packages: ClassVar[tuple[str, ...]] = TORCH_SCORING_PACKAGES

    def _make_spec(self) -> TaskSpec:
        p = self.params
        return TaskSpec(
            id="nanogpt/v2", version=2, direction="minimize",
            time_limit_s=float(p.max_time_budget_s) + float(p.grace_s) + 2 * float(p.eval_time_limit_s),
            memory_mb=int(p.memory_mb), best_known=None,
            best_known_source="none recorded for the generated corpus; on corpus=shakespeare (public), TASKS.md: "
                              "nanoGPT's CPU config reaches ~2.72 bpb in ~3 min",
            entry_point="train.py", deterministic=False, seed_score=None, params=self.get_params())

    # ------------------------------------------------------------ data and seed
    def _corpus(self) -> Corpus:
        return load_corpus(str(self.params.corpus))

    def train_data_dir(self) -> Path:
        return self._corpus().train_dir

    def seed_files(self) -> dict[str, str]:
        seed = resources.files("reasearch.evaluators.nanogpt") / "seed"
        return {name: (seed / f"{name}.txt").read_text(encoding="utf-8") for name in ("model.py", "train.py")}

    def describe(self) -> str:
        corpus = {DEFAULT_CORPUS: "text sampled from an order-4 byte Markov chain fitted on tiny Shakespeare, "
                                  "its rows redrawn under this machine's evaluator secret",
                  "shakespeare": "tiny Shakespeare", "stdlib": "the Python standard library's .py sources"}.get(
            str(self.params.corpus), f"the file {self.params.corpus}")
        split = ("its own training sample; the held-out text is a separate sample of the same chain"
                 if str(self.params.corpus) == DEFAULT_CORPUS else "90%")
        return f"""# nanogpt/v2: train a byte-level GPT within a time budget (minimize validation bits per byte)

The candidate is the repository in your workspace (train.py, model.py, any files you add), under git.
An experiment (`run_experiment`) runs `python3 train.py` in a fresh sandbox: no network, a read-only
copy of the repository as the working directory, and these environment variables:

- REASEARCH_TIME_BUDGET_S: training seconds allowed. {self.describe_budget()}
- REASEARCH_DATA_DIR: holds train.bin, the training bytes ({corpus}: {split}; vocab = 256 byte
  values). The validation bytes are never available to training; a repository that carries held-out
  data (raw, compressed or base64) is INVALID.
- REASEARCH_OUT_DIR: the only writable folder. train.py must save there:
  config.json (a JSON object, passed to model.build_model; must hold an int "block_size", the context
  length used for evaluation) and model.pt (`torch.save(model.state_dict(), ...)`; loaded with
  `torch.load(weights_only=True)`, so plain tensors only) or model.safetensors.
- CUDA_VISIBLE_DEVICES: the leased GPU (empty on a CPU slot; OMP_NUM_THREADS = the slot's cores).

Metric (trusted, fixed; train.py cannot change it): the evaluator imports model.py, calls
`build_model(config)`, loads the weights, and runs `model(idx)` on held-out windows of block_size bytes:
idx is an int64 tensor [B, T]; the model must return logits [B, T, 256] (or a tuple whose first item is
that) predicting byte t+1 from bytes <= t. Score = mean cross-entropy / ln 2 over {int(self.params.eval_tokens)}
held-out bytes (bits per byte, lower is better; 8.0 = uniform guessing). A causality check perturbs
later bytes and requires earlier predictions (log-probabilities) to stay the same within {CAUSALITY_TOL:g}
nats: a model that looks ahead is INVALID. During scoring your code sees held-out bytes, so what it prints
or raises there is withheld: a failure is reported as its step, exception class and file:line only.
There model.py can import NumPy and torch only, and no native code from the repository or the outputs loads.
{"" if self._corpus().sealed else "This corpus is NOT sealed (" + self._corpus().seal_note + ")."}

Print JSON lines such as {{"step": 100, "loss": 1.9}} to show the training curve (read_log shows them);
what train.py prints about its own score is informational only.
"""

    # ------------------------------------------------------------ trusted side
    def _read_config(self, ckpt_dir: Path) -> dict[str, Any] | str:
        try:
            raw = read_untrusted(ckpt_dir, "config.json", max_bytes=_MAX_CONFIG_BYTES)
        except UntrustedFileError as exc:
            return f"train.py saved no config.json in REASEARCH_OUT_DIR that can be read ({exc})"
        try:
            cfg = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            return f"config.json is not valid JSON: {exc}"
        if not isinstance(cfg, dict):
            return "config.json must hold a JSON object"
        block = cfg.get("block_size")
        if not isinstance(block, int) or isinstance(block, bool) or not 1 <= block <= _MAX_BLOCK:
            return f"config.json needs an int block_size in [1, {_MAX_BLOCK}], not {block!r}"
        return cfg

    def windows(self, val: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
        """The held-out inputs [N, T] and targets [N, T]: evenly spaced windows covering eval_tokens targets."""
        n = math.ceil(int(self.params.eval_tokens) / block)
        last = len(val) - block - 1
        if last < 0 or n > last + 1:
            raise ValueError(f"the validation split ({len(val)} bytes) is too small for {n} windows of {block}")
        starts = np.linspace(0, last, n).astype(np.int64)
        idx = starts[:, None] + np.arange(block)[None, :]
        return val[idx], val[idx + 1]

    @staticmethod
    def causality_probe(inputs: np.ndarray, cuts: np.ndarray, donors: np.ndarray) -> np.ndarray:
        """A copy of ``inputs`` whose window i differs from position ``cuts[i]`` on (and never before it).

        The tail comes from window ``donors[i]``; where that tail happens to be identical, every byte of it
        is shifted by one (mod 256, computed wide so a uint8 255 wraps to 0 instead of overflowing).
        """
        n, block = inputs.shape
        probe = inputs.copy()
        for i in range(n):
            c = int(cuts[i])
            j = int(donors[i]) if int(donors[i]) != i else (i + 1) % n
            probe[i, c:] = inputs[j, c:]
            if block > 1 and np.array_equal(probe[i], inputs[i]):
                probe[i, c:] = ((inputs[i, c:].astype(np.int64) + 1) % 256).astype(inputs.dtype)
        return probe

    def score_solution(self, data: Any, *, seed: int | None = None) -> EvalResult:
        """Scores raw logits of the held-out windows: ``{"logits": [N, T, 256] array, "block_size": T}``."""
        if not isinstance(data, dict) or "logits" not in data or not isinstance(data.get("block_size"), int):
            return self.invalid("expected {'logits': array [N, T, 256], 'block_size': T}")
        try:
            logits = np.asarray(data["logits"], dtype=np.float32)
        except (TypeError, ValueError):
            return self.invalid("logits are not a numeric array")
        block = data["block_size"]
        try:
            _, targets = self.windows(self._corpus().val(), block)
        except ValueError as exc:
            return self.invalid(str(exc))
        if logits.shape != (*targets.shape, 256):
            return self.invalid(f"logits have shape {logits.shape}, expected {(*targets.shape, 256)}")
        if not np.isfinite(logits).all():
            return self.invalid("the model produced non-finite logits (NaN or inf)")
        k = int(self.params.eval_tokens)
        bpb = bits_per_byte(logits.reshape(-1, 256)[:k], targets.reshape(-1)[:k])
        corpus = self._corpus()
        feedback = f"val_bpb {bpb:.4f} over {k} held-out bytes (context {block})"
        if not corpus.sealed:
            feedback += (
                f"\nNOT SEALED: corpus {corpus.name!r}: {corpus.seal_note}; this score may be memorized, not learned"
            )
        return self.result(bpb, metrics={"val_bpb": bpb, "eval_tokens": k, "block_size": block,
                                         "data_sha256": corpus.sha256, "corpus": corpus.name,
                                         "heldout_public": corpus.heldout_public, "sealed": corpus.sealed},
                           feedback=feedback)

    def provenance(self, candidate_source: str, *, seed: int | None, sandbox_mode: str) -> Provenance:
        """The base provenance, plus which corpus scored it and whether a jail could read that corpus."""
        import dataclasses

        prov = super().provenance(candidate_source, seed=seed, sandbox_mode=sandbox_mode)
        try:
            corpus = self._corpus()
        except (ConfigError, OSError, ValueError):  # a corpus that cannot load has no hash to record
            return prov
        return dataclasses.replace(prov, versions={**prov.versions, "corpus": corpus.name,
                                                   "corpus_sha256": corpus.sha256,
                                                   "corpus_sealed": str(corpus.sealed).lower(),
                                                   "corpus_heldout_public": str(corpus.heldout_public).lower()})

    def heldout_public(self) -> bool:
        """True for the named public corpora (``shakespeare``, ``stdlib``); the generated default and a user's
        file are not public. Every result, failed ones included, says so."""
        return corpus_is_public(str(self.params.corpus))

    def heldout_fingerprint(self) -> HeldoutFingerprint | None:
        """The held-out split's shingles, less those of the training split (a repository must not carry it)."""
        return _fingerprint(self._corpus())

    def trusted_evaluation(self, *, exp_dir: Path, repo_dir: Path, ckpt_dir: Path, lease: SlotLease) -> EvalResult:
        cfg = self._read_config(ckpt_dir)
        if isinstance(cfg, str):
            return self.invalid(cfg)
        weights = [
            p for p in (ckpt_dir / "model.pt", ckpt_dir / "model.safetensors") if p.is_file() and not p.is_symlink()
        ]
        if not weights:
            return self.invalid("train.py saved no model.pt (a state_dict) or model.safetensors in REASEARCH_OUT_DIR")
        block = int(cfg["block_size"])
        val = self._corpus().val()
        try:
            inputs, targets = self.windows(val, block)
        except ValueError as exc:
            return self.invalid(str(exc))
        rng = np.random.default_rng(secrets.randbits(64))
        n = len(inputs)
        cuts = rng.integers(1, block, size=n) if block > 1 else np.zeros(n, dtype=np.int64)
        donors = rng.permutation(n) if n > 1 else np.zeros(1, dtype=np.int64)
        probe = self.causality_probe(inputs, cuts, donors)
        runs = {"score": inputs, "probe": probe}
        order = ["score", "probe"] if rng.random() < 0.5 else ["probe", "score"]
        logits: dict[str, np.ndarray] = {}
        jail = ""
        infer = str(Path(__file__).with_name("_infer.py"))
        logs = exp_dir / "scoring"  # the jails' logs: kept on the host for a person, never shown to the agent
        logs.mkdir(mode=0o700, exist_ok=True)
        for i, name in enumerate(order):
            out = self._infer(exp_dir / f"eval{i}", runs[name], infer, repo_dir, ckpt_dir, lease,
                              logs / f"infer-{i}.log")
            if isinstance(out, EvalResult):
                return out
            logits[name], jail = out
        scored = self.score_solution({"logits": logits["score"], "block_size": block})
        if not scored.ok:
            return scored
        worst = 0.0
        for i in range(n):
            c = int(cuts[i])
            diff = causality_gap(logits["score"][i, :c], logits["probe"][i, :c])
            worst = max(worst, diff)
            if not np.isfinite(diff) or diff > CAUSALITY_TOL:
                return self.invalid(
                    "causality check failed: changing later bytes of a held-out window changed the model's "
                    f"predictions at earlier positions (log-probabilities moved by more than {CAUSALITY_TOL:g} nats); "
                    "the model looks at future bytes (check attention masks, and that nothing mixes positions or "
                    "batch rows)")
        return scored.with_(metrics={**dict(scored.metrics), "causality_max_diff": round(worst, 6),
                                     "scoring_jail": jail})

    def _infer(self, folder: Path, inputs: np.ndarray, infer: str, repo_dir: Path, ckpt_dir: Path,
               lease: SlotLease, log_path: Path) -> tuple[np.ndarray, str] | EvalResult:
        folder.mkdir(mode=0o755)
        np.save(folder / "inputs.npy", inputs.astype(np.uint8))
        per = max(1, _BATCH_TOKENS // inputs.shape[1])
        batches = [[a, min(a + per, len(inputs))] for a in range(0, len(inputs), per)]
        req = {"repo": str(repo_dir), "ckpt": str(ckpt_dir), "inputs": str(folder / "inputs.npy"),
               "out": str(folder / "logits.npy"), "report": str(folder / REPORT_NAME), "batches": batches}
        (folder / "request.json").write_text(json.dumps(req))
        script = folder / "_infer.py"
        script.write_text(Path(infer).read_text())
        os.chmod(script, 0o444)
        job = run_job(["python3", str(script), str(folder / "request.json")], cwd=folder, lease=lease,
                      time_budget_s=float(self.params.eval_time_limit_s), grace_s=0.0, log_path=log_path,
                      binds_ro=[repo_dir, ckpt_dir], binds_rw=[folder],
                      memory_mb=None if lease.gpu else int(self.params.memory_mb), mode=self.params.sandbox_mode,
                      packages=self.scoring_packages, noexec=True)
        # Nothing of the job's output (its log tail, exit code or messages) goes into the feedback: candidate
        # code ran on held-out windows and could have put them there.
        if job.status in (Status.TIMEOUT, Status.OOM):
            words = {Status.TIMEOUT: f"ran past its {float(self.params.eval_time_limit_s):g} s limit",
                     Status.OOM: "ran out of memory"}[job.status]
            return EvalResult.failure(job.status, f"the scoring run of the checkpoint {words}. {WITHHELD}")
        if not job.ok:
            step, text = describe_failure(folder, repo_dir, _INFER_STEPS, "the scoring run of the checkpoint")
            return EvalResult.failure(Status.INVALID if step == "output" else Status.CRASH, text)
        try:  # a trusted read of a file candidate code could write: no symlink, a regular file, dtype/shape/size
            out = read_npy(folder, "logits.npy", dtype="<f4", shape=(*inputs.shape, 256))
        except UntrustedFileError:
            return self.invalid("the scoring run left no readable logits.npy (candidate code can write there: "
                                "do not touch it)")
        for name in ("logits.npy", "inputs.npy"):  # tens of MB per run at real eval_tokens; the log stays
            (folder / name).unlink(missing_ok=True)
        return out, scoring_jail_note(job.sandbox_mode, self.scoring_packages)
