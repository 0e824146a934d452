"""The carried-data policy against the honestly trained seed, same budget (issue 36 item 1). Not part of the suite.

Run from the repository root, in the venv (CPU slots; a few minutes per policy on a busy machine):

    REASEARCH_FAKE_GPUS=0 REASEARCH_CPUS_PER_SLOT=1 python scripts/nanogpt_carried_data.py \\
        [--task nanogpt/v2] [--corpus generated|shakespeare] [--budget 60] [--steps N] [--policies carry,trainonly,seed]

Policies: ``carry`` (the repository brings tiny Shakespeare along; train.py memorizes it and the training
split as an exact 16-byte-context lookup, no gradient step: the attack that scored v1's default), ``trainonly``
(the same lookup of the training split alone), ``seed`` (the seed repository, trained; ``--steps`` caps its
steps so scores under different secrets compare without the machine's load). ``--ngram`` prints instead an
order-4 Witten-Bell model's held-out bits per byte fitted on the training split, on carried Shakespeare, and on
both, for the task's corpus (host side, no jail). One JSON line per result. Set ``REASEARCH_SECRET`` to score
under another secret. For v1 (before), run the same file against a v1 checkout with ``--task nanogpt/v1``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import reasearch  # noqa: E402
from reasearch.evaluators.nanogpt._data import packaged_corpus_bytes  # noqa: E402
from reasearch.evaluators.repo import encode_repo  # noqa: E402
from tests.evaluators.test_training_hostile import MEMORIZER_MODEL  # noqa: E402

CARRY = r'''
import json, os, numpy as np, torch
K = 16
out, data_dir = os.environ["REASEARCH_OUT_DIR"], os.environ["REASEARCH_DATA_DIR"]
blobs = [open(p, "rb").read() for p in CARRIED] + [open(os.path.join(data_dir, "train.bin"), "rb").read()]
keys_l, vals_l = [], []
for b in blobs:
    a = np.frombuffer(b, dtype=np.uint8).astype(np.int64)
    n = len(a) - K
    lo = sum(a[j:j + n] << (8 * j) for j in range(8)); hi = sum(a[8 + j:8 + j + n] << (8 * j) for j in range(8))
    keys_l.append(((lo * -7046029254386353131) ^ (hi * -4417276706812531889)) >> 32 & 0xFFFFFFFF)
    vals_l.append(a[K:K + n])
keys = np.concatenate(keys_l); vals = np.concatenate(vals_l)
u, first = np.unique(keys, return_index=True)  # first writer wins: the carried text before the training split
json.dump({"block_size": 1024, "n": int(len(u))}, open(os.path.join(out, "config.json"), "w"))
torch.save({"keys": torch.from_numpy(u), "vals": torch.from_numpy(vals[first].astype(np.uint8))},
           os.path.join(out, "model.pt"))
print(json.dumps({"memorized": int(len(u))}), flush=True)
'''


def lookup_repo(carry_text: bool) -> str:
    files = {"model.py": MEMORIZER_MODEL}
    if carry_text:
        files["shakespeare.txt"] = packaged_corpus_bytes().decode("utf-8")
    files["train.py"] = f"CARRIED = {['shakespeare.txt'] if carry_text else []!r}\n" + CARRY
    return encode_repo(files)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="nanogpt/v2")
    ap.add_argument("--corpus", default=None)
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--eval-tokens", type=int, default=16384)
    ap.add_argument("--policies", default="carry,trainonly,seed")
    ap.add_argument("--ngram", action="store_true")
    args = ap.parse_args()
    params = {"time_budget_s": args.budget, "grace_s": 30.0, "eval_tokens": args.eval_tokens,
              "eval_time_limit_s": 300.0, **({"corpus": args.corpus} if args.corpus else {})}
    task = reasearch.make(args.task, **params)
    if args.ngram:
        from tests.evaluators.test_nanogpt_heldout import ngram_bpb

        corpus = task._corpus()  # type: ignore[attr-defined]
        train, held_out = (corpus.train_dir / "train.bin").read_bytes(), corpus.val().tobytes()
        shk = packaged_corpus_bytes()
        print(json.dumps({"task": args.task, "corpus": corpus.name,
                          "ngram_bpb_train": round(ngram_bpb(train, held_out), 4),
                          "ngram_bpb_carried_shakespeare": round(ngram_bpb(shk, held_out), 4),
                          "ngram_bpb_both": round(ngram_bpb(train + shk, held_out), 4)}))
        return 0

    def seed() -> str:
        files = task.seed_files()  # type: ignore[attr-defined]
        if args.steps:
            files["train.py"] = files["train.py"].replace("max_steps = None", f"max_steps = {args.steps}")
        return encode_repo(files)

    policies = {"carry": lambda: lookup_repo(True), "trainonly": lambda: lookup_repo(False), "seed": seed}
    for name in args.policies.split(","):
        t0 = time.time()
        res = task.evaluate(policies[name](), seed=0)
        m = dict(res.metrics or {})
        print(json.dumps({"task": args.task, "corpus": m.get("corpus", args.corpus), "policy": name,
                          "status": res.status.value, "val_bpb": res.score, "sealed": m.get("sealed"),
                          "heldout_public": m.get("heldout_public"), "train_s": m.get("train_s"),
                          "wall_s": round(time.time() - t0, 1),
                          "why": "" if res.status.value == "OK" else res.feedback.splitlines()[0][:200]}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
