"""``rl/{env}-v2``: train a MuJoCo locomotion policy within a time budget; scored by mean return.

The candidate is a repository (``train.py``, ``policy.py``, ...). Training runs in a jail (Gymnasium and
MuJoCo importable, no network). Scoring: the trusted side (this process) creates ``episodes`` held-out
environments and steps them itself, vectorized: each step it sends the batch of observations of the
running episodes to the fixed policy server (``_policy_server.py``) in a fresh jail, checks the actions
(shape, finite), clips them to the action space, and sums the undiscounted rewards. Score = mean return
over the episodes (maximize).

The episodes' seeds are derived from the evaluator's secret (:mod:`reasearch.evaluators._secret`, as
EPLB's workloads are): no jail can read the secret, so a ``train.py`` cannot compute them and plan against
them open-loop; results record the secret's fingerprint (``provenance.versions["scoring_secret"]``).
``-v2``: ``-v1`` scored on public seeds (a constant plus the episode number).

What candidate code prints or raises in the policy server never reaches the agent (it sees the held-out
episodes): failures are reported as a step, a built-in exception class and a ``file:line`` of the
repository (:mod:`reasearch.evaluators._scoring_report`); the log stays on the host
(``metrics["scoring_log_dir"]``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np

from reasearch.engine.files import UntrustedFileError, read_untrusted
from reasearch.engine.gpu import SlotLease
from reasearch.evaluators._secret import derive_seed, fingerprint, secret
from reasearch.evaluators.base import _hash_modules
from reasearch.evaluators.params import Range, meta
from reasearch.evaluators.result import EvalResult, Provenance
from reasearch.evaluators.rl.episodes import ActionCheck, play_episodes
from reasearch.evaluators.spec import TaskSpec
from reasearch.evaluators.training import TORCH_SCORING_PACKAGES, TrainingParams, TrainingTask, experiments_root

__all__ = ["ENVS", "EpisodeParams", "EpisodeTask", "RLParams", "RLTask", "scoring_seeds"]

ENVS = ("HalfCheetah-v5", "InvertedPendulum-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5", "Swimmer-v5",
        "Reacher-v5", "InvertedDoublePendulum-v5")
_MAX_CONFIG_BYTES = 64 * 1024
# The steps of _policy_server.py, as the feedback names them.
_SERVER_STEPS = {
    "weights": "while loading config.json and the weights (weights.npz with allow_pickle=False, or model.pt with "
               "torch.load(weights_only=True): plain arrays or tensors only)",
    "import": "while importing policy.py", "build": "in build_policy(config, weights)",
    "act": "in policy.act(obs) on a held-out episode",
    "output": "converting policy.act's answer to a float64 array [B, act_dim]",
}


def scoring_seeds(env: str, episodes: int, key: bytes | None = None) -> list[int]:
    """The held-out episodes' seeds: derived from the evaluator's secret, so only its holder can compute them."""
    key = secret() if key is None else key
    return [derive_seed("rl held-out episode", {"env": env, "episode": i}, key) for i in range(int(episodes))]


@dataclass(frozen=True, slots=True)
class EpisodeParams(TrainingParams):
    """What the tasks scored on held-out episodes take (``rl``, ``atari``), beyond every training task's."""

    time_budget_s: float = field(default=600.0, kw_only=True, metadata=meta(
        "training seconds of one experiment (paper: 5-30 min; tests: seconds)."))
    episodes: int = field(default=10, kw_only=True, metadata=meta(
        "scoring episodes (held-out seeds), stepped together.", Range(ge=1, le=1000)))
    eval_time_limit_s: float = field(default=600.0, kw_only=True, metadata=meta(
        "wall limit of the scoring session."))


@dataclass(frozen=True, slots=True)
class RLParams(EpisodeParams):
    """The parameters of ``rl`` (constructor, ``--params`` and ``spec.params`` come from here)."""

    family: ClassVar[str] = "rl"

    env: str = field(default='HalfCheetah-v5', metadata=meta(
        'a Gymnasium MuJoCo id (see ENVS).', Range(choices=tuple(ENVS))))
    max_episode_steps: int | None = field(default=None, kw_only=True, metadata=meta(
        "episode length cap when scoring (None: the environment's own, 1000 for most).", Range(ge=1, le=100000)))


EP = TypeVar("EP", bound=EpisodeParams)


class EpisodeTask(TrainingTask[EP]):
    """A training task scored by the trusted side on held-out episodes played against the policy server."""

    server_steps: ClassVar[Mapping[str, str]] = _SERVER_STEPS  # the policy server's steps, as the feedback names them
    # The policy server's runtime: NumPy and torch, never Gymnasium or MuJoCo (a policy could simulate on them).
    scoring_packages: ClassVar[tuple[str, ...]] = TORCH_SCORING_PACKAGES

    @property
    @abstractmethod
    def env(self) -> str:
        """The Gymnasium id of the environment the episodes are played in."""

    def heldout_public(self) -> bool:
        """False: the held-out data are episodes of the public simulator whose seeds only the evaluator secret
        gives (the simulator is the training data; the scored episodes exist nowhere else)."""
        return False

    def provenance(self, candidate_source: str, *, seed: int | None, sandbox_mode: str) -> Provenance:
        """The base provenance, plus the fingerprint of the secret the scoring seeds came from."""
        prov = super().provenance(candidate_source, seed=seed, sandbox_mode=sandbox_mode)
        return dataclasses.replace(prov, versions={**prov.versions, "scoring_secret": fingerprint()})

    def evaluator_hash(self) -> str:
        """The base hash (the task modules), with the shared scoring loop's module folded in."""
        loop = _hash_modules(("reasearch.evaluators.rl.episodes",))
        return hashlib.sha256((super().evaluator_hash() + loop).encode()).hexdigest()[:16]

    # ------------------------------------------------------------ trusted side
    def score_solution(self, data: Any, *, seed: int | None = None) -> EvalResult:
        """Scores episode returns measured by the trusted side: ``{"returns": [float, ...]}``."""
        if not isinstance(data, dict) or not isinstance(data.get("returns"), list):
            return self.invalid("expected {'returns': [one return per episode]}")
        returns = data["returns"]
        if len(returns) != int(self.params.episodes) or not all(
                isinstance(r, (int, float)) and not isinstance(r, bool) and math.isfinite(r) for r in returns):
            return self.invalid(f"expected {int(self.params.episodes)} finite returns")
        mean = float(np.mean(returns))
        return self.result(mean, metrics={"mean_return": mean, "std_return": float(np.std(returns)),
                                          "returns": [round(float(r), 3) for r in returns], "env": self.env},
                           feedback=f"mean return {mean:.2f} over {len(returns)} held-out episodes "
                                    f"(std {float(np.std(returns)):.2f})")

    def _score_episodes(self, envs: list[Any], seeds: list[int], *, exp_dir: Path, repo_dir: Path, ckpt_dir: Path,
                        lease: SlotLease, dtype: type[np.generic], check: ActionCheck, **extra: Any) -> EvalResult:
        """Plays the held-out episodes against the policy server (:func:`play_episodes`) and scores the returns;
        ``extra`` joins the play's metrics."""
        played = play_episodes(envs, seeds, exp_dir=exp_dir, repo_dir=repo_dir, ckpt_dir=ckpt_dir, lease=lease,
                               dtype=dtype, check=check, invalid=self.invalid, steps=self.server_steps,
                               time_limit_s=float(self.params.eval_time_limit_s), memory_mb=int(self.params.memory_mb),
                               sandbox_mode=self.params.sandbox_mode, packages=self.scoring_packages)
        if isinstance(played, EvalResult):
            return played
        res = self.score_solution({"returns": played.returns})
        return res.with_(metrics={**dict(res.metrics), **played.metrics(**extra)})


class RLTask(EpisodeTask[RLParams]):
    """MuJoCo locomotion (Gymnasium) under a training time budget: maximize the mean undiscounted return.

    Parameters: :class:`RLParams`.
    """

    @property
    def env(self) -> str:
        return self.params.env

    def _make_spec(self) -> TaskSpec:
        p = self.params
        return TaskSpec(
            id=f"rl/{self.env}-v2", version=2, direction="maximize",
            time_limit_s=float(p.max_time_budget_s) + float(p.grace_s) + float(p.eval_time_limit_s),
            memory_mb=int(p.memory_mb), entry_point="train.py", deterministic=False, params=self.get_params())

    def job_env(self) -> dict[str, str]:
        return {"REASEARCH_ENV": str(self.env)}

    def train_data_dir(self) -> Path:
        path = experiments_root() / "rl-data"  # nothing to read: the environment is the data
        path.mkdir(mode=0o755, exist_ok=True)
        return path

    def seed_files(self) -> dict[str, str]:
        seed = resources.files("reasearch.evaluators.rl") / "seed"
        return {name: (seed / f"{name}.txt").read_text(encoding="utf-8") for name in ("policy.py", "train.py")}

    def describe(self) -> str:
        cap = self.params.max_episode_steps
        steps = "the environment's own limit" if cap is None else f"{int(cap)} steps"
        return f"""# rl/{self.env}-v2: train a {self.env} policy within a time budget (maximize mean return)

The candidate is the repository in your workspace (train.py, policy.py, any files you add), under git.
An experiment (`run_experiment`) runs `python3 train.py` in a fresh sandbox (no network; Gymnasium
{self.env} with MuJoCo, NumPy and torch importable) with these environment variables:

- REASEARCH_ENV: the environment id ({self.env}).
- REASEARCH_TIME_BUDGET_S / REASEARCH_DEADLINE: training seconds allowed. {self.describe_budget()}
- REASEARCH_OUT_DIR: the only writable folder. train.py must save there config.json (a JSON object) and
  weights.npz (numpy arrays; loaded with allow_pickle=False) or model.pt (a state_dict; loaded with
  torch.load(weights_only=True)).

Metric (trusted, fixed): the evaluator imports policy.py and calls `build_policy(config, weights)`
(weights: a dict of arrays, or the state_dict). It then steps {int(self.params.episodes)} held-out episodes itself
(seeds derived from a secret you cannot read; {steps} each) and calls `policy.act(obs)` with a float64 batch [B, \
obs_dim] of the
running episodes; it must return actions [B, act_dim] (finite; clipped to the action space by the
evaluator). Score = mean undiscounted return over the episodes (higher is better), deterministic policy.
Print JSON lines such as {{"step": 3, "return": 120.5}} to show the training curve. What policy.py prints
or raises during scoring is withheld (it sees held-out episodes): a failure is reported as its step,
exception class and file:line only. At scoring policy.py can import NumPy and torch only (not Gymnasium or
MuJoCo), and no native code from the repository or the outputs loads.
"""

    def trusted_evaluation(self, *, exp_dir: Path, repo_dir: Path, ckpt_dir: Path, lease: SlotLease) -> EvalResult:
        import gymnasium as gym

        try:
            raw = read_untrusted(ckpt_dir, "config.json", max_bytes=_MAX_CONFIG_BYTES)
        except UntrustedFileError as exc:
            return self.invalid(f"train.py saved no config.json (a JSON object of at most 64 KiB) in "
                                f"REASEARCH_OUT_DIR: {exc}")
        try:
            if not isinstance(json.loads(raw.decode("utf-8")), dict):
                return self.invalid("config.json must hold a JSON object")
        except (ValueError, UnicodeDecodeError) as exc:
            return self.invalid(f"config.json is not valid JSON: {exc}")
        if not any(p.is_file() and not p.is_symlink() for p in (ckpt_dir / "weights.npz", ckpt_dir / "model.pt")):
            return self.invalid("train.py saved no weights.npz or model.pt in REASEARCH_OUT_DIR")
        kwargs: dict[str, Any] = {} if self.params.max_episode_steps is None else {
            "max_episode_steps": int(self.params.max_episode_steps)}
        envs = [gym.make(self.env, **kwargs) for _ in range(int(self.params.episodes))]
        space = envs[0].action_space
        if not isinstance(space, gym.spaces.Box):  # ENVS are continuous-control environments, all of them
            raise TypeError(f"{self.env}: expected a Box action space, got {type(space).__name__}")
        low, high = space.low.astype(np.float64), space.high.astype(np.float64)

        def check(actions: np.ndarray, n: int) -> np.ndarray | str:
            want = (n, *space.shape)
            if actions.shape != want or not np.issubdtype(actions.dtype, np.number):
                return (f"policy.act returned an array that is not a number array of the expected shape {want} "
                        f"(one row per running episode)")
            if not np.isfinite(actions).all():
                return "policy.act returned non-finite actions (NaN or inf)"
            return np.clip(actions.astype(np.float64), low, high)

        return self._score_episodes(envs, scoring_seeds(self.env, int(self.params.episodes)), exp_dir=exp_dir,
                                    repo_dir=repo_dir, ckpt_dir=ckpt_dir, lease=lease, dtype=np.float64, check=check)
