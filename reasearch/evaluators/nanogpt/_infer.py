"""The fixed inference step of ``nanogpt/v1``, run in its own jail: weights in, raw logits out.

Run as ``python3 _infer.py REQUEST_JSON`` (a file path, so no package import happens in the jail). It
loads the weights first, before any candidate code runs, without unpickling anything
(``torch.load(weights_only=True)`` or safetensors), then imports the candidate's ``model.py`` (the only
candidate code here), builds the model from the checkpoint's ``config.json``, runs the input windows the
trusted side chose, and writes raw float32 logits to ``logits.npy``. The loss, the causality check and the
metric are computed on the trusted side (outside this process), from those logits: nothing this process
says about its own quality is read.

Candidate code here sees held-out bytes, so what it prints or raises never reaches the agent: when a step
fails this harness writes only ``error.json`` (the step, the nearest built-in exception class, the
innermost frame in the repository as ``[file, line]``), which the trusted side checks field by field
(:mod:`reasearch.evaluators._scoring_report`); the log stays on the host for a person.
"""

import importlib
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
    import numpy as np
    import torch

    with open(request_path) as fh:
        req = json.load(fh)
    ckpt, repo, report = req["ckpt"], req["repo"], req["report"]
    step = "weights"
    try:
        st = os.path.join(ckpt, "model.safetensors")
        if os.path.exists(st):
            from safetensors.torch import load_file

            state = load_file(st, device="cpu")
        else:
            state = torch.load(os.path.join(ckpt, "model.pt"), map_location="cpu", weights_only=True)
        with open(os.path.join(ckpt, "config.json")) as fh:
            config = json.load(fh)
        sys.path.insert(0, repo)
        sys.dont_write_bytecode = True
        step = "import"
        candidate = importlib.import_module("model")  # the candidate's model.py: from here on candidate code runs

        device = "cuda" if os.environ.get("CUDA_VISIBLE_DEVICES") and torch.cuda.is_available() else "cpu"
        step = "build"
        net = candidate.build_model(config)
        step = "load_state_dict"
        net.load_state_dict(state)
        net.to(device).eval()
        inputs = np.load(req["inputs"], allow_pickle=False)
        n, t = inputs.shape
        out = np.lib.format.open_memmap(req["out"], mode="w+", dtype=np.float32, shape=(n, t, 256))
        with torch.no_grad():
            for a, b in req["batches"]:
                x = torch.from_numpy(inputs[a:b].astype(np.int64)).to(device)
                step = "forward"
                logits = net(x)
                step = "output"
                if isinstance(logits, (tuple, list)):
                    logits = logits[0]
                if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (b - a, t, 256):
                    raise TypeError("the model's output is not a tensor [B, T, 256]")
                out[a:b] = logits.float().cpu().numpy()
        out.flush()
    except BaseException as exc:  # noqa: BLE001 - any failure of candidate code is reported the same way
        _report(report, repo, step, exc)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
