"""The fixed policy server of ``rl/{env}-v1``, run in its own jail: observations in, actions out.

Run as ``python3 _policy_server.py REQUEST_JSON`` (a file path, copied into the scoring folder; played by
:mod:`reasearch.evaluators.rl.episodes`). It loads the weights before any candidate code runs, without
unpickling anything (``weights.npz`` or ``model.pt``: :mod:`reasearch.evaluators._scoring_jail`), imports
the candidate's ``policy.py``, and then answers frames on stdin (8-byte length + an ``.npy`` batch of
observations) with frames on stdout (an ``.npy`` batch of actions). Whatever the candidate prints goes to
stderr (the host log, never shown to the agent). The trusted side steps the environments, checks and clips
the actions, and sums the rewards: this process never sees a reward or a seed.

Candidate code here sees the held-out episodes' observations: when a step fails this harness writes only
``error.json`` (``_scoring_jail.write_report``), checked field by field on the trusted side.
"""

import io
import os
import sys

# From the jail's code copy, before the candidate's repository is on sys.path.
from reasearch.evaluators._scoring_jail import import_candidate, load_config, load_request, load_weights, write_report


def main(request_path: str) -> int:
    out = os.fdopen(os.dup(1), "wb")  # the reply channel; fd 1 becomes stderr for the candidate's prints
    os.dup2(2, 1)
    inp = os.fdopen(0, "rb")
    import numpy as np

    req = load_request(request_path)
    repo, ckpt = req["repo"], req["ckpt"]
    step = "weights"
    try:
        config = load_config(ckpt)
        weights = load_weights(ckpt)
        step = "import"
        candidate = import_candidate(repo, "policy")  # the candidate's policy.py: from here on candidate code runs

        step = "build"
        pol = candidate.build_policy(config, weights)
        while True:
            head = inp.read(8)
            if len(head) < 8:
                return 0
            frame = inp.read(int.from_bytes(head, "big"))
            obs = np.load(io.BytesIO(frame), allow_pickle=False)
            step = "act"
            act = pol.act(obs)
            step = "output"
            buf = io.BytesIO()
            np.save(buf, np.asarray(act, dtype=np.float64), allow_pickle=False)
            data = buf.getvalue()
            out.write(len(data).to_bytes(8, "big") + data)
            out.flush()
    except BaseException as exc:  # noqa: BLE001 - any failure of candidate code is reported the same way
        write_report(req["report"], repo, step, exc)
        return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
