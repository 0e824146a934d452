"""``img/folder-v2``: train an image classifier within a time budget; scored by held-out accuracy.

The candidate is a repository (``train.py``, ``model.py``, ...). Training runs in a jail that reads the
public folder (``train.npz``, ``val.npz``, ``classes.json``) and writes ``config.json`` and
``weights.npz`` (or ``model.pt``) to ``REASEARCH_OUT_DIR``. Scoring: the trusted side writes the held-out
test images (never their labels) to a fresh folder and runs the fixed ``_infer.py`` in a scoring jail,
which imports ``model.py`` and saves a predicted class per image; the trusted side reads that file
through the guarded reader and computes accuracy itself. What candidate code prints in the scoring jail
never reaches the agent: a failure is reported as the exception type and the candidate's file:line,
both checked against the repository (the full log stays on disk for a person).

Held-out data. The default (``data=glyphs``) draws digit glyphs with a public generator: the training pool
from a public seed, the held-out images from a seed derived from the evaluator secret, so they exist nowhere
else and a repository or a model cannot carry them; the expected score is the same on every machine.
``data=digits`` (scikit-learn's digits) is public: its results say ``heldout_public: true`` and never
``sealed``. Before training, a repository is searched for the held-out images (raw, as numbers, encoded
or compressed: :mod:`._carried`); one that carries them is ``INVALID`` with the reason. ``-v2``: ``-v1``
defaulted to scikit-learn's digits, which a repository could carry (accuracy 1.0 without training).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from reasearch.engine.gpu import SlotLease
from reasearch.engine.training import run_job
from reasearch.evaluators._scoring_report import REPORT_NAME, WITHHELD, describe_failure
from reasearch.evaluators._secret import fingerprint
from reasearch.evaluators.img._carried import find_carried_images
from reasearch.evaluators.img._data import PUBLIC_DATA, ImageSplit, load_image_split
from reasearch.evaluators.outputs import OutputError, read_output, read_output_npy
from reasearch.evaluators.params import Range, meta
from reasearch.evaluators.repo import RepoCandidate
from reasearch.evaluators.result import EvalResult, Provenance, Status
from reasearch.evaluators.spec import TaskSpec
from reasearch.evaluators.training import (
    TORCH_SCORING_PACKAGES,
    TrainingParams,
    TrainingTask,
    heldout_flags,
    scoring_jail_note,
)

__all__ = ["ImageFolderParams", "ImageFolderTask"]

_MAX_CONFIG_BYTES = 64 * 1024
_BATCH = 256
_INFER_STEPS = {
    "weights": "while loading the checkpoint (config.json a JSON object; weights.npz arrays without pickled "
               "objects, or model.pt a state_dict of plain tensors)",
    "import": "while importing model.py", "build": "in build_model(config, weights)",
    "predict": "during model.predict(images) on held-out images",
    "output": "checking the output: predict must return scores [B, classes] or integer classes [B]",
}


@dataclass(frozen=True, slots=True)
class ImageFolderParams(TrainingParams):
    """The parameters of ``img/folder-v2`` (constructor, ``--params`` and ``spec.params`` come from here)."""

    family: ClassVar[str] = "img/folder-v2"

    data: str = field(default='glyphs', metadata=meta(
        "glyphs (default: 5,000 16x16 digit glyphs of a public generator; the held-out ones drawn from the evaluator "
        "secret), digits (bundled: scikit-learn's 8x8 digits, 1,797 images, 10 classes; public, so never sealed), a "
        "folder with one subfolder of images per class, or an .npz with images and labels."))
    image_size: int = field(default=0, kw_only=True, metadata=meta(
        'resize folder images to this square size (0: keep; they must all be one size).', Range(ge=0, le=512)))
    test_frac: float = field(default=0.2, kw_only=True, metadata=meta(
        'held-out share of each class (scored; never in a training jail); of the glyphs, the share drawn from the '
        'secret.', Range(ge=0.01, le=0.5)))
    val_frac: float = field(default=0.1, kw_only=True, metadata=meta(
        'share of the rest given to training as a labelled validation set.', Range(ge=0.01, le=0.5)))
    split_seed: int = field(default=0, kw_only=True, metadata=meta(
        "the split's seed."))
    time_budget_s: float = field(default=60.0, kw_only=True, metadata=meta(
        'training seconds of one experiment unless it asks for another budget.'))
    grace_s: float = field(default=10.0, kw_only=True, metadata=meta(
        "at most this long to save after the budget's SIGTERM (save_grace_s: min(grace_s, max(10 s, 5% of the "
        "budget))); then the run is killed and scored TIMEOUT.", Range(ge=0)))
    eval_time_limit_s: float = field(default=120.0, kw_only=True, metadata=meta(
        'wall limit of the scoring jail.'))


class ImageFolderTask(TrainingTask[ImageFolderParams]):
    """Image classification under a training time budget: maximize accuracy on a held-out split.

    Parameters: :class:`ImageFolderParams`.
    """

    # The scoring jail's runtime (``_infer.py`` and the candidate's model.py): NumPy, torch, safetensors.
    scoring_packages = TORCH_SCORING_PACKAGES

    def _make_spec(self) -> TaskSpec:
        p = self.params
        return TaskSpec(
            id="img/folder-v2", version=2, direction="maximize",
            time_limit_s=float(p.max_time_budget_s) + float(p.grace_s) + float(p.eval_time_limit_s),
            memory_mb=int(p.memory_mb), entry_point="train.py", deterministic=False, params=self.get_params(),
            best_known_source="paper (IMG-100, CIFAR-100-like, 30 min on a GPU): 82.38% -> 84.03% by the agent")

    def split(self) -> ImageSplit:
        p = self.params
        return load_image_split(str(p.data), int(p.image_size), float(p.test_frac), float(p.val_frac),
                                int(p.split_seed))

    def train_data_dir(self) -> Path:
        return self.split().public_dir

    def heldout_public(self) -> bool:
        """True for ``digits`` (public: a repository can carry it); the glyphs and a user's data are not."""
        return str(self.params.data) in PUBLIC_DATA

    def provenance(self, candidate_source: str, *, seed: int | None, sandbox_mode: str) -> Provenance:
        """The base provenance, plus the fingerprint of the secret the glyphs' held-out images came from."""
        prov = super().provenance(candidate_source, seed=seed, sandbox_mode=sandbox_mode)
        if self.params.data != "glyphs":
            return prov
        return dataclasses.replace(prov, versions={**prov.versions, "scoring_secret": fingerprint()})

    def carried_heldout(self, candidate: RepoCandidate, repo_dir: Path) -> tuple[str, str | None] | None:
        """The held-out images in any form a repository can carry them (pixels or counts, as bytes, numbers or
        encoded text, raw or compressed: :mod:`._carried`), instead of the base class's byte pieces."""
        why = find_carried_images(candidate.files, self.split().test_images)
        return None if why is None else (why, None)

    def seed_files(self) -> dict[str, str]:
        seed = resources.files("reasearch.evaluators.img") / "seed"
        return {name: (seed / f"{name}.txt").read_text(encoding="utf-8") for name in ("model.py", "train.py")}

    def describe(self) -> str:
        s = self.split()
        what = {"glyphs": "handwritten-style digit glyphs (16x16 grey images, 10 classes) drawn by a generator; the "
                           "held-out images are drawn from a secret seed and exist nowhere else",
                "digits": "scikit-learn's handwritten digits (8x8 grey images, 10 classes). This data set is PUBLIC: "
                          "its held-out split is not sealed (a repository that carries it is refused)"}.get(
            str(self.params.data), f"{self.params.data} ({len(s.classes)} classes)")
        return f"""# img/folder-v2: train an image classifier within a time budget (maximize held-out accuracy)

Data: {what}; images are uint8 arrays of shape {list(s.shape)} (H, W, C). Training sees {s.n_train} labelled
images and {s.n_val} labelled validation images; {len(s.test_labels)} held-out images are scored and never
available to training.

The candidate is the repository in your workspace (train.py, model.py, any files you add), under git. An
experiment (`run_experiment`) runs `python3 train.py` in a fresh sandbox (no network; NumPy and torch
importable) with these environment variables:

- REASEARCH_DATA_DIR: train.npz and val.npz (arrays `images` [N, H, W, C] uint8 and `labels` int64) and
  classes.json (class names and the image shape).
- REASEARCH_OUT_DIR: the only writable folder. train.py must save there config.json (a JSON object) and
  weights.npz (NumPy arrays, loaded with allow_pickle=False) or model.pt (a state_dict, loaded with
  torch.load(weights_only=True)).
- REASEARCH_TIME_BUDGET_S: training seconds. {self.describe_budget()}
- CUDA_VISIBLE_DEVICES: the leased GPU (empty on a CPU slot).

Metric (trusted, fixed): in a separate sandbox the evaluator imports model.py, calls
`build_model(config, weights)` (weights: the dict of arrays, or the state_dict) and then `model.predict(images)`
on batches of at most {_BATCH} held-out images (uint8 [B, H, W, C]); predict returns class scores [B, classes]
(argmax is taken) or integer class ids [B]. Score = accuracy over the held-out images (higher is better).
A repository that carries held-out images (raw, as numbers, encoded or compressed) is INVALID.
If model.py fails there, you see only the exception type and its file:line. There model.py can import NumPy
and torch only, and no native code from the repository or the outputs loads. Print JSON lines such as
{{"step": 10, "loss": 0.4}} to show the training curve.
"""

    # ------------------------------------------------------------ trusted side
    def score_solution(self, data: Any, *, seed: int | None = None) -> EvalResult:
        """Scores predicted classes of the held-out images: ``{"predictions": [one class id per image]}``."""
        s = self.split()
        if not isinstance(data, dict) or not isinstance(data.get("predictions"), (list, np.ndarray)):
            return self.invalid("expected {'predictions': [one class id per held-out image]}")
        try:
            pred = np.asarray(data["predictions"])
        except (TypeError, ValueError):
            return self.invalid("predictions must be integers")
        if pred.shape != s.test_labels.shape or not np.issubdtype(pred.dtype, np.integer):
            return self.invalid(f"expected {len(s.test_labels)} integer predictions, got {pred.dtype} {pred.shape}")
        acc = float(np.mean(pred == s.test_labels))
        public = ("; the held-out data is PUBLIC (a repository can carry it): this score is not sealed"
                  if s.heldout_public else "")
        return self.result(acc, metrics={"test_accuracy": acc, "test_images": len(s.test_labels), "data": s.name,
                                         "split_key": s.key, "classes": len(s.classes),
                                         **heldout_flags(s.heldout_public, {})},
                           feedback=f"held-out accuracy {acc:.4f} over {len(s.test_labels)} images{public}")

    def trusted_evaluation(self, *, exp_dir: Path, repo_dir: Path, ckpt_dir: Path, lease: SlotLease) -> EvalResult:
        try:
            cfg = json.loads(read_output(ckpt_dir / "config.json", _MAX_CONFIG_BYTES))
        except OutputError as exc:
            return self.invalid(f"{exc}: train.py must save config.json (a JSON object) in REASEARCH_OUT_DIR")
        except (ValueError, UnicodeDecodeError) as exc:
            return self.invalid(f"config.json is not valid JSON: {exc}")
        if not isinstance(cfg, dict):
            return self.invalid("config.json must hold a JSON object")
        for name in ("weights.npz", "model.pt"):
            p = ckpt_dir / name
            if os.path.lexists(p) and (p.is_symlink() or not p.is_file()):
                return self.invalid(f"{name} must be a regular file")
        if not any((ckpt_dir / n).is_file() for n in ("weights.npz", "model.pt")):
            return self.invalid("train.py saved no weights.npz or model.pt in REASEARCH_OUT_DIR")
        s = self.split()
        folder = exp_dir / "eval"
        folder.mkdir(mode=0o755)
        logs = exp_dir / "scoring"  # the jail's log: kept on the host for a person, never shown to the agent
        logs.mkdir(mode=0o700, exist_ok=True)
        np.save(folder / "inputs.npy", s.test_images, allow_pickle=False)
        req = {"repo": str(repo_dir), "ckpt": str(ckpt_dir), "inputs": str(folder / "inputs.npy"),
               "out": str(folder / "predictions.npy"), "report": str(folder / REPORT_NAME), "batch": _BATCH}
        (folder / "request.json").write_text(json.dumps(req))
        script = folder / "_infer.py"
        script.write_text(Path(__file__).with_name("_infer.py").read_text())
        os.chmod(script, 0o444)
        job = run_job(["python3", str(script), str(folder / "request.json")], cwd=folder, lease=lease,
                      time_budget_s=float(self.params.eval_time_limit_s), grace_s=0.0, log_path=logs / "infer.log",
                      binds_ro=[repo_dir, ckpt_dir], binds_rw=[folder],
                      memory_mb=None if lease.gpu else int(self.params.memory_mb), mode=self.params.sandbox_mode,
                      packages=self.scoring_packages, noexec=True)
        (folder / "inputs.npy").unlink(missing_ok=True)
        # Nothing of the job's output (log tail, exit code, messages) goes into the feedback: candidate code
        # ran on the held-out images and could have put them there.
        if job.status in (Status.TIMEOUT, Status.OOM):
            words = {Status.TIMEOUT: f"ran past its {float(self.params.eval_time_limit_s):g} s limit",
                     Status.OOM: "ran out of memory"}[job.status]
            return EvalResult.failure(job.status, f"the scoring run of model.py {words}. {WITHHELD}")
        if not job.ok:
            step, text = describe_failure(folder, repo_dir, _INFER_STEPS, "the scoring run of model.py")
            return EvalResult.failure(Status.INVALID if step == "output" else Status.CRASH, text)
        try:
            pred = read_output_npy(folder / "predictions.npy", 64 + 16 * len(s.test_labels) + 4096)
        except OutputError as exc:
            return self.invalid(f"the scoring run left no predictions ({exc})")
        res = self.score_solution({"predictions": pred})
        return res.with_(metrics={**dict(res.metrics),
                                  "scoring_jail": scoring_jail_note(job.sandbox_mode, self.scoring_packages)})
