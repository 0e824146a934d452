"""The fixed policy server of ``rl/{env}-v1``, run in its own jail: observations in, actions out.

Run as ``python3 _policy_server.py REQUEST_JSON`` (a file path: no package import in the jail). It imports
the candidate's ``policy.py``, loads the weights without unpickling anything (``weights.npz`` with
``allow_pickle=False``, or ``model.pt`` with ``torch.load(weights_only=True)``), and then answers frames
on stdin (8-byte length + an ``.npy`` batch of observations) with frames on stdout (an ``.npy`` batch of
actions). Whatever the candidate prints goes to stderr (the host log, never shown to the agent). The
trusted side steps the environments, checks and clips the actions, and sums the rewards: this process
never sees a reward or a seed.

Candidate code here sees the held-out episodes' observations, so when a step fails this harness writes
only ``error.json`` (the step, the nearest built-in exception class, the innermost frame in the repository
as ``[file, line]``), which the trusted side checks field by field
(:mod:`reasearch.evaluators._scoring_report`).
"""

import importlib
import io
import json
import os
import sys


def _report(path, repo, step, exc):
    """Writes the failure report: no message, no output, only a step, a built-in class name and a place."""
    import builtins
    import traceback

    name = next((c.__name__ for c in type(exc).__mro__ if getattr(builtins, c.__name__, None) is c), "BaseException")
    root = os.path.realpath(repo) + os.sep
    where = None
    for frame, line in traceback.walk_tb(exc.__traceback__):  # outermost first: the last match is the innermost
        filename = os.path.realpath(frame.f_code.co_filename)
        if filename.startswith(root):
            where = [filename[len(root):], line]
    with open(path, "w") as fh:
        json.dump({"step": step, "type": name, "subclass": name != type(exc).__name__, "where": where}, fh)
    traceback.print_exception(exc, file=sys.stderr)  # the whole story, for a person reading the host log


def main(request_path: str) -> int:
    out = os.fdopen(os.dup(1), "wb")  # the reply channel; fd 1 becomes stderr for the candidate's prints
    os.dup2(2, 1)
    inp = os.fdopen(0, "rb")
    import numpy as np

    with open(request_path) as fh:
        req = json.load(fh)
    repo, ckpt = req["repo"], req["ckpt"]
    step = "weights"
    try:
        with open(os.path.join(ckpt, "config.json")) as fh:
            config = json.load(fh)
        npz = os.path.join(ckpt, "weights.npz")
        if os.path.exists(npz):
            with np.load(npz, allow_pickle=False) as data:
                weights = {k: data[k] for k in data.files}
        else:
            import torch

            weights = torch.load(os.path.join(ckpt, "model.pt"), map_location="cpu", weights_only=True)
        sys.path.insert(0, repo)
        sys.dont_write_bytecode = True
        step = "import"
        candidate = importlib.import_module("policy")  # the candidate's policy.py: from here on candidate code runs

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
        _report(req["report"], repo, step, exc)
        return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
