"""Scoring jails hold nothing to exploit (issue 36, item 2): a policy cannot import the training jail's emulator
(ale-py) or simulator (MuJoCo, Gymnasium), and no native code it ships loads there; every scoring task declares
its package list, and a result says what its scoring jail held (process mode cannot mount noexec: it says so)."""

from __future__ import annotations

from pathlib import Path

import pytest

import reasearch
from reasearch.evaluators.repo import encode_repo
from reasearch.evaluators.result import Status
from reasearch.evaluators.training import TORCH_SCORING_PACKAGES, TrainingTask
from tests.engine.conftest import MODES, needs_mode

pytest.importorskip("ale_py", reason="ale-py (the 'atari' extra) is not installed")

# train.py may write anything to its outputs: here the stdlib's _ctypes extension (any shared library will do)
# and, for the policy to find it, the folder's path in config.json.
_TRAIN = """import _ctypes, json, os, shutil
import numpy as np
out = os.environ["REASEARCH_OUT_DIR"]
shutil.copyfile(_ctypes.__file__, os.path.join(out, "native.so"))
json.dump({"dir": out}, open(os.path.join(out, "config.json"), "w"))
np.savez(os.path.join(out, "weights.npz"), w=np.zeros(1))
"""


def _policy(build: str) -> str:
    return f"""import numpy as np
class P:
    def act(self, obs):
        return np.zeros(len(obs), dtype=np.int64)
def build_policy(config, weights):
{build}
    return P()
"""


@pytest.fixture()
def atari(experiment_root: Path):  # type: ignore[no-untyped-def]
    def make(mode: str):  # type: ignore[no-untyped-def]
        needs_mode(mode)
        return reasearch.make("atari/qbert-v1", time_budget_s=20.0, grace_s=20.0, episodes=1, max_frames=200,
                              eval_time_limit_s=60.0, sandbox_mode=mode)
    return make


@pytest.mark.parametrize("mode", MODES)
def test_an_atari_policy_cannot_import_the_emulator(atari, mode: str) -> None:  # type: ignore[no-untyped-def]
    task = atari(mode)
    res = task.evaluate(encode_repo({"train.py": _TRAIN, "policy.py": _policy("    import ale_py")}))
    assert res.status is Status.CRASH and res.score is None, res.feedback
    assert "ModuleNotFoundError raised at policy.py:6" in res.feedback


@pytest.mark.parametrize("mode", MODES)
def test_an_atari_policy_cannot_load_native_code_from_its_checkpoint(atari, mode: str) -> None:  # type: ignore[no-untyped-def]
    task = atari(mode)
    load = "    import ctypes, os\n    ctypes.CDLL(os.path.join(config['dir'], 'native.so'))"
    res = task.evaluate(encode_repo({"train.py": _TRAIN, "policy.py": _policy(load)}))
    if mode == "nsjail":
        assert res.status is Status.CRASH and res.score is None, res.feedback
        assert "OSError raised at policy.py:7" in res.feedback
    else:  # process mode cannot mount noexec: the library loads, and the result says what was not enforced
        assert res.status is Status.OK, res.feedback
        assert "nothing is mounted noexec" in res.metrics["scoring_jail"]


def test_an_atari_policy_cannot_bring_the_emulator_in_its_checkpoint(experiment_root: Path) -> None:
    """train.py (where ale-py is importable) copies the package, ROMs and all, into its outputs; the policy puts
    that folder first on sys.path: the copy's extension module cannot be mapped from a noexec mount."""
    needs_mode("nsjail")
    task = reasearch.make("atari/qbert-v1", time_budget_s=20.0, grace_s=20.0, episodes=1, max_frames=200,
                          eval_time_limit_s=60.0, sandbox_mode="nsjail")
    train = _TRAIN + (
        "import glob, ale_py\n"
        "home = os.path.dirname(ale_py.__file__)\n"
        # importlib.metadata wants its dist-info; the extension module, the libraries auditwheel put beside it
        "for src in [home, *glob.glob(home + '-*.dist-info'), *glob.glob(home + '.libs')]:\n"
        "    shutil.copytree(src, os.path.join(out, os.path.basename(src)))\n")
    own = "    import sys\n    sys.path.insert(0, config['dir'])\n    import ale_py"
    res = task.evaluate(encode_repo({"train.py": train, "policy.py": _policy(own)}))
    assert res.status is Status.CRASH and res.score is None, res.feedback
    assert "ImportError raised at policy.py:8, in build_policy" in res.feedback  # not a subclass: the .so's mapping


@pytest.mark.parametrize("mode", MODES)
def test_an_rl_policy_cannot_import_the_simulator(experiment_root: Path, mode: str) -> None:
    pytest.importorskip("mujoco")
    needs_mode(mode)
    task = reasearch.make("rl/InvertedPendulum-v5-v2", time_budget_s=20.0, grace_s=20.0, episodes=1,
                          max_episode_steps=50, eval_time_limit_s=60.0, sandbox_mode=mode)
    save = _TRAIN.replace("import _ctypes, ", "import ").replace(
        'shutil.copyfile(_ctypes.__file__, os.path.join(out, "native.so"))\n', "")
    for module in ("mujoco", "gymnasium"):
        policy = (f"import numpy as np\nclass P:\n    def act(self, obs):\n        return np.zeros((len(obs), 1))\n"
                  f"def build_policy(c, w):\n    import {module}\n    return P()\n")
        res = task.evaluate(encode_repo({"train.py": save, "policy.py": policy}))
        assert res.status is Status.CRASH and res.score is None, res.feedback
        assert "ModuleNotFoundError raised at policy.py:6" in res.feedback, (module, res.feedback)


@pytest.mark.parametrize("task_id, jailed", [
    ("atari/qbert-v1", True), ("rl/InvertedPendulum-v5-v2", True), ("img/folder-v1", True), ("nanogpt/v1", True),
    ("tabular/csv-v1", False)])
def test_every_training_task_declares_its_scoring_packages(task_id: str, jailed: bool) -> None:
    task = reasearch.make(task_id)
    assert isinstance(task, TrainingTask)
    if jailed:
        assert task.scoring_packages == TORCH_SCORING_PACKAGES
    else:
        assert task.scoring_packages == ()  # nothing of the candidate runs at scoring
    assert not {"ale_py", "mujoco", "gymnasium", "scipy", "numba"} & set(task.scoring_packages)
