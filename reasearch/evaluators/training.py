"""``TrainingTask``: tasks whose candidate is a repository that trains a model within a time budget.

One evaluation is one *experiment*: the repository (see :mod:`reasearch.evaluators.repo`) is written
to a fresh experiment folder, its ``train.py`` runs in a new jail on a leased slot (a GPU, or pinned
CPU cores) with the training data read-only, a writable checkpoint folder and the time budget in its
environment (:func:`reasearch.engine.training.run_job`), and then the subclass's trusted evaluation
scores the checkpoint in a jail of its own. The log of the training run is kept on the host
(``metrics["log_path"]``); its JSON lines are the training curve (informational only).

Each evaluation costs one ``experiments`` unit and the GPU-seconds the trusted side measured, debited
with the result (``budget_estimate`` / ``evaluation_costs``).

Budget. At its budget ``train.py`` gets ``SIGTERM`` and has a short *save grace* to save and exit:
``min(grace_s, max(10 s, 5% of the budget))`` (:func:`save_grace_s`); a run still going then is killed,
and a run that died of that signal or was killed is ``TIMEOUT`` (no score). So ``grace_s`` can never
buy training time: a 5 s budget with ``grace_s=30`` ends at 15 s at the latest (not 35 s).

Disk. Each experiment folder is its own size-capped tmpfs mount where the driver is root
(``REASEARCH_EXPERIMENT_MAX_MB``, default 4096, and 200,000 inodes): a job's writes there, ``fallocate``
included, fail with ``ENOSPC`` at the cap and never touch the host's disk; a mount, because a hard cap
is the only kind a single ``fallocate`` cannot outrun (a polled quota sees 11 GB after they are taken).
Without root (nsjail as an ordinary user), and for folders kept with ``REASEARCH_KEEP_CHECKPOINTS=1``
(a mount would hold their memory until removed), the folder stays on disk and the job is bounded by
``RLIMIT_FSIZE`` (the cap), the same cap checked every 2 s on its writable folders, and a free-space
floor (``REASEARCH_MIN_FREE_MB``, default 1024): over either, it is killed (``CRASH``).

Where. ``experiments_root()`` is ``experiments`` in this user's private folder
(``/var/tmp/reasearch.u<euid>/``, :func:`reasearch.engine.files.private_folder`), or
``REASEARCH_EXPERIMENTS_DIR``, checked the same way: a symlink or another user's folder at that name
is refused, never followed or chmod'ed.

Experiment folders (``experiments_root()/exp-*``: the repository copy, the checkpoint folder, the
trusted evaluation's files) are scratch: each is removed as soon as its experiment is scored, unless
``REASEARCH_KEEP_CHECKPOINTS=1`` (then it is marked ``KEEP`` and left alone). What outlives it is the
result (metrics, log tail) and, when the caller passes ``ExperimentOptions(experiment_dir=...)`` (the agent
does: a folder of its run directory), the whole training log and a small ``status.json`` there. Each folder holds a
flock'ed ``.lock`` for as long as its experiment runs; the first experiment of a process prunes the
folders whose lock nobody holds (their driver died). Removal never follows a symlink (what the
candidate wrote is hostile).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import shutil
import signal
import threading
import time
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from reasearch.engine import remove_tree
from reasearch.engine.files import mount_bounded, private_folder, unmount
from reasearch.engine.gpu import SlotLease, lease_slot
from reasearch.engine.protocol import SandboxRunner
from reasearch.engine.training import (
    KILLED_UNASKED,
    OOM_KILLED,
    PROCESS_SCORING_GAPS,
    JobOutcome,
    end_orphaned_job,
    run_job,
)
from reasearch.errors import ConfigError
from reasearch.evaluators.base import CandidateKind, Task
from reasearch.evaluators.heldout_content import HeldoutFingerprint, find_heldout_content
from reasearch.evaluators.kind_options import ExperimentOptions
from reasearch.evaluators.params import Parametrized, Range, TaskParams, meta
from reasearch.evaluators.repo import RepoCandidate, decode_repo, encode_repo, write_repo
from reasearch.evaluators.result import EvalResult, Status

__all__ = ["TORCH_SCORING_PACKAGES", "TrainingTask", "experiment_cap_mb", "experiments_root", "heldout_flags",
           "heldout_public_of", "keep_checkpoints", "prune_experiments", "save_grace_s", "scoring_jail_note"]

# What a scoring jail holds for a policy or model written with NumPy or torch: torch and what its import needs
# (the CUDA builds' nvidia and triton), safetensors for checkpoints. No emulator, no simulator, no SciPy.
TORCH_SCORING_PACKAGES: tuple[str, ...] = (
    "numpy", "torch", "torchgen", "typing_extensions", "sympy", "mpmath", "networkx", "filelock", "fsspec",
    "jinja2", "markupsafe", "nvidia", "triton", "safetensors")


def scoring_jail_note(mode: str, packages: tuple[str, ...]) -> str:
    """What held in a scoring jail, for a result's metrics (``scoring_jail``)."""
    if mode == "nsjail":
        return (f"sandbox=nsjail: packages {', '.join(packages)} only; repository, checkpoint, /tmp and /dev/shm "
                "noexec; memfd_create denied")
    return PROCESS_SCORING_GAPS

_LOG_TAIL = 3000
_LOCK = ".lock"
_KEEP = "KEEP"
_LEGACY_AGE_S = 86400.0  # an exp-* folder without a lock (an older version wrote it) is pruned after a day
_NEW_AGE_S = 3600.0  # a folder being set up (".new-*") whose creator died
_SAVE_GRACE_MIN_S = 10.0  # saving, and a slow exit (torch, a CUDA context), on a busy machine
_SAVE_GRACE_FRACTION = 0.05
_MAX_INODES = 200_000
_pruned: set[str] = set()
_prune_lock = threading.Lock()


def save_grace_s(budget_s: float, grace_s: float) -> float:
    """Seconds a run has after its budget's SIGTERM to save and exit: ``min(grace_s, max(10, 5% of budget))``."""
    return min(float(grace_s), max(_SAVE_GRACE_MIN_S, _SAVE_GRACE_FRACTION * float(budget_s)))


def _env_mb(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    try:
        value = int(raw) if raw else default
    except ValueError:
        raise ConfigError(f"{name} must be a whole number of megabytes, not {raw!r}") from None
    if value < 1:
        raise ConfigError(f"{name} must be at least 1 (MB), not {value}")
    return value


def experiment_cap_mb() -> int:
    """The most one experiment folder may hold (``REASEARCH_EXPERIMENT_MAX_MB``, default 4096)."""
    return _env_mb("REASEARCH_EXPERIMENT_MAX_MB", 4096)


def experiments_root() -> Path:
    """Where experiment folders go: ``experiments`` in this user's private folder
    (``/var/tmp/reasearch.u<euid>/experiments``), or ``REASEARCH_EXPERIMENTS_DIR``; either is refused
    when it is a symlink or another user's folder (:func:`reasearch.engine.files.private_folder`).

    The first call of a process for a folder prunes it (:func:`prune_experiments`).
    """
    root = private_folder("experiments", override=os.environ.get("REASEARCH_EXPERIMENTS_DIR") or None)
    with _prune_lock:
        if str(root) not in _pruned:
            _pruned.add(str(root))
            prune_experiments(root)
    return root


def keep_checkpoints() -> bool:
    """``REASEARCH_KEEP_CHECKPOINTS=1``: experiment folders (checkpoints included) are kept after scoring."""
    return os.environ.get("REASEARCH_KEEP_CHECKPOINTS", "").strip().lower() in ("1", "true", "yes")


def prune_experiments(root: Path) -> list[str]:
    """Removes the experiment folders of dead drivers under ``root``; returns the names removed.

    An ``exp-*`` folder is removed when nobody holds its ``.lock`` (its experiment's process is gone), a
    folder without a lock when it is a day old, a half-made ``.new-*`` one after an hour; ``KEEP``-marked
    folders and every other name (data folders) stay. A symlink in their place is unlinked, never followed,
    and removal inside never follows one either.
    """
    removed: list[str] = []
    try:
        names = os.listdir(root)
    except OSError:
        return removed
    now = time.time()
    for name in names:
        if not name.startswith(("exp-", ".new-")):
            continue
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not os.path.isdir(path) or os.path.islink(path):
            if os.path.islink(path):
                os.unlink(path)
                removed.append(name)
            continue
        if os.path.lexists(os.path.join(path, _KEEP)):
            continue
        if name.startswith(".new-"):
            if now - st.st_mtime > _NEW_AGE_S and remove_tree(path):
                removed.append(name)
            continue
        try:
            fd = os.open(os.path.join(path, _LOCK), os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            if now - st.st_mtime > _LEGACY_AGE_S and remove_tree(path):
                removed.append(name)
            continue
        except OSError:
            continue  # a lock that is a symlink or unreadable: not ours to judge
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    continue  # a live experiment
                raise
            _end_leftover_job(path)
            unmount(path)  # its tmpfs (a dead driver left it mounted); the folder beneath goes next
            if remove_tree(path):
                removed.append(name)
        finally:
            os.close(fd)
    return removed


def _end_leftover_job(path: str) -> None:
    """Kills what a dead driver's process-mode job left running (daemons of its own uid, holding the slot lease
    they inherited): the uid is the owner of the folder's checkpoint folder, which only the driver could give."""
    try:
        uid = os.lstat(os.path.join(path, "out")).st_uid
    except OSError:
        return
    end_orphaned_job(uid)


def _new_experiment_folder() -> tuple[Path, int]:
    """A fresh ``exp-*`` folder with its lock held (made under a temporary name, so a pruner never sees
    it unlocked), a size-capped tmpfs mount where this process may mount one (``os.path.ismount`` says);
    returns it and the lock's descriptor (close it to release)."""
    root = experiments_root()
    tmp = root / f".new-{secrets.token_hex(8)}"
    tmp.mkdir(mode=0o711)
    fd = os.open(tmp / _LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    final = root / f"exp-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"
    os.rename(tmp, final)
    if not keep_checkpoints() and mount_bounded(final, max_bytes=experiment_cap_mb() << 20, max_inodes=_MAX_INODES):
        # The lock beneath is hidden now: the pruner opens the one on the mount (until it exists, it finds
        # none and judges the folder by its fresh mtime: kept).
        try:
            on_mount = os.open(final / _LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            fcntl.flock(on_mount, fcntl.LOCK_EX)
        except OSError:
            unmount(final)
            os.close(fd)
            raise
        os.close(fd)
        fd = on_mount
    return final, fd


def heldout_flags(public: bool | None, metrics: Mapping[str, Any]) -> dict[str, bool]:
    """``heldout_public`` and ``sealed`` of a result whose held-out data is public (or not; None: the task has
    no held-out data set and states nothing). A public held-out split is never ``sealed``, whatever else says
    so: a repository can carry it and a model can recite it, so no jail keeps it from the optimizer."""
    if public is None:
        return {}
    return {"heldout_public": bool(public), "sealed": not public and metrics.get("sealed", True) is not False}


def heldout_public_of(task: object) -> bool | None:
    """Whether ``task`` (a training task) scores public held-out data; None for a task that states nothing."""
    return task.heldout_public() if isinstance(task, TrainingTask) else None


def _write_status(folder: Path | None, **fields: Any) -> None:
    """``status.json`` of the caller's experiment folder (written whole, then renamed into place)."""
    if folder is None:
        return
    tmp = folder / f".status-{os.getpid()}-{threading.get_ident()}"
    tmp.write_text(json.dumps({**fields, "ts": time.time()}))
    os.replace(tmp, folder / "status.json")


@dataclass(frozen=True, slots=True)
class TrainingParams(TaskParams):
    """What every training task takes (each family's declaration adds its own and may change a default)."""

    keep_given_numbers: ClassVar[bool] = True  # spec.params has always recorded numbers as given (an int stays one)

    time_budget_s: float = field(default=300.0, kw_only=True, metadata=meta(
        "training seconds of one experiment unless it asks for another budget."))
    max_time_budget_s: float = field(default=1800.0, kw_only=True, metadata=meta(
        "the most one experiment may ask for."))
    grace_s: float = field(default=30.0, kw_only=True, metadata=meta(
        "at most this long to save after the budget's SIGTERM (save_grace_s: min(grace_s, max(10 s, 5% of the "
        "budget))); then the run is killed and scored TIMEOUT.", Range(ge=0)))
    slot: str = field(default="auto", kw_only=True, metadata=meta(
        "auto (a GPU when there is one), gpu or cpu.", Range(choices=("auto", "gpu", "cpu"))))
    memory_mb: int = field(default=8192, kw_only=True, metadata=meta(
        "address-space limit of CPU jobs (GPU jobs get none: CUDA maps far more than it uses)."))
    sandbox_mode: str = field(default="auto", kw_only=True, metadata=meta(
        "auto, nsjail or process.", Range(choices=("auto", "nsjail", "process"))))

    def __post_init__(self) -> None:
        TaskParams.__post_init__(self)  # zero-argument super() does not work in a slots dataclass (Python < 3.14)
        if not float(self.time_budget_s) <= float(self.max_time_budget_s):
            raise ConfigError(f"parameter time_budget_s of {self.family} is {self.time_budget_s!r}, above "
                              f"max_time_budget_s {self.max_time_budget_s!r}; raise max_time_budget_s or lower it")


TP = TypeVar("TP", bound=TrainingParams)


class TrainingTask(Parametrized[TP], Task):
    """Base of training tasks (``nanogpt/v2``): repository candidates, experiments, trusted metrics.

    Subclasses implement :meth:`seed_files`, :meth:`train_data_dir` (a folder holding only what
    training may read) and :meth:`trusted_evaluation`, and name their :class:`TrainingParams` declaration as
    the type argument.
    """

    candidate_kind: ClassVar[CandidateKind] = "repository"
    entry_file: ClassVar[str] = "train.py"
    # The only packages the scoring jail's runtime holds (the training jail's are not: no emulator or simulator
    # a policy could plan on); () where no candidate code runs at scoring (tabular).
    scoring_packages: ClassVar[tuple[str, ...]] = ()

    # ------------------------------------------------------------ what subclasses provide
    @abstractmethod
    def seed_files(self) -> dict[str, str]:
        """The seed repository's files (path -> text)."""

    @abstractmethod
    def train_data_dir(self) -> Path:
        """A host folder with the training data only (bound read-only as ``REASEARCH_DATA_DIR``)."""

    @abstractmethod
    def trusted_evaluation(self, *, exp_dir: Path, repo_dir: Path, ckpt_dir: Path, lease: SlotLease) -> EvalResult:
        """Scores the checkpoint the training run left in ``ckpt_dir`` (failures are statuses)."""

    def heldout_public(self) -> bool | None:
        """Whether the held-out data this task scores on is public (a repository can carry it, a model can
        recite it); every result then says ``heldout_public: true`` and never ``sealed: true``. None (this
        default): the task states nothing about held-out data."""
        return None

    def heldout_fingerprint(self) -> HeldoutFingerprint | None:
        """The held-out data a repository must not carry (None: no check); a carrier is ``INVALID`` untrained."""
        return None

    def carried_heldout(self, candidate: RepoCandidate, repo_dir: Path) -> tuple[str, str | None] | None:
        """``(feedback, file)`` when the repository carries held-out data (the result is ``INVALID``, untrained),
        else None. Default: :meth:`heldout_fingerprint`'s pieces searched in ``repo_dir``, raw and inside
        compressed or encoded layers; a task whose held-out data takes other forms overrides it."""
        fingerprint = self.heldout_fingerprint()
        carried = None if fingerprint is None else find_heldout_content(repo_dir, fingerprint)
        if carried is None:
            return None
        return (f"the repository carries held-out data: {carried.reason}. Train on REASEARCH_DATA_DIR; held-out "
                "data brought along earns nothing", carried.path)

    def job_env(self) -> dict[str, str]:
        """Extra environment of the training job (e.g. which environment an RL task trains on)."""
        return {}

    # ------------------------------------------------------------ candidates
    def seed_program(self) -> str:
        return encode_repo(self.seed_files())

    def experiment_budget(self, candidate: RepoCandidate) -> float:
        """The budget one experiment runs under: what it asked for, capped at ``max_time_budget_s``."""
        asked = candidate.time_budget_s if candidate.time_budget_s is not None else float(self.params.time_budget_s)
        return min(asked, float(self.params.max_time_budget_s))

    def budget_estimate(self) -> dict[str, float]:
        """Checked against the caps before an experiment starts."""
        return {"experiments": 1.0, "gpu_seconds": 0.0}

    def evaluation_costs(self, result: EvalResult) -> dict[str, float]:
        """Debited with the result, in the same transaction: one experiment and its GPU-seconds."""
        gpu_s = result.metrics.get("gpu_s") if result.metrics else None
        return {"experiments": 1.0, "gpu_seconds": float(gpu_s) if isinstance(gpu_s, (int, float)) else 0.0}

    # ------------------------------------------------------------ one experiment
    def evaluate(self, candidate_source: str, *, seed: int | None = None, executor: SandboxRunner | None = None,
                 options: ExperimentOptions | None = None) -> EvalResult:
        """Runs one experiment (training in a jail, then the trusted evaluation) and scores it.

        Args:
            candidate_source: the repository candidate (:func:`reasearch.evaluators.repo.encode_repo`).
            seed: recorded in provenance.
            executor: accepted for API symmetry; experiments run on a leased slot, not in the pool.
            options: ``experiment_dir``, a host folder of the caller's (created if missing) that receives the
                training log as it is written (``train.log``), ``status.json`` (waiting for a slot, training,
                evaluating, done), and where a file named ``STOP`` stops the experiment (recorded as
                ``CRASH``: stopped, no score). Without it the log goes with the scratch folder.
        """
        experiment_dir = options.experiment_dir if options is not None else None
        if not isinstance(candidate_source, str):
            raise TypeError(f"candidate_source must be str, not {type(candidate_source).__name__}")
        try:
            candidate = decode_repo(candidate_source, entry_file=self.entry_file)
        except ConfigError as exc:
            return self._stamp(EvalResult.failure(Status.INVALID, f"not a repository candidate: {exc}"),
                               candidate_source, seed, "not run")
        if self.entry_file not in candidate.files:
            return self._stamp(EvalResult.failure(Status.INVALID, f"the repository has no {self.entry_file}"),
                               candidate_source, seed, "not run")
        budget = self.experiment_budget(candidate)
        own = Path(experiment_dir) if experiment_dir else None
        if own is not None:
            own.mkdir(parents=True, exist_ok=True)
        exp_dir, lock_fd = _new_experiment_folder()
        try:
            return self._experiment(candidate, candidate_source, seed, budget, exp_dir, own, os.path.ismount(exp_dir))
        finally:
            if keep_checkpoints():  # a kept folder is never a mount (it would hold memory until removed)
                (exp_dir / _KEEP).write_text("kept: REASEARCH_KEEP_CHECKPOINTS=1\n")
            else:
                unmount(exp_dir)
                remove_tree(str(exp_dir))
            os.close(lock_fd)

    def _experiment(self, candidate: RepoCandidate, candidate_source: str, seed: int | None, budget: float,
                    exp_dir: Path, own: Path | None, mounted: bool = False) -> EvalResult:
        repo_dir = write_repo(candidate.files, exp_dir / "repo")
        carried = self.carried_heldout(candidate, repo_dir)
        if carried is not None:  # checked before any budget is spent: no training, no slot
            why, path = carried
            res = EvalResult.failure(Status.INVALID, why, metrics={"heldout_carried": path} if path else None)
            return self._stamp(res, candidate_source, seed, "not run")
        ckpt_dir = exp_dir / "out"
        ckpt_dir.mkdir()
        data_dir = self.train_data_dir()
        log_path = (own or exp_dir) / "train.log"
        _write_status(own, state="waiting for a slot")
        lease = lease_slot(self.params.slot)
        started_at = time.time()
        _write_status(own, state="training", slot=lease.describe(), started_at=started_at, time_budget_s=budget)
        grace = save_grace_s(budget, float(self.params.grace_s))
        try:
            job = run_job(["python3", self.entry_file], cwd=repo_dir, lease=lease, time_budget_s=budget,
                          grace_s=grace, log_path=log_path, disk_quota_mb=experiment_cap_mb(),
                          min_free_mb=0 if mounted else _env_mb("REASEARCH_MIN_FREE_MB", 1024),
                          binds_ro=[repo_dir, data_dir], binds_rw=[ckpt_dir],
                          env={"REASEARCH_DATA_DIR": str(data_dir), "REASEARCH_OUT_DIR": str(ckpt_dir),
                               **self.job_env()},
                          memory_mb=None if lease.gpu else int(self.params.memory_mb), mode=self.params.sandbox_mode,
                          stop_file=None if own is None else own / "STOP")
            train = _train_metrics(job, budget, exp_dir, lease, log_path if own is not None else None, started_at)
            if job.stopped:
                _write_status(
                    own, state="done", status=Status.CRASH.value, slot=lease.describe(), started_at=started_at
                )
                res = EvalResult.failure(Status.CRASH, f"stopped on request after {job.wall_s:.1f} s of training "
                                         f"(no score)\nlog tail:\n{job.log_tail[-_LOG_TAIL:]}",
                                         wall_s=job.wall_s, cpu_s=job.cpu_s, metrics={**train, "stopped": True})
                return self._stamp(res, candidate_source, seed, job.sandbox_mode)
            if not job.ok:
                how = (f"it died of the signal at {job.term_s or budget:g} s" if job.signal == signal.SIGTERM
                       else f"killed at {job.hard_limit_s:g} s")
                verdict = {Status.TIMEOUT: f"train.py did not end within its budget ({how}; SIGTERM at {budget:g} s, "
                                           f"then {grace:g} s to save and exit): it must stop within "
                                           "REASEARCH_TIME_BUDGET_S and save its checkpoint (no score)"}.get(
                    job.status, f"train.py ended {job.status.value} (exit code {job.exit_code}, signal {job.signal})"
                    + (f": {job.over_quota}" if job.over_quota else "")
                    + (f": {OOM_KILLED if job.status is Status.OOM else KILLED_UNASKED}"
                       if job.signal == signal.SIGKILL and not job.over_quota and not job.stopped else ""))
                res = EvalResult.failure(job.status, f"{verdict}\nlog tail:\n{job.log_tail[-_LOG_TAIL:]}",
                                         wall_s=job.wall_s, cpu_s=job.cpu_s, metrics=train)
                _write_status(own, state="done", status=job.status.value, slot=lease.describe(), started_at=started_at)
                return self._stamp(res, candidate_source, seed, job.sandbox_mode)
            _write_status(own, state="evaluating", slot=lease.describe(), started_at=started_at, time_budget_s=budget)
            t0 = time.monotonic()
            scored = self.trusted_evaluation(exp_dir=exp_dir, repo_dir=repo_dir, ckpt_dir=ckpt_dir, lease=lease)
            eval_s = time.monotonic() - t0
            scored = _keep_scoring_logs(scored, exp_dir, own)
        finally:
            lease.release()
        metrics = {**train, **dict(scored.metrics), "eval_s": round(eval_s, 3),
                   "gpu_s": train["gpu_s"] + (eval_s if lease.gpu else 0.0)}
        feedback = scored.feedback + f"\ntraining log tail:\n{job.log_tail[-1500:]}"
        res = scored.with_(metrics=metrics, feedback=feedback.strip(), wall_s=job.wall_s + eval_s, cpu_s=job.cpu_s)
        _write_status(own, state="done", status=res.status.value, slot=lease.describe(), started_at=started_at)
        return self._stamp(res, candidate_source, seed, job.sandbox_mode)

    def _stamp(self, result: EvalResult, source: str, seed: int | None, mode: str) -> EvalResult:
        flags = heldout_flags(self.heldout_public(), result.metrics or {})
        return result.with_(metrics={**dict(result.metrics or {}), **flags},
                            provenance=self.provenance(source, seed=seed, sandbox_mode=mode))

    def describe_budget(self) -> str:
        p = self.params
        grace = save_grace_s(float(p.time_budget_s), float(p.grace_s))
        return (f"Each experiment trains for time_budget_s seconds (default {float(p.time_budget_s):g}, at most "
                f"{float(p.max_time_budget_s):g}). At the budget train.py gets SIGTERM and has min(grace "
                f"{float(p.grace_s):g} s, max(10 s, 5% of the budget)) to save and exit ({grace:g} s at the "
                f"default budget); a run still going then is killed and scored TIMEOUT, as is one the signal "
                f"killed. Its writable folders hold at most {experiment_cap_mb()} MB.")


def _keep_scoring_logs(scored: EvalResult, exp_dir: Path, own: Path | None) -> EvalResult:
    """Moves the scoring jails' logs (``exp_dir/scoring``: candidate output on held-out data, never shown to
    the agent) into the caller's experiment folder, for a person; records where in ``scoring_log_dir``."""
    logs = exp_dir / "scoring"
    if not logs.is_dir() or logs.is_symlink():
        return scored
    where: Path | None = logs if keep_checkpoints() else None
    if own is not None:
        where = own / "scoring"
        remove_tree(str(where))
        shutil.move(str(logs), str(where))  # trusted files only: the jails never see this folder
    return scored.with_(metrics={**dict(scored.metrics), "scoring_log_dir": None if where is None else str(where)})


def _train_metrics(job: JobOutcome, budget: float, exp_dir: Path, lease: SlotLease, log_path: Path | None,
                   started_at: float) -> dict[str, Any]:
    """What the snapshot and ``get_experiments`` show about the training run (all informational)."""
    curve = [m for m in job.metrics if isinstance(m.get("loss"), (int, float))]
    last: Mapping[str, Any] = curve[-1] if curve else {}
    steps = [m.get("step") for m in curve if isinstance(m.get("step"), (int, float))]
    dts = [m["dt_ms"] for m in curve if isinstance(m.get("dt_ms"), (int, float))]
    return {
        "train_status": job.status.value, "train_s": round(job.wall_s, 3), "time_budget_s": budget,
        "budget_signal_s": job.term_s, "hard_limit_s": job.hard_limit_s,
        "gpu_s": round(job.gpu_s, 3), "slot": job.slot, "started_at": round(started_at, 3),
        # The devices this process was given (a Ray task: the GPUs Ray assigned it; None: not restricted).
        "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "log_path": None if log_path is None else str(log_path),
        "experiment_dir": str(exp_dir) if keep_checkpoints() else None, "metric_lines": len(job.metrics),
        "first_metric_s": None if job.first_metric_s is None else round(job.first_metric_s, 3),
        "last_step": steps[-1] if steps else None,
        "last_train_loss": last.get("loss"),
        "median_step_ms": sorted(dts)[len(dts) // 2] if dts else None,
        "loss_curve": [[m.get("step"), m.get("loss")] for m in curve[:: max(1, len(curve) // 20)]][:25],
    }


def remove_experiment(exp_dir: str | Path) -> bool:
    """Deletes an experiment folder (checkpoints and logs; its tmpfs unmounted) without following a
    symlink; True when gone."""
    unmount(exp_dir)
    return remove_tree(str(exp_dir))
