"""``img/folder-v1``: the bundled digits, .npz and image-folder data, the seed, and candidates that look for the
held-out split, leak it through scoring output, forge a metric or the predictions, or overrun their budget."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import reasearch
from reasearch.errors import ConfigError
from reasearch.evaluators.img.task import ImageFolderTask
from reasearch.evaluators.repo import encode_repo
from reasearch.evaluators.result import Status
from tests.engine.conftest import needs_mode


@pytest.fixture()
def task(experiment_root: Path) -> ImageFolderTask:
    return reasearch.make("img/folder-v1", time_budget_s=30.0, grace_s=10.0, eval_time_limit_s=60.0)  # type: ignore[return-value]


def _repo(task: ImageFolderTask, **files: str) -> str:
    return encode_repo({**task.seed_files(), **files})


_CONST_TRAIN = """import json, os
import numpy as np
out = os.environ["REASEARCH_OUT_DIR"]
print(json.dumps({"step": 0, "loss": 0.0, "test_accuracy": 1.0}))
json.dump({}, open(os.path.join(out, "config.json"), "w"))
np.savez(os.path.join(out, "weights.npz"), w=np.zeros(1))
"""


def _model(predict_body: str, extra: str = "") -> str:
    return f"""import numpy as np
{extra}
class M:
    def predict(self, images):
{predict_body}
def build_model(config, weights):
    return M()
"""


def test_the_seed_trains_and_scores_on_the_held_out_digits(task: ImageFolderTask, tmp_path: Path) -> None:
    res = task.evaluate(task.seed_program(), seed=0, experiment_dir=str(tmp_path / "exp"))
    assert res.status is Status.OK, res.feedback
    s = task.split()
    assert (s.n_train, s.n_val, len(s.test_labels), s.shape) == (1295, 143, 359, (8, 8, 1))
    assert 0.85 < res.score <= 1.0 and res.metrics["test_accuracy"] == res.score
    assert res.metrics["last_step"] == 59 and res.metrics["loss_curve"][0][1] > res.metrics["last_train_loss"]
    assert (tmp_path / "exp" / "scoring" / "infer.log").is_file() and res.provenance is not None
    assert sorted(p.name for p in s.public_dir.iterdir()) == ["classes.json", "train.npz", "val.npz"]
    assert np.bincount(s.test_labels).min() >= 34  # stratified: every class held out


def test_npz_and_folder_data(experiment_root: Path, tmp_path: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (60, 6, 5, 3), dtype=np.uint8)
    y = np.arange(60) % 3
    np.savez(tmp_path / "d.npz", images=x, labels=y)
    s = reasearch.make("img/folder-v1", data=str(tmp_path / "d.npz")).split()  # type: ignore[attr-defined]
    assert s.shape == (6, 5, 3) and len(s.test_labels) == 12 and s.classes == ("0", "1", "2")
    for c in ("cat", "dog"):
        (tmp_path / "imgs" / c).mkdir(parents=True)
        for i in range(12):
            Image.fromarray(rng.integers(0, 255, (7 + i % 2, 7), dtype=np.uint8)).save(
                tmp_path / "imgs" / c / f"{i}.png"
            )
    with pytest.raises(ConfigError, match="several sizes"):
        reasearch.make("img/folder-v1", data=str(tmp_path / "imgs")).split()  # type: ignore[attr-defined]
    s = reasearch.make("img/folder-v1", data=str(tmp_path / "imgs"), image_size=4).split()  # type: ignore[attr-defined]
    assert s.classes == ("cat", "dog") and s.shape == (4, 4, 1) and s.n_train + s.n_val + len(s.test_labels) == 24
    np.savez(tmp_path / "obj.npz", images=np.array([object()] * 30, dtype=object), labels=np.zeros(30, int))
    for data, words in ((str(tmp_path / "obj.npz"), "pickled"), ("/nonexistent", "data must be"),
                        (str(tmp_path / "d.npz") + "x", "data must be")):
        with pytest.raises(ConfigError, match=words):
            reasearch.make("img/folder-v1", data=data).split()  # type: ignore[attr-defined]


def test_a_forged_metric_is_ignored(task: ImageFolderTask) -> None:
    res = task.evaluate(_repo(task, **{"train.py": _CONST_TRAIN,
                                       "model.py": _model("        return np.zeros(len(images), dtype=np.int64)")}))
    assert res.status is Status.OK
    assert res.score == pytest.approx(float(np.mean(task.split().test_labels == 0))) and res.score < 0.2


def test_scoring_output_never_reaches_the_feedback(task: ImageFolderTask, tmp_path: Path) -> None:
    leak = ("        print('PIXELS', images[0].ravel().tolist(), flush=True)\n"
            "        raise ValueError('SECRET-' + ','.join(map(str, images[0].ravel().tolist())))")
    res = task.evaluate(_repo(task, **{"train.py": _CONST_TRAIN, "model.py": _model(leak)}),
                        experiment_dir=str(tmp_path / "exp"))
    assert res.status is Status.CRASH and res.score is None
    assert "ValueError raised at model.py:6, during model.predict" in res.feedback, res.feedback
    assert "PIXELS" not in res.feedback and "SECRET" not in res.feedback
    assert "SECRET" in (tmp_path / "exp" / "scoring" / "infer.log").read_text()  # kept for a person
    # an exception class named after the data, and a forged report naming a made-up class and file
    named = "        raise type('Leak' + str(int(images.sum())), (KeyError,), {})()"
    res = task.evaluate(_repo(task, **{"train.py": _CONST_TRAIN, "model.py": _model(named)}))
    assert "KeyError (a subclass of it) raised at model.py:5" in res.feedback and "Leak" not in res.feedback
    forged = ("        import sys, os\n        p = json.load(open(sys.argv[1]))['report']\n"
              "        s = str(int(images.sum()))\n"
              "        json.dump({'step': s, 'type': 'Leak' + s, 'where': [s + '.py', 1]}, open(p, 'w'))\n"
              "        os._exit(3)")
    res = task.evaluate(_repo(task, **{"train.py": _CONST_TRAIN, "model.py": _model(forged, "import json")}))
    assert res.status is Status.CRASH and "an exception raised outside your repository" in res.feedback
    assert str(int(task.split().test_images[:256].sum())) not in res.feedback


@pytest.mark.parametrize("case", ["symlink", "fifo", "pickle"])
def test_forged_predictions_end_without_a_score(task: ImageFolderTask, case: str) -> None:
    make = {"symlink": "os.symlink('/etc/passwd', p)", "fifo": "os.mkfifo(p)",
            "pickle": "np.save(p, np.array([object()] * n, dtype=object), allow_pickle=True)"}[case]
    body = ("        import atexit, os, sys\n        n = 359\n"
            "        p = json.load(open(sys.argv[1]))['out']\n"
            f"        atexit.register(lambda: (os.path.lexists(p) and os.unlink(p), {make}))\n"
            "        return np.zeros(len(images), dtype=np.int64)")
    res = task.evaluate(_repo(task, **{"train.py": _CONST_TRAIN, "model.py": _model(body, "import json")}))
    assert res.status is Status.INVALID and res.score is None and "predictions" in res.feedback, res.feedback


def test_a_pickled_checkpoint_is_never_unpickled(task: ImageFolderTask, tmp_path: Path) -> None:
    marker = tmp_path / "RAN"
    train = f"""import json, os, pickle
import numpy as np
class P:
    def __reduce__(self):
        return (open, ({str(marker)!r}, "w"))
out = os.environ["REASEARCH_OUT_DIR"]
json.dump({{}}, open(os.path.join(out, "config.json"), "w"))
np.savez(os.path.join(out, "weights.npz"), w=np.array([P()], dtype=object))
"""
    res = task.evaluate(_repo(task, **{"train.py": train}))
    assert (
        res.status is Status.CRASH and "ValueError raised" in res.feedback and "loading the checkpoint" in res.feedback
    )
    assert not marker.exists()


def test_a_training_run_past_its_budget_gets_no_score(experiment_root: Path) -> None:
    t = reasearch.make("img/folder-v1", time_budget_s=0.5, grace_s=0.5)
    res = t.evaluate(encode_repo({"train.py": "import time\ntime.sleep(30)\n"}))
    assert res.status is Status.TIMEOUT and res.score is None


def test_training_cannot_find_the_held_out_images(task: ImageFolderTask) -> None:
    needs_mode("nsjail")
    s = task.split()
    signature = s.test_images[:3].tobytes().hex()  # three held-out images in a row: in no public file
    probe = f'''import os, sys
sig = bytes.fromhex({signature!r})
skip = ("/proc", "/sys", "/dev", "/usr", "/lib", "/bin", "/sbin", sys.prefix)
seen = found = 0
for root, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if not os.path.join(root, d).startswith(skip)]
    for f in files:
        p = os.path.join(root, f)
        if f == "digits.npz":
            print("FOUND", p)
        try:
            if os.path.islink(p) or os.path.getsize(p) > (8 << 20):
                continue
            data = open(p, "rb").read()
        except OSError:
            continue
        seen += 1
        if sig in data:
            found += 1
            print("FOUND", p)
print("SEARCHED", seen, "FOUND", found)
'''
    res = task.evaluate(encode_repo({"train.py": probe}))
    assert res.status is Status.INVALID and "config.json" in res.feedback
    assert "FOUND 0" in res.feedback and "FOUND /" not in res.feedback, res.feedback[-2000:]
    assert int(res.feedback.split("SEARCHED ", 1)[1].split()[0]) >= 3
    # the signature is a real one: it is in the held-out images the scoring jail receives
    assert bytes.fromhex(signature) in s.test_images.tobytes()


def test_describe_and_parameters(task: ImageFolderTask) -> None:
    text = task.describe()
    for words in ("train.py", "model.py", "build_model(config, weights)", "predict", "weights.npz", "accuracy"):
        assert words in text
    with pytest.raises(ValueError, match="test_frac"):
        _ = reasearch.make("img/folder-v1", test_frac=0.9).spec
    assert json.loads((task.split().public_dir / "classes.json").read_text())["shape"] == [8, 8, 1]
