"""``atari/{game}-v1``: train an Atari policy from pixels within a time budget; scored by mean return.

The candidate is a repository (``train.py``, ``policy.py``, ...). Training runs in a jail with ale-py (the
emulator and its ROMs) and Gymnasium importable. Scoring: the trusted side (this process) creates
``episodes`` environments with sticky actions (``repeat_action_probability``), a frame skip and a frame cap
per episode, reset with seeds derived from the evaluator's secret (:mod:`reasearch.evaluators._secret`),
and steps them itself. Each step it sends the grey frames of the running episodes (uint8 [B, 210, 160]) to
the fixed policy server (``rl/_policy_server.py``, played by :mod:`reasearch.evaluators.rl.episodes` as the
MuJoCo tasks are) in a scoring jail and checks the answers (one integer action in range per frame). The
policy process never holds an emulator: it cannot read the console's RAM or state, only the pixels it is
sent. Score = mean undiscounted return (maximize), with its spread in the metrics. What policy code prints
or raises is withheld.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import ClassVar

import numpy as np

from reasearch.engine.gpu import SlotLease
from reasearch.evaluators._secret import derive_seed, secret
from reasearch.evaluators.outputs import OutputError, read_output
from reasearch.evaluators.params import Range, meta
from reasearch.evaluators.result import EvalResult
from reasearch.evaluators.rl.task import EpisodeParams, EpisodeTask
from reasearch.evaluators.spec import TaskSpec
from reasearch.evaluators.training import TORCH_SCORING_PACKAGES, experiments_root

__all__ = ["GAMES", "AtariParams", "AtariTask", "ale_id", "scoring_seeds"]

GAMES = ("qbert", "pong", "breakout", "space_invaders", "ms_pacman", "seaquest", "beam_rider", "enduro")
_MAX_CONFIG_BYTES = 64 * 1024
_SERVER_STEPS = {
    "weights": "while loading config.json and the weights (weights.npz with allow_pickle=False, or model.pt with "
               "torch.load(weights_only=True): plain arrays or tensors only)",
    "import": "while importing policy.py", "build": "in build_policy(config, weights)",
    "act": "in policy.act(frames) on a held-out episode",
    "output": "converting policy.act's answer to an array of one action per frame",
}


def ale_id(game: str) -> str:
    """``qbert`` -> ``ALE/Qbert-v5``."""
    return "ALE/" + "".join(part.capitalize() for part in game.split("_")) + "-v5"


def scoring_seeds(game: str, episodes: int, key: bytes | None = None) -> list[int]:
    """The scored episodes' seeds: derived from the evaluator's secret (only its holder can compute them)."""
    key = secret() if key is None else key
    return [derive_seed("atari held-out episode", {"game": game, "episode": i}, key) % (1 << 31)
            for i in range(int(episodes))]


@dataclass(frozen=True, slots=True)
class AtariParams(EpisodeParams):
    """The parameters of ``atari`` (constructor, ``--params`` and ``spec.params`` come from here)."""

    family: ClassVar[str] = "atari"

    game: str = field(default='qbert', metadata=meta(
        'one of GAMES (default qbert).', Range(choices=tuple(GAMES))))
    episodes: int = field(default=10, kw_only=True, metadata=meta(
        'scored episodes (seeds from the secret), stepped together.', Range(ge=1, le=100)))
    max_frames: int = field(default=108000, kw_only=True, metadata=meta(
        'the frame cap of a scored episode (108,000 = 30 emulated minutes, the usual protocol).',
        Range(ge=100, le=1000000)))
    sticky: float = field(default=0.25, kw_only=True, metadata=meta(
        'probability that the console repeats the previous action (0.25, Machado et al. 2018).', Range(ge=0, lt=1)))
    frameskip: int = field(default=4, kw_only=True, metadata=meta(
        'emulator frames per agent step.', Range(ge=1, le=8)))
    eval_time_limit_s: float = field(default=900.0, kw_only=True, metadata=meta(
        'wall limit of the scoring session.'))


class AtariTask(EpisodeTask[AtariParams]):
    """Atari from pixels (ale-py) under a training time budget: maximize the mean undiscounted return.

    Parameters: :class:`AtariParams`.
    """

    server_steps = _SERVER_STEPS
    # The policy server's runtime: NumPy and torch; never ale-py (its emulator and ROMs are the training jail's).
    scoring_packages = TORCH_SCORING_PACKAGES

    @property
    def env(self) -> str:
        return ale_id(self.params.game)

    def _make_spec(self) -> TaskSpec:
        p = self.params
        return TaskSpec(
            id=f"atari/{p.game}-v1", version=1, direction="maximize",
            time_limit_s=float(p.max_time_budget_s) + float(p.grace_s) + float(p.eval_time_limit_s),
            memory_mb=int(p.memory_mb), entry_point="train.py", deterministic=False, params=self.get_params())

    def job_env(self) -> dict[str, str]:
        return {"REASEARCH_ENV": self.env, "REASEARCH_STICKY": f"{float(self.params.sticky):g}",
                "REASEARCH_FRAMESKIP": str(int(self.params.frameskip))}

    def train_data_dir(self) -> Path:
        path = experiments_root() / "rl-data"  # nothing to read: the emulator is the data
        path.mkdir(mode=0o755, exist_ok=True)
        return path

    def seed_files(self) -> dict[str, str]:
        seed = resources.files("reasearch.evaluators.atari") / "seed"
        return {name: (seed / f"{name}.txt").read_text(encoding="utf-8") for name in ("policy.py", "train.py")}

    def describe(self) -> str:
        p = self.params
        p = self.params
        return f"""# atari/{p.game}-v1: train a {self.env} policy from pixels within a time budget (maximize mean \
return)

The candidate is the repository in your workspace (train.py, policy.py, any files you add), under git.
An experiment (`run_experiment`) runs `python3 train.py` in a fresh sandbox (no network; ale-py with its
ROMs, Gymnasium, NumPy and torch importable) with these environment variables:

- REASEARCH_ENV: {self.env}; REASEARCH_STICKY: {float(p.sticky):g}; REASEARCH_FRAMESKIP: {int(p.frameskip)}
  (how scoring plays: make the training environment the same way, obs_type="grayscale").
- REASEARCH_TIME_BUDGET_S / REASEARCH_DEADLINE: training seconds allowed. {self.describe_budget()}
- REASEARCH_OUT_DIR: the only writable folder. train.py must save there config.json (a JSON object) and
  weights.npz (numpy arrays; loaded with allow_pickle=False) or model.pt (a state_dict; loaded with
  torch.load(weights_only=True)).

Metric (trusted, fixed): the evaluator imports policy.py and calls `build_policy(config, weights)`. It plays
{int(p.episodes)} episodes itself (seeds derived from a secret you cannot read; sticky actions \
{float(p.sticky):g};
frame skip {int(p.frameskip)}; at most {int(p.max_frames)} frames each) and calls `policy.act(frames)` with the \
grey
frames of the running episodes, uint8 [B, 210, 160]; act returns one integer action in [0, n_actions) per
frame. The policy gets pixels only: no emulator, RAM or game state. Score = mean undiscounted return over
the episodes (higher is better; the spread is reported). Print JSON lines such as {{"step": 3, "return": 120,
"loss": -120}} to show the training curve. What policy.py prints or raises during scoring is withheld: a
failure is reported as its step, exception class and file:line only. At scoring policy.py can import NumPy
and torch only (not ale-py or Gymnasium), and no native code from the repository or the outputs loads.
"""

    # ------------------------------------------------------------ trusted side
    def trusted_evaluation(self, *, exp_dir: Path, repo_dir: Path, ckpt_dir: Path, lease: SlotLease) -> EvalResult:
        p = self.params
        import ale_py
        import gymnasium as gym

        try:
            if not isinstance(json.loads(read_output(ckpt_dir / "config.json", _MAX_CONFIG_BYTES)), dict):
                return self.invalid("config.json must hold a JSON object")
        except OutputError as exc:
            return self.invalid(f"{exc}: train.py must save config.json (a JSON object) in REASEARCH_OUT_DIR")
        except (ValueError, UnicodeDecodeError) as exc:
            return self.invalid(f"config.json is not valid JSON: {exc}")
        if not any(p.is_file() and not p.is_symlink() for p in (ckpt_dir / "weights.npz", ckpt_dir / "model.pt")):
            return self.invalid("train.py saved no weights.npz or model.pt in REASEARCH_OUT_DIR")
        gym.register_envs(ale_py)
        envs = [gym.make(self.env, obs_type="grayscale", frameskip=int(p.frameskip),
                         repeat_action_probability=float(p.sticky), max_num_frames_per_episode=int(p.max_frames))
                for _ in range(int(p.episodes))]
        n_actions = int(envs[0].action_space.n)  # type: ignore[attr-defined]  # Discrete

        def check(actions: np.ndarray, n: int) -> list[int] | str:
            if (actions.shape != (n,) or not np.issubdtype(actions.dtype, np.number)
                    or not np.isfinite(actions).all() or not np.all(actions == np.round(actions))
                    or actions.min() < 0 or actions.max() >= n_actions):
                return f"policy.act must return one integer action in [0, {n_actions}) per frame ({n} frames were sent)"
            return [int(a) for a in actions]

        return self._score_episodes(envs, scoring_seeds(p.game, int(p.episodes)), exp_dir=exp_dir,
                                    repo_dir=repo_dir, ckpt_dir=ckpt_dir, lease=lease, dtype=np.uint8, check=check,
                                    game=p.game)
