"""The fixed inference step of ``nanogpt/v1``, run in its own jail: weights in, raw logits out.

Run as ``python3 _infer.py REQUEST_JSON`` (a file path, so no package import happens in the jail). It
imports the candidate's ``model.py`` (the only candidate code here), builds the model from the
checkpoint's ``config.json``, loads the weights without unpickling anything
(``torch.load(weights_only=True)`` or safetensors), runs the input windows the trusted side chose, and
writes raw float32 logits to ``logits.npy``. The loss, the causality check and the metric are computed
on the trusted side (outside this process), from those logits: nothing this process says about its
own quality is read.
"""

import json
import os
import sys


def main(request_path: str) -> int:
    import numpy as np
    import torch

    with open(request_path) as fh:
        req = json.load(fh)
    sys.path.insert(0, req["repo"])
    sys.dont_write_bytecode = True
    ckpt = req["ckpt"]
    with open(os.path.join(ckpt, "config.json")) as fh:
        config = json.load(fh)
    import model as candidate  # the candidate's model.py

    device = "cuda" if os.environ.get("CUDA_VISIBLE_DEVICES") and torch.cuda.is_available() else "cpu"
    net = candidate.build_model(config)
    st = os.path.join(ckpt, "model.safetensors")
    if os.path.exists(st):
        from safetensors.torch import load_file

        state = load_file(st, device="cpu")
    else:
        state = torch.load(os.path.join(ckpt, "model.pt"), map_location="cpu", weights_only=True)
    net.load_state_dict(state)
    net.to(device).eval()
    inputs = np.load(req["inputs"], allow_pickle=False)
    n, t = inputs.shape
    out = np.lib.format.open_memmap(req["out"], mode="w+", dtype=np.float32, shape=(n, t, 256))
    with torch.no_grad():
        for a, b in req["batches"]:
            x = torch.from_numpy(inputs[a:b].astype(np.int64)).to(device)
            logits = net(x)
            if isinstance(logits, (tuple, list)):
                logits = logits[0]
            if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (b - a, t, 256):
                shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
                print(f"REASEARCH-INFER-ERROR: the model returned {shape}, expected {(b - a, t, 256)}", flush=True)
                return 3
            out[a:b] = logits.float().cpu().numpy()
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
