"""Scores the own-emulator attack (``atari_own_emulator_policy.py``) against the task's seed, trained under the
same budget, on ``atari/{game}-v1`` (issue 36 item 2: before and after scoring jails bind only their packages).

    python benchmarks/attacks/measure_own_emulator.py --budget 60 --episodes 2 --max-frames 4000

Run it with ``PYTHONPATH`` at the checkout to measure (the policy file is read from beside this script).
Prints one JSON line per candidate: status, score, returns and what the scoring jail held. Heavy: it trains the
seed for ``--budget`` seconds and plays every episode twice; not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import reasearch
from reasearch.evaluators.repo import encode_repo
from reasearch.evaluators.training import TrainingTask

_SAVE = """import json, os
import numpy as np
out = os.environ["REASEARCH_OUT_DIR"]
game = os.environ["REASEARCH_ENV"].split("/")[1].split("-")[0].lower()  # ALE/Qbert-v5 -> qbert
json.dump({"game": game}, open(os.path.join(out, "config.json"), "w"))
np.savez(os.path.join(out, "weights.npz"), w=np.zeros(1))  # no training: the policy brings its own emulator
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--game", default="qbert")
    ap.add_argument("--budget", type=float, default=60.0, help="training seconds of both candidates")
    ap.add_argument("--episodes", type=int, default=2)
    ap.add_argument("--max-frames", type=int, default=4000)
    ap.add_argument("--eval-limit", type=float, default=900.0)
    ap.add_argument("--sandbox-mode", default="auto", choices=("auto", "nsjail", "process"))
    args = ap.parse_args()
    task = reasearch.make(f"atari/{args.game}-v1", time_budget_s=args.budget, episodes=args.episodes,
                          max_frames=args.max_frames, eval_time_limit_s=args.eval_limit,
                          sandbox_mode=args.sandbox_mode)
    assert isinstance(task, TrainingTask)
    attack = (Path(__file__).with_name("atari_own_emulator_policy.py")).read_text()
    for name, files in (("seed", task.seed_files()), ("own_emulator", {"train.py": _SAVE, "policy.py": attack})):
        res = task.evaluate(encode_repo(files))
        m = res.metrics
        print(json.dumps({"candidate": name, "sandbox_mode": args.sandbox_mode, "status": res.status.value,
                          "score": res.score,
                          "returns": m.get("returns"), "env_steps": m.get("env_steps"),
                          "scoring_jail": m.get("scoring_jail", "(not reported)"),
                          "feedback": None if res.ok else res.feedback[:200]}), flush=True)


if __name__ == "__main__":
    main()
