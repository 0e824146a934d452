"""The fixed policy server of ``rl/{env}-v1``, run in its own jail: observations in, actions out.

Run as ``python3 _policy_server.py REQUEST_JSON`` (a file path: no package import in the jail). It imports
the candidate's ``policy.py``, loads the weights without unpickling anything (``weights.npz`` with
``allow_pickle=False``, or ``model.pt`` with ``torch.load(weights_only=True)``), and then answers frames
on stdin (8-byte length + an ``.npy`` batch of observations) with frames on stdout (an ``.npy`` batch of
actions). Whatever the candidate prints goes to stderr. The trusted side steps the environments, checks
and clips the actions, and sums the rewards: this process never sees a reward or a seed.
"""

import io
import json
import os
import sys


def main(request_path: str) -> int:
    out = os.fdopen(os.dup(1), "wb")  # the reply channel; fd 1 becomes stderr for the candidate's prints
    os.dup2(2, 1)
    inp = os.fdopen(0, "rb")
    import numpy as np

    with open(request_path) as fh:
        req = json.load(fh)
    sys.path.insert(0, req["repo"])
    sys.dont_write_bytecode = True
    ckpt = req["ckpt"]
    with open(os.path.join(ckpt, "config.json")) as fh:
        config = json.load(fh)
    npz = os.path.join(ckpt, "weights.npz")
    if os.path.exists(npz):
        with np.load(npz, allow_pickle=False) as data:
            weights = {k: data[k] for k in data.files}
    else:
        import torch

        weights = torch.load(os.path.join(ckpt, "model.pt"), map_location="cpu", weights_only=True)
    import policy as candidate  # the candidate's policy.py

    pol = candidate.build_policy(config, weights)
    while True:
        head = inp.read(8)
        if len(head) < 8:
            return 0
        frame = inp.read(int.from_bytes(head, "big"))
        obs = np.load(io.BytesIO(frame), allow_pickle=False)
        act = pol.act(obs)
        buf = io.BytesIO()
        np.save(buf, np.asarray(act, dtype=np.float64), allow_pickle=False)
        data = buf.getvalue()
        out.write(len(data).to_bytes(8, "big") + data)
        out.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
