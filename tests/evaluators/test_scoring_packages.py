"""Scoring jails hold nothing to exploit (issue 36, item 2): a policy cannot import the training jail's emulator
(ale-py) or simulator (MuJoCo, Gymnasium), and no native code it ships loads there; every scoring task declares
its package list, and a result says what its scoring jail held (process mode cannot mount noexec: it says so)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

import reasearch
from reasearch.evaluators.repo import encode_repo
from reasearch.evaluators.result import Status
from reasearch.evaluators.training import TORCH_SCORING_PACKAGES, TrainingTask
from tests.engine.conftest import MODES, needs_mode
from tests.evaluators.conftest import weights_made_on_the_host

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


def _make(task_id: str, mode: str, **params: object) -> TrainingTask:
    needs_mode(mode)
    task = reasearch.make(task_id, sandbox_mode=mode, **params)
    assert isinstance(task, TrainingTask)
    return task


@pytest.fixture()
def atari(experiment_root: Path) -> Callable[[str], TrainingTask]:
    return lambda mode: _make("atari/qbert-v1", mode, time_budget_s=20.0, grace_s=20.0, episodes=1, max_frames=200,
                              eval_time_limit_s=60.0)


@pytest.mark.parametrize("mode", MODES)
def test_an_atari_policy_cannot_import_the_emulator(atari: Callable[[str], TrainingTask], mode: str) -> None:
    task = atari(mode)
    res = task.evaluate(encode_repo({"train.py": _TRAIN, "policy.py": _policy("    import ale_py")}))
    assert res.status is Status.CRASH and res.score is None, res.feedback
    assert "ModuleNotFoundError raised at policy.py:6" in res.feedback


@pytest.mark.parametrize("mode", MODES)
def test_an_atari_policy_cannot_load_native_code_from_its_checkpoint(atari: Callable[[str], TrainingTask],
                                                                     mode: str) -> None:
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
    ("atari/qbert-v1", True), ("rl/InvertedPendulum-v5-v2", True), ("img/folder-v2", True), ("nanogpt/v2", True),
    ("tabular/csv-v2", False)])
def test_every_training_task_declares_its_scoring_packages(task_id: str, jailed: bool) -> None:
    task = reasearch.make(task_id)
    assert isinstance(task, TrainingTask)
    if jailed:
        assert task.scoring_packages == TORCH_SCORING_PACKAGES
    else:
        assert task.scoring_packages == ()  # nothing of the candidate runs at scoring
    assert not {"ale_py", "mujoco", "gymnasium", "scipy", "numba"} & set(task.scoring_packages)


def _img_model(build: str) -> str:
    return f"""import numpy as np
class M:
    def predict(self, images):
        return np.zeros((len(images), 10))  # class scores (the seed's train.py calls predict too)
def build_model(config, weights):
{build}
    return M()
"""


@pytest.mark.parametrize("mode", MODES)
def test_an_img_model_cannot_import_what_scoring_does_not_need(experiment_root: Path, mode: str) -> None:
    task = _make("img/folder-v2", mode, time_budget_s=30.0, grace_s=10.0, eval_time_limit_s=60.0)
    res = task.evaluate(encode_repo({**task.seed_files(), "model.py": _img_model("    import scipy")}))
    assert res.status is Status.CRASH and res.score is None, res.feedback
    assert "ModuleNotFoundError raised at model.py:6" in res.feedback


@pytest.mark.parametrize("mode", MODES)
def test_an_img_model_cannot_load_a_library_its_repository_carries(experiment_root: Path, mode: str) -> None:
    """A repository holds text only; the library travels base64-encoded and is written to /tmp, then loaded."""
    import base64

    task = _make("img/folder-v2", mode, time_budget_s=30.0, grace_s=10.0, eval_time_limit_s=60.0)
    lib = next((Path(reasearch.__file__).parent / "engine").glob("_zygote*.so")).read_bytes()
    load = ("    import base64, ctypes, os, tempfile\n"
            "    raw = base64.b64decode(open(os.path.join(os.path.dirname(__file__), 'native.b64')).read())\n"
            "    fd, path = tempfile.mkstemp(suffix='.so')\n"
            "    os.write(fd, raw)\n"
            "    ctypes.CDLL(path)")
    res = task.evaluate(encode_repo({**task.seed_files(), "model.py": _img_model(load),
                                     "native.b64": base64.b64encode(lib).decode()}))
    if mode == "nsjail":
        assert res.status is Status.CRASH and res.score is None, res.feedback
        assert "OSError raised at model.py:10" in res.feedback
    else:  # process mode: it loads; the result says noexec was not enforced
        assert res.status is Status.OK, res.feedback
        assert "nothing is mounted noexec" in res.metrics["scoring_jail"]


@pytest.mark.parametrize("mode", MODES)
def test_a_nanogpt_model_cannot_import_what_scoring_does_not_need(experiment_root: Path, mode: str) -> None:
    task = _make("nanogpt/v2", mode, time_budget_s=30.0, grace_s=30.0, eval_tokens=1024, eval_time_limit_s=120.0)
    seed = task.seed_files()["model.py"]
    config = {"block_size": 64, "n_layer": 2, "n_head": 2, "n_embd": 64, "dropout": 0.0}  # the seed's
    assert "def build_model(config" in seed and f"config = {json.dumps(config)}" in task.seed_files()["train.py"]
    files = weights_made_on_the_host(seed, config)  # the seed model's weights: scoring gets as far as build_model
    files["model.py"] += (
        "\n\n_build = build_model\n\n\ndef build_model(*args, **kwargs):\n    import scipy  # training has it\n"
        "    return _build(*args, **kwargs)\n")
    res = task.evaluate(encode_repo(files))
    assert res.metrics.get("train_status") == "OK", res.feedback
    assert res.status is Status.CRASH and res.score is None, res.feedback
    assert "ModuleNotFoundError raised at model.py:" in res.feedback
