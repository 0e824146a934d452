"""The image task's held-out split watched where it could cross to the agent, in both sandbox modes: a
model whose ``predict`` (run by the scoring jail on the held-out images) prints them and raises with them
in the message. Nothing of those images may be in the result (feedback, metrics, solution) or in what the
agent's experiment tools show of it. The held-out content is read from the task's own split, whichever
data set is the default."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reasearch
from reasearch.evaluators.kinds import ExperimentOptions
from reasearch.evaluators.repo import encode_repo
from reasearch.evaluators.result import Status
from tests.engine.conftest import MODES, needs_mode

TRAIN = """import json, os
import numpy as np
out = os.environ["REASEARCH_OUT_DIR"]
json.dump({}, open(os.path.join(out, "config.json"), "w"))
np.savez(os.path.join(out, "weights.npz"), w=np.zeros(1))
"""

LEAKING_MODEL = """import numpy as np
class M:
    def predict(self, images):
        flat = [np.asarray(im).ravel().tolist() for im in images[:4]]
        print('HELD-OUT', flat, np.asarray(images[:4]).tobytes().hex(), flush=True)
        raise ValueError('HELD-OUT ' + repr(flat))
def build_model(config, weights):
    return M()
"""


def _held_out_forms(images: np.ndarray) -> list[str]:
    """Distinctive runs of the first held-out images as a model could print them (list text, hex)."""
    forms = []
    for im in images[:4]:
        flat = np.asarray(im).ravel()
        for a in range(0, max(len(flat) - 12, 1), 6):
            run = flat[a:a + 12]
            if len(set(run.tolist())) < 3:  # a flat stretch (a border) is no evidence of a leak
                continue
            forms += [repr(run.tolist())[1:-1], ",".join(map(str, run.tolist())), run.tobytes().hex()]
    return forms


@pytest.mark.parametrize("mode", MODES)
def test_held_out_images_printed_or_raised_in_scoring_never_reach_the_agent(mode: str, experiment_root: Path,
                                                                             tmp_path: Path) -> None:
    from reasearch.agent.tools.experiment_runner import experiment_payload

    needs_mode(mode)
    task: Any = reasearch.make("img/folder-v2", time_budget_s=30.0, grace_s=10.0, eval_time_limit_s=60.0,
                               sandbox_mode=mode)
    res = task.evaluate(encode_repo({**task.seed_files(), "train.py": TRAIN, "model.py": LEAKING_MODEL}),
                        seed=0, options=ExperimentOptions(str(tmp_path / "exp")))
    assert res.status is Status.CRASH and res.score is None, res.feedback
    assert "ValueError raised at model.py:6, during model.predict" in res.feedback, res.feedback
    shown = json.dumps([res.to_dict(), experiment_payload({"candidate": "c", "description": "d"}, 1, res)])
    forms = _held_out_forms(task.split().test_images)
    assert len(forms) >= 12, "the held-out images gave too few distinctive runs to look for"
    assert "HELD-OUT" not in shown and [f for f in forms if f in shown] == []
    # positive control: the model really had the held-out images (its log, kept on the host for a person)
    logs = "".join(p.read_text() for p in Path(str(res.metrics["scoring_log_dir"])).glob("*.log"))
    assert "HELD-OUT" in logs and any(f in logs for f in forms)
