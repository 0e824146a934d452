"""``atari/{game}-v1``: the seed trains and scores from pixels; scoring seeds come from the secret; a policy
that looks for the emulator finds none; bad actions, forged metrics and overruns end without a score."""

from __future__ import annotations

from pathlib import Path

import pytest

import reasearch
from reasearch.evaluators.repo import encode_repo
from reasearch.evaluators.result import Status

pytest.importorskip("ale_py", reason="ale-py (the 'atari' extra) is not installed")

from reasearch.evaluators.atari.task import AtariTask, ale_id, scoring_seeds
from reasearch.evaluators.kinds import ExperimentOptions

_ZERO_TRAIN = """import json, os
import numpy as np
out = os.environ["REASEARCH_OUT_DIR"]
print(json.dumps({"step": 0, "return": 1e9, "loss": -1e9}))
json.dump({}, open(os.path.join(out, "config.json"), "w"))
np.savez(os.path.join(out, "weights.npz"), w=np.zeros(1))
"""


def _policy(act_body: str) -> str:
    return f"""import numpy as np
class P:
    def act(self, obs):
{act_body}
def build_policy(config, weights):
    return P()
"""


@pytest.fixture()
def task(experiment_root: Path) -> AtariTask:
    return reasearch.make("atari/qbert-v1", time_budget_s=20.0, grace_s=20.0, episodes=2, max_frames=400,  # type: ignore[return-value]
                          eval_time_limit_s=60.0)


def test_the_seed_trains_and_plays_the_scored_episodes(task: AtariTask, tmp_path: Path) -> None:
    files = task.seed_files()
    files["train.py"] = files["train.py"].replace("max_iterations = None", "max_iterations = 1")
    res = task.evaluate(encode_repo(files), options=ExperimentOptions(str(tmp_path / "exp")))
    assert res.status is Status.OK, res.feedback
    m = res.metrics
    assert len(m["returns"]) == 2 and m["mean_return"] == res.score and m["env_steps"] > 0
    assert (
        m["env"] == "ALE/Qbert-v5" and m["last_step"] == 0 and (tmp_path / "exp" / "scoring" / "policy.log").is_file()
    )
    assert res.provenance is not None and res.provenance.versions.get("scoring_secret")
    assert m["env_steps"] <= 2 * 400 // 4  # the frame cap (frame skip 4)


def test_scoring_seeds_come_from_the_secret() -> None:
    a, b = scoring_seeds("qbert", 5, key=b"k" * 32), scoring_seeds("qbert", 5, key=b"j" * 32)
    assert a == scoring_seeds("qbert", 5, key=b"k" * 32) and a != b and len(set(a)) == 5
    assert scoring_seeds("pong", 5, key=b"k" * 32) != a and ale_id("space_invaders") == "ALE/SpaceInvaders-v5"


def test_a_policy_finds_no_emulator_to_read(task: AtariTask) -> None:
    look = ("        import gc, sys\n"
            "        found = [o for o in gc.get_objects() if type(o).__name__ in ('ALEInterface', 'AtariEnv')]\n"
            "        if not found:\n"
            "            raise LookupError('no emulator here')\n"
            "        return np.zeros(len(obs), dtype=np.int64)")
    res = task.evaluate(encode_repo({**task.seed_files(), "train.py": _ZERO_TRAIN, "policy.py": _policy(look)}))
    assert res.status is Status.CRASH and res.score is None
    assert "LookupError raised at policy.py:7" in res.feedback and "no emulator here" not in res.feedback


@pytest.mark.parametrize("body", [
    "        return np.full(len(obs), 99)",  # out of range
    "        return np.full(len(obs), 1.5)",  # not an integer
    "        return np.zeros((len(obs), 2))",  # wrong shape
    "        return np.full(len(obs), -1)",
])
def test_bad_actions_are_invalid(task: AtariTask, body: str) -> None:
    res = task.evaluate(encode_repo({**task.seed_files(), "train.py": _ZERO_TRAIN, "policy.py": _policy(body)}))
    assert res.status is Status.INVALID and res.score is None and "one integer action" in res.feedback


def test_a_forged_metric_is_ignored(task: AtariTask) -> None:
    noop = "        return np.zeros(len(obs), dtype=np.int64)"
    res = task.evaluate(encode_repo({**task.seed_files(), "train.py": _ZERO_TRAIN, "policy.py": _policy(noop)}))
    assert res.status is Status.OK and res.score is not None and res.score < 1e6


def test_a_training_run_past_its_budget_gets_no_score(experiment_root: Path) -> None:
    t = reasearch.make("atari/qbert-v1", time_budget_s=0.5, grace_s=0.5, episodes=1, max_frames=400)
    res = t.evaluate(encode_repo({"train.py": "import time\ntime.sleep(30)\n"}))
    assert res.status is Status.TIMEOUT and res.score is None
