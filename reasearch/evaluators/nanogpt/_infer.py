"""The fixed inference step of ``nanogpt/v2``, run in its own jail: weights in, raw logits out.

Run as ``python3 _infer.py REQUEST_JSON`` (a file path, copied into the scoring folder). It loads the
weights first, before any candidate code runs, without unpickling anything (``model.safetensors`` or
``model.pt``: :mod:`reasearch.evaluators._scoring_jail`), then imports the candidate's ``model.py`` (the
only candidate code here), builds the model from the checkpoint's ``config.json``, runs the input windows
the trusted side chose, and writes raw float32 logits to ``logits.npy``. The loss, the causality check and
the metric are computed on the trusted side (outside this process), from those logits: nothing this
process says about its own quality is read.

Candidate code here sees held-out bytes: when a step fails this harness writes only ``error.json``
(``_scoring_jail.write_report``), checked field by field on the trusted side; the log stays on the host.
"""

import os
import sys

# From the jail's code copy, before the candidate's repository is on sys.path.
from reasearch.evaluators._scoring_jail import (
    import_candidate,
    load_config,
    load_request,
    load_state_dict,
    write_report,
)


def main(request_path: str) -> int:
    import numpy as np
    import torch

    req = load_request(request_path)
    ckpt, repo, report = req["ckpt"], req["repo"], req["report"]
    step = "weights"
    try:
        state = load_state_dict(ckpt)
        config = load_config(ckpt)
        step = "import"
        candidate = import_candidate(repo, "model")  # the candidate's model.py: from here on candidate code runs

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
        write_report(report, repo, step, exc)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
