"""``nanogpt/v2``: the seed trains and scores; models that peek, mix batch rows, smuggle pickles or read
the validation split are caught. Tiny budgets on CPU (each experiment is a few seconds of training)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import reasearch
from reasearch.evaluators.kinds import ExperimentOptions
from reasearch.evaluators.nanogpt.task import NanoGPTTask, bits_per_byte
from reasearch.evaluators.repo import decode_repo, encode_repo
from reasearch.evaluators.result import Status
from tests.engine.conftest import needs_mode
from tests.evaluators.conftest import weights_made_on_the_host


@pytest.fixture(scope="module")
def task() -> NanoGPTTask:
    import os

    os.environ.setdefault("REASEARCH_FAKE_GPUS", "0")  # CPU slots, whatever the machine has
    os.environ.setdefault("REASEARCH_CPUS_PER_SLOT", "1")  # one torch thread: no spinning OpenMP on busy cores
    # The default corpus: a public generator's text sampled under the evaluator secret (sealed).
    return reasearch.make("nanogpt/v2", time_budget_s=30.0, grace_s=30.0, eval_tokens=1024,
                          eval_time_limit_s=120.0)  # type: ignore[return-value]


def _with(task: NanoGPTTask, **replace: str) -> str:
    files = task.seed_files()
    files.update(replace)
    return encode_repo(files)


def _train_py(task: NanoGPTTask, old: str, new: str) -> str:
    text = task.seed_files()["train.py"]
    assert old in text
    return text.replace(old, new)


def test_the_seed_trains_and_scores_better_than_uniform(task: NanoGPTTask, tmp_path: Path) -> None:
    # A step cap keeps the test independent of the machine's load; the budget stays the hard bound.
    res = task.evaluate(_with(task, **{"train.py": _train_py(task, "max_steps = None", "max_steps = 25")}), seed=0,
                        options=ExperimentOptions(str(tmp_path / "exp")))
    assert res.status is Status.OK, res.feedback
    assert res.score is not None and 3.0 < res.score < 8.0  # untrained: 8 bits per byte
    m = res.metrics
    assert m["val_bpb"] == res.score and m["eval_tokens"] == 1024 and m["block_size"] == 64
    assert m["causality_max_diff"] <= 1e-3
    assert m["last_step"] is not None and m["metric_lines"] >= 1 and m["train_s"] > 0
    assert m["corpus"] == "generated" and m["sealed"] is True and m["heldout_public"] is False
    assert "NOT SEALED" not in res.feedback
    assert m["data_sha256"] == task._corpus().sha256  # this machine's sample (it depends on the secret)
    assert res.provenance.versions["corpus_sha256"] == m["data_sha256"]
    assert res.provenance.versions["corpus_sealed"] == "true"
    assert res.provenance.versions["corpus_heldout_public"] == "false"
    assert m["log_path"] == str(tmp_path / "exp" / "train.log") and '"step": 0' in Path(m["log_path"]).read_text()
    assert res.provenance is not None and res.provenance.task_id == "nanogpt/v2"
    assert res.provenance.params["corpus"] == "generated"
    assert task.evaluation_costs(res) == {"experiments": 1.0, "gpu_seconds": 0.0}  # a CPU slot


def test_bits_per_byte_is_the_cross_entropy_in_bits() -> None:
    logits = np.zeros((2, 3, 256), dtype=np.float32)
    targets = np.array([[1, 2, 3], [4, 5, 6]])
    assert bits_per_byte(logits, targets) == pytest.approx(8.0)
    logits[..., :] = -30.0
    np.put_along_axis(logits, targets[..., None], 30.0, axis=-1)
    assert bits_per_byte(logits, targets) < 1e-6


PEEKING_MODEL = '''
import torch, torch.nn as nn, torch.nn.functional as F
class Peek(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(20.0))
    def forward(self, idx):
        nxt = torch.roll(idx, -1, dims=1)  # the byte it must predict: looking ahead
        return F.one_hot(nxt, 256).float() * self.scale
def build_model(config):
    return Peek()
'''

BATCH_MIXING_MODEL = '''
import torch, torch.nn as nn
class Mix(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(256, 256)
    def forward(self, idx):
        out = self.emb(idx)
        return out + out.mean(dim=0, keepdim=True).mean(dim=1, keepdim=True)  # every row sees every other row
def build_model(config):
    return Mix()
'''

@pytest.mark.parametrize("model, reason", [(PEEKING_MODEL, "causality check failed"),
                                           (BATCH_MIXING_MODEL, "causality check failed")])
def test_a_model_that_sees_later_bytes_is_invalid(task: NanoGPTTask, model: str, reason: str) -> None:
    res = task.evaluate(encode_repo(weights_made_on_the_host(model, {"block_size": 32})), seed=0)
    assert res.status is Status.INVALID, res.feedback
    assert reason in res.feedback and res.score is None


def test_a_pickled_payload_is_never_unpickled(task: NanoGPTTask) -> None:
    class Boom:  # torch.save pickles what this returns: a call of print, run by whoever unpickles the file
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (print, ("PAYLOAD-RAN-" + "ON-LOAD",))

    files = weights_made_on_the_host(task.seed_files()["model.py"], {"block_size": 64}, state={"tok.weight": Boom()})
    res = task.evaluate(encode_repo(files), seed=0)
    assert res.status is not Status.OK and res.score is None
    assert "PAYLOAD-RAN-ON-LOAD" not in res.feedback
    assert "weights_only" in res.feedback.lower() or "unsupported" in res.feedback.lower(), res.feedback[-2000:]


def test_training_cannot_read_the_validation_split(task: NanoGPTTask) -> None:
    needs_mode("nsjail")
    val = task._corpus().val_path
    probe = f'''
import os
for path in ({str(val)!r}, {str(val.parent)!r}):
    try:
        open(path, "rb").read(10) if path.endswith(".bin") else os.listdir(path)
        print("LEAK", path)
    except OSError as exc:
        print("DENIED", path, type(exc).__name__)
try:
    print("CORPUS-DIR", sorted(os.listdir({str(val.parent.parent)!r})))  # the data dir's parent: a mount point only
except OSError as exc:
    print("CORPUS-DIR", type(exc).__name__)
print("DATA-DIR", sorted(os.listdir(os.environ["REASEARCH_DATA_DIR"])))
'''
    res = task.evaluate(_with(task, **{"train.py": probe}), seed=0)
    assert res.status is Status.INVALID and "saved no config.json" in res.feedback
    assert "LEAK" not in res.feedback and res.feedback.count("DENIED") == 2
    assert "private" not in res.feedback.split("CORPUS-DIR", 1)[1].split("\n", 1)[0]
    assert "DATA-DIR ['train.bin']" in res.feedback


@pytest.mark.parametrize("candidate, status, words", [
    (encode_repo({"model.py": "x = 1\n"}), Status.INVALID, "no train.py"),
    ('{"format": "reasearch-repo/1", "files": {"../escape.py": "x"}}', Status.INVALID, "bad repository path"),
    ('{"format": "reasearch-repo/9", "files": {}}', Status.INVALID, "unknown repository manifest format"),
    ("import sys\nsys.exit(4)\n", Status.CRASH, "exit code 4"),
    ("print('trained nothing')\n", Status.INVALID, "saved no config.json"),
])
def test_broken_candidates_get_a_status_and_a_reason(task: NanoGPTTask, candidate: str, status: Status,
                                                     words: str) -> None:
    res = task.evaluate(candidate, seed=0)
    assert res.status is status and words in res.feedback, res.feedback[-1500:]


def test_config_and_logits_are_validated_on_the_trusted_side(task: NanoGPTTask, tmp_path: Path) -> None:
    for text, words in [("[1, 2]", "JSON object"), ('{"block_size": 0}', "int block_size"),
                        ('{"block_size": true}', "int block_size"), ("{", "not valid JSON")]:
        (tmp_path / "config.json").write_text(text)
        out = task._read_config(tmp_path)
        assert isinstance(out, str) and words in out
    (tmp_path / "config.json").unlink()
    (tmp_path / "config.json").symlink_to("/etc/passwd")
    assert "no config.json" in str(task._read_config(tmp_path))
    _, targets = task.windows(task._corpus().val(), 16)
    bad = np.zeros((*targets.shape, 256), dtype=np.float32)
    bad[0, 0, 0] = np.nan
    assert task.score_solution({"logits": bad, "block_size": 16}).status is Status.INVALID
    assert task.score_solution({"logits": bad[:, :8], "block_size": 16}).status is Status.INVALID
    ok = task.score_solution({"logits": np.zeros_like(bad), "block_size": 16})
    assert ok.ok and ok.score == pytest.approx(8.0)


def test_the_manifest_is_canonical_and_round_trips(task: NanoGPTTask) -> None:
    text = task.seed_program()
    again = decode_repo(text)
    assert encode_repo(again.files) == text and set(again.files) == {"model.py", "train.py"}
    assert json.loads(text)["format"] == "reasearch-repo/1"
    assert decode_repo(encode_repo(again.files, time_budget_s=7)).time_budget_s == 7.0
    assert math.isclose(task.experiment_budget(decode_repo(encode_repo(again.files, time_budget_s=1e9))),
                        task.params.max_time_budget_s)


def test_the_causality_probe_differs_only_from_the_cut_even_at_byte_255() -> None:
    # Regression: a window whose donor tail is identical (a repeated corpus) gets its tail shifted by one;
    # that shift used to overflow on uint8 255 and crashed evaluation at random (the cut and donor are random).
    inputs = np.full((3, 8), 255, dtype=np.uint8)
    inputs[1] = np.arange(250, 258) % 256
    cuts = np.array([1, 4, 7])
    donors = np.array([2, 1, 0])  # window 1 is its own donor: the next window is used instead
    probe = NanoGPTTask.causality_probe(inputs, cuts, donors)
    assert probe.dtype == np.uint8
    for i, c in enumerate(cuts):
        assert np.array_equal(probe[i, :c], inputs[i, :c])
        assert not np.array_equal(probe[i, c:], inputs[i, c:])
    assert np.array_equal(probe[0, 1:], np.zeros(7, dtype=np.uint8))  # 255 + 1 wraps to 0
