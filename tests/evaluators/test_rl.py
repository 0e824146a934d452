"""``rl/{env}-v2``: the seed trains and scores on held-out episodes the trusted side steps itself; bad
actions (wrong shape, NaN), pickled weights and a policy that prints to stdout are handled."""

from __future__ import annotations

import os

import pytest

import reasearch
from reasearch.evaluators.repo import encode_repo
from reasearch.evaluators.result import Status
from reasearch.evaluators.rl.task import RLTask


@pytest.fixture(scope="module")
def task() -> RLTask:
    os.environ.setdefault("REASEARCH_FAKE_GPUS", "0")
    os.environ.setdefault("REASEARCH_CPUS_PER_SLOT", "1")
    return reasearch.make("rl/InvertedPendulum-v5-v2", time_budget_s=30.0, grace_s=30.0, episodes=3,
                          max_episode_steps=200, eval_time_limit_s=120.0)  # type: ignore[return-value]


def _with(task: RLTask, **files: str) -> str:
    return encode_repo({**task.seed_files(), **files})


def test_the_seed_trains_and_is_scored_on_held_out_episodes(task: RLTask) -> None:
    train = task.seed_files()["train.py"].replace("max_iterations = None", "max_iterations = 3")
    res = task.evaluate(_with(task, **{"train.py": train}), seed=0)
    assert res.status is Status.OK, res.feedback
    m = res.metrics
    assert len(m["returns"]) == 3 and res.score == pytest.approx(sum(m["returns"]) / 3, abs=1e-2)
    total = sum(m["returns"])  # InvertedPendulum: +1 per step balanced, 0 on the step that ends an episode
    assert total <= m["env_steps"] <= total + 3
    assert m["policy_calls"] >= max(m["returns"]) - 1 and m["last_step"] == 2
    assert task.evaluation_costs(res)["experiments"] == 1.0


SAVE = '''
import json, os, numpy as np
out = os.environ["REASEARCH_OUT_DIR"]
json.dump({}, open(os.path.join(out, "config.json"), "w"))
np.savez(os.path.join(out, "weights.npz"), w=np.zeros(1))
'''


@pytest.mark.parametrize("act, status, words", [
    ("return np.zeros((len(obs), 7))", Status.INVALID, "expected"),
    ("return np.full((len(obs), 1), np.nan)", Status.INVALID, "non-finite"),
    ("print('chatter on stdout'); return np.zeros((len(obs), 1))", Status.OK, "mean return"),
    ("return 'left'", Status.CRASH, "policy server failed"),
])
def test_the_trusted_side_checks_every_action(task: RLTask, act: str, status: Status, words: str) -> None:
    policy = (
        f"import numpy as np\nclass P:\n    def act(self, obs):\n        {act}\n"
        "def build_policy(c, w):\n    return P()\n"
    )
    res = task.evaluate(encode_repo({"train.py": SAVE, "policy.py": policy}), seed=0)
    assert res.status is status and words in res.feedback, res.feedback[-1500:]


def test_pickled_weights_are_never_unpickled(task: RLTask) -> None:
    evil = '''
import json, os, numpy as np
class Boom:
    def __reduce__(self):
        return (print, ("PAYLOAD-RAN-" + "ON-LOAD",))
out = os.environ["REASEARCH_OUT_DIR"]
json.dump({}, open(os.path.join(out, "config.json"), "w"))
np.savez(os.path.join(out, "weights.npz"), W=np.array([Boom()], dtype=object))
'''
    res = task.evaluate(_with(task, **{"train.py": evil}), seed=0)
    assert res.status is Status.CRASH and "PAYLOAD-RAN-ON-LOAD" not in res.feedback
    assert "allow_pickle" in res.feedback


def test_scores_come_only_from_measured_returns(task: RLTask) -> None:
    for garbage in (None, {"returns": [1.0]}, {"returns": [1.0, float("nan"), 2.0]}, {"returns": "high"}):
        assert task.score_solution(garbage).status is Status.INVALID
    assert task.score_solution({"returns": [1.0, 2.0, 3.0]}).score == 2.0
    with pytest.raises(ValueError, match="parameter env of rl takes one of"):
        _ = RLTask(env="CartPole-v1").spec


def test_evaluator_hash_covers_the_shared_scoring_loop(task: RLTask, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The episode loop left rl/task.py for rl/episodes.py (shared with atari): a change there still changes the
    hash of both families (and so their cache key)."""
    import reasearch.evaluators.rl.episodes as episodes
    from reasearch.evaluators.base import _hash_modules

    atari = reasearch.make("atari/qbert-v1")
    before = task.evaluator_hash(), atari.evaluator_hash()
    changed = tmp_path / "episodes.py"
    changed.write_text(open(episodes.__file__).read() + "\n# one more line\n")
    monkeypatch.setattr(episodes, "__file__", str(changed))
    _hash_modules.cache_clear()  # module hashes are cached per process
    try:
        after = task.evaluator_hash(), atari.evaluator_hash()
        assert after[0] != before[0] and after[1] != before[1]
    finally:
        monkeypatch.undo()
        _hash_modules.cache_clear()
