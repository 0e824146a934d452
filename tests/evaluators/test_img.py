"""``img/folder-v2``: the default glyphs (held-out images drawn from the evaluator secret), the public digits,
.npz and image-folder data, the seed, and candidates that carry the public data set, look for the held-out
split, leak it through scoring output, forge a metric or the predictions, or overrun their budget."""

from __future__ import annotations

import base64
import gzip
import importlib.util
import io
import json
import zipfile
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import reasearch
from reasearch.errors import ConfigError
from reasearch.evaluators._secret import fingerprint
from reasearch.evaluators.img import _carried
from reasearch.evaluators.img._data import read_images
from reasearch.evaluators.img.task import ImageFolderTask
from reasearch.evaluators.kinds import ExperimentOptions
from reasearch.evaluators.repo import encode_repo
from reasearch.evaluators.result import EvalResult, Status
from tests.engine.conftest import needs_mode


@pytest.fixture()
def task(experiment_root: Path) -> ImageFolderTask:
    return reasearch.make("img/folder-v2", time_budget_s=30.0, grace_s=10.0, eval_time_limit_s=60.0)  # type: ignore[return-value]


def _attack() -> ModuleType:
    """``scripts/img_carried_data.py``: the carried-digits memorizer, also used to measure it against the seed."""
    spec = importlib.util.spec_from_file_location("img_carried_data",
                                                  Path(__file__).parents[2] / "scripts" / "img_carried_data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


@pytest.fixture(scope="module")
def seed_run(module_experiment_root: Path) -> tuple[ImageFolderTask, EvalResult, Path]:
    """The seed, evaluated once for the tests that only read its result: the task, the result and its experiment
    folder."""
    task = reasearch.make("img/folder-v2", time_budget_s=30.0, grace_s=10.0, eval_time_limit_s=60.0)
    assert isinstance(task, ImageFolderTask)
    exp = module_experiment_root / "seed-exp"
    return task, task.evaluate(task.seed_program(), seed=0, options=ExperimentOptions(str(exp))), exp


def test_the_seed_trains_and_scores_on_the_held_out_glyphs(seed_run: tuple[ImageFolderTask, EvalResult, Path]) -> None:
    task, res, exp = seed_run
    assert res.status is Status.OK, res.feedback
    s = task.split()
    assert (s.n_train, s.n_val, len(s.test_labels), s.shape) == (3600, 400, 1000, (16, 16, 1))
    assert 0.6 < res.score < 0.95 and res.metrics["test_accuracy"] == res.score  # a linear model leaves room
    assert res.metrics["last_step"] == 59 and res.metrics["loss_curve"][0][1] > res.metrics["last_train_loss"]
    assert (exp / "scoring" / "infer.log").is_file() and res.provenance is not None
    assert res.metrics["heldout_public"] is False and res.metrics["sealed"] is True
    assert res.provenance.versions["scoring_secret"] == fingerprint()
    assert sorted(p.name for p in s.public_dir.iterdir()) == ["classes.json", "train.npz", "val.npz"]
    assert np.bincount(s.test_labels).tolist() == [100] * 10  # balanced: every class held out


def test_carrying_the_public_digits_earns_nothing_on_the_default(
        seed_run: tuple[ImageFolderTask, EvalResult, Path]) -> None:
    """The issue's attack: the repository brings scikit-learn's digits (all 1,797, labels included, base64 of a
    gzip'ed .npz) and model.py answers from that memory whenever an image is in it, else from the seed's
    honestly trained model. On ``-v1`` (digits by default) it scored 1.0 against the seed's ~0.91. The
    default's held-out images are drawn from the secret: the memory never answers, the score is the seed's."""
    task, seed, _ = seed_run  # the seed's own result, from the same task and secret
    carried = task.evaluate(encode_repo(_attack().memorizer_files(task.seed_files())), seed=0)
    assert seed.status is Status.OK and carried.status is Status.OK, carried.feedback
    assert carried.score <= seed.score, (carried.score, seed.score)
    for res in (seed, carried):
        assert res.metrics["heldout_public"] is False and res.metrics["sealed"] is True


def test_a_repository_carrying_the_public_digits_is_invalid(experiment_root: Path) -> None:
    """``data=digits`` is public: its results say so and never claim sealed, and a repository that brings the
    held-out images along (raw or compressed, as pixels or scikit-learn's 0..16 counts) is refused before
    it trains, with the reason."""
    task = reasearch.make("img/folder-v2", data="digits", time_budget_s=30.0)
    seed_files = task.seed_files()  # type: ignore[attr-defined]
    x, y, _, _ = read_images("digits")
    counts = (x // 15).reshape(len(x), -1)
    csv = "\n".join(",".join(map(str, row)) + f",{k}" for row, k in zip(counts.tolist(), y.tolist(), strict=True))
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("digits.csv", csv)
    floats = io.BytesIO()
    np.save(floats, counts.astype(np.float64))
    carried = {
        "the memorizer (base64 of a gzip'ed .npz)": _attack().memorizer_files(seed_files),
        "scikit-learn's CSV, as text": {"digits.csv": csv},
        "a Python list of the pixels": {"data.py": "X = " + repr(x.reshape(len(x), -1).tolist())},
        "hex of the raw pixels": {"data.py": f"X = bytes.fromhex({x.tobytes().hex()!r})"},
        "base85 of a zip of the CSV": {"data.py": f"Z = {base64.b85encode(zipped.getvalue()).decode()!r}"},
        "base64 of an xz'ed float .npy": {"blob.txt": base64.b64encode(__import__("lzma").compress(
            floats.getvalue())).decode()},
    }
    for how, files in carried.items():
        res = task.evaluate(encode_repo({**seed_files, **files}))
        assert res.status is Status.INVALID and res.score is None, (how, res.status, res.feedback[:200])
        assert "carries held-out images" in res.feedback, (how, res.feedback[:300])
        assert res.metrics["heldout_public"] is True and res.metrics["sealed"] is False
    # an expansion bomb cannot hide them: past the cap, the repository is refused as uncheckable
    bomb = base64.b64encode(gzip.compress(b"\0" * (_carried.MAX_EXPANDED + 1))).decode()
    res = task.evaluate(encode_repo({**seed_files, "blob.txt": bomb}))
    assert res.status is Status.INVALID and "too much to check" in res.feedback
    # the honest seed, with random bytes and numbers beside it, is scored, and says its data is public
    rng = np.random.default_rng(1)
    noise = {"noise.txt": base64.b64encode(rng.integers(0, 256, 200_000, dtype=np.uint8).tobytes()).decode(),
             "noise.csv": ",".join(map(str, rng.integers(0, 17, 50_000).tolist()))}
    assert _carried.find_carried_images({**seed_files, **noise}, task.split().test_images) is None  # type: ignore[attr-defined]
    res = task.evaluate(task.seed_program())
    assert res.status is Status.OK and res.metrics["data"] == "digits", res.feedback
    assert res.metrics["heldout_public"] is True and res.metrics["sealed"] is False and "PUBLIC" in res.feedback


def test_the_held_out_glyphs_come_from_the_secret(experiment_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The problem is the same on every machine (one public training pool, one generator); the secret picks
    only which held-out images are drawn, so none of them is in any public file."""
    splits = []
    for key in ("a" * 16, "b" * 16):
        monkeypatch.setenv("REASEARCH_SECRET", key)
        splits.append(reasearch.make("img/folder-v2").split())  # type: ignore[attr-defined]
    one, two = splits
    assert one.public_dir == two.public_dir and one.shape == two.shape == (16, 16, 1)
    assert not np.array_equal(one.test_images, two.test_images)
    assert np.bincount(one.test_labels).tolist() == np.bincount(two.test_labels).tolist()
    with np.load(one.public_dir / "train.npz") as d:
        public = d["images"].tobytes()
    assert all(img.tobytes() not in public for img in one.test_images[:50])


def test_npz_and_folder_data(experiment_root: Path, tmp_path: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (60, 6, 5, 3), dtype=np.uint8)
    y = np.arange(60) % 3
    np.savez(tmp_path / "d.npz", images=x, labels=y)
    s = reasearch.make("img/folder-v2", data=str(tmp_path / "d.npz")).split()  # type: ignore[attr-defined]
    assert s.shape == (6, 5, 3) and len(s.test_labels) == 12 and s.classes == ("0", "1", "2")
    assert s.heldout_public is False  # the user's own data stays sealed
    for c in ("cat", "dog"):
        (tmp_path / "imgs" / c).mkdir(parents=True)
        for i in range(12):
            Image.fromarray(rng.integers(0, 255, (7 + i % 2, 7), dtype=np.uint8)).save(
                tmp_path / "imgs" / c / f"{i}.png"
            )
    with pytest.raises(ConfigError, match="several sizes"):
        reasearch.make("img/folder-v2", data=str(tmp_path / "imgs")).split()  # type: ignore[attr-defined]
    s = reasearch.make("img/folder-v2", data=str(tmp_path / "imgs"), image_size=4).split()  # type: ignore[attr-defined]
    assert s.classes == ("cat", "dog") and s.shape == (4, 4, 1) and s.n_train + s.n_val + len(s.test_labels) == 24
    np.savez(tmp_path / "obj.npz", images=np.array([object()] * 30, dtype=object), labels=np.zeros(30, int))
    for data, words in ((str(tmp_path / "obj.npz"), "pickled"), ("/nonexistent", "data must be"),
                        (str(tmp_path / "d.npz") + "x", "data must be")):
        with pytest.raises(ConfigError, match=words):
            reasearch.make("img/folder-v2", data=data).split()  # type: ignore[attr-defined]


def test_a_forged_metric_is_ignored(task: ImageFolderTask) -> None:
    res = task.evaluate(_repo(task, **{"train.py": _CONST_TRAIN,
                                       "model.py": _model("        return np.zeros(len(images), dtype=np.int64)")}))
    assert res.status is Status.OK
    assert res.score == pytest.approx(float(np.mean(task.split().test_labels == 0))) and res.score < 0.2


def test_scoring_output_never_reaches_the_feedback(task: ImageFolderTask, tmp_path: Path) -> None:
    leak = ("        print('PIXELS', images[0].ravel().tolist(), flush=True)\n"
            "        raise ValueError('SECRET-' + ','.join(map(str, images[0].ravel().tolist())))")
    res = task.evaluate(_repo(task, **{"train.py": _CONST_TRAIN, "model.py": _model(leak)}),
                        options=ExperimentOptions(str(tmp_path / "exp")))
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
    body = (f"        import atexit, os, sys\n        n = {len(task.split().test_labels)}\n"
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
    t = reasearch.make("img/folder-v2", time_budget_s=0.5, grace_s=0.5)
    res = t.evaluate(encode_repo({"train.py": "import time\ntime.sleep(30)\n"}))
    assert res.status is Status.TIMEOUT and res.score is None


def test_training_cannot_find_the_held_out_images(task: ImageFolderTask) -> None:
    needs_mode("nsjail")
    s = task.split()
    # three held-out images in a row (in no public file), XOR-masked: the repository check refuses them plain
    signature = bytes(b ^ 0x5A for b in s.test_images[:3].tobytes()).hex()
    probe = f'''import os, sys
sig = bytes(b ^ 0x5A for b in bytes.fromhex({signature!r}))
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
    assert bytes(b ^ 0x5A for b in bytes.fromhex(signature)) in s.test_images.tobytes()


def test_describe_and_parameters(task: ImageFolderTask) -> None:
    text = task.describe()
    for words in ("train.py", "model.py", "build_model(config, weights)", "predict", "weights.npz", "accuracy"):
        assert words in text
    with pytest.raises(ValueError, match="test_frac"):
        _ = reasearch.make("img/folder-v2", test_frac=0.9).spec
    assert json.loads((task.split().public_dir / "classes.json").read_text())["shape"] == [16, 16, 1]
    assert "PUBLIC" in reasearch.make("img/folder-v2", data="digits").describe()
    with pytest.raises(ConfigError, match="image_size"):
        reasearch.make("img/folder-v2", image_size=8).split()  # type: ignore[attr-defined]
    with pytest.raises(Exception, match="Did you mean 'img/folder-v2'"):
        reasearch.make("img/folder-v1")
