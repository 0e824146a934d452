"""Carrying scikit-learn's digits into an ``img/folder`` repository, against the honestly trained seed.

Usage: ``python scripts/img_carried_data.py TASK_ID [SECRET ...]`` (e.g. ``img/folder-v2 s1 s2 s3``; each
SECRET is used as ``REASEARCH_SECRET``, padded to 16 characters; none: the machine's secret). For the
default data and for ``-p data=digits`` it runs, under the same 30 s budget, the seed and the seed plus a
memory of all 1,797 digits (labels included; base64 of a gzip'ed ``.npz`` in ``memory.py``) whose
``model.py`` answers from memory when an image is in it, and prints one line per run: status, score,
``heldout_public`` and ``sealed``.
"""

from __future__ import annotations

import base64
import gzip
import io
import os
import sys
import tempfile

import numpy as np

import reasearch
from reasearch.evaluators.img._data import read_images
from reasearch.evaluators.repo import encode_repo

MEMORY_MODEL = '''import base64, gzip, io
import numpy as np
from memory import DATA
from seed_model import build_model as build_linear


class Memorizer:
    def __init__(self, linear):
        self.linear = linear
        with np.load(io.BytesIO(gzip.decompress(base64.b64decode(DATA)))) as d:
            self.table = {img.tobytes(): int(k) for img, k in zip(d["images"], d["labels"])}

    def predict(self, images):
        scores = np.asarray(self.linear.predict(images), dtype=np.float64)
        for i, img in enumerate(images):
            k = self.table.get(np.ascontiguousarray(img).tobytes())
            if k is not None:
                scores[i] = -1e9
                scores[i, k] = 1e9
        return scores


def build_model(config, weights):
    return Memorizer(build_linear(config, weights))
'''


def memorizer_files(seed_files: dict[str, str]) -> dict[str, str]:
    """The seed, plus every digit and its label carried in the repository."""
    x, y, _, _ = read_images("digits")
    buf = io.BytesIO()
    np.savez(buf, images=x, labels=y)
    data = base64.b64encode(gzip.compress(buf.getvalue())).decode()
    return {"train.py": seed_files["train.py"].replace("from model import", "from seed_model import"),
            "seed_model.py": seed_files["model.py"], "model.py": MEMORY_MODEL,
            "memory.py": "DATA = (\n" + "\n".join(f"    {data[i:i + 96]!r}" for i in range(0, len(data), 96)) + "\n)\n"}


def main(task_id: str, secrets: list[str]) -> None:
    os.environ.setdefault("REASEARCH_EXPERIMENTS_DIR", tempfile.mkdtemp(prefix="img-carried-"))
    for secret in secrets or [""]:
        if secret:
            os.environ["REASEARCH_SECRET"] = secret.ljust(16, "0")
        for data in ("default", "digits"):
            params = {} if data == "default" else {"data": "digits"}
            task = reasearch.make(task_id, time_budget_s=30.0, **params)
            seed = task.seed_files()  # type: ignore[attr-defined]
            for name, files in (("seed", seed), ("carried digits", memorizer_files(seed))):
                res = task.evaluate(encode_repo(files), seed=0)
                m = res.metrics
                why = "" if res.ok else " " + res.feedback.splitlines()[0][:110]
                print(f"{task_id} secret={secret or '(machine)'} data={data} {name}: {res.status.value} "
                      f"score={res.score} heldout_public={m.get('heldout_public', '-')} sealed={m.get('sealed', '-')}"
                      f"{why}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
