"""The fixed inference step of ``img/folder-v1``, run in a scoring jail: weights and test images in, labels out.

Run as ``python3 _infer.py REQUEST_JSON`` (a file path: no package import in the jail). It loads the
checkpoint without unpickling anything (``weights.npz`` with ``allow_pickle=False``, or ``model.pt`` with
``torch.load(weights_only=True)``), imports the candidate's ``model.py`` (the only candidate code here),
calls ``build_model(config, weights)`` and then ``predict(images)`` batch by batch, and saves the
predicted class of every image to ``predictions.npy``. Accuracy is computed by the trusted side, which
holds the labels; they never enter this jail. When candidate code raises, the last line says only the
exception type and the candidate's file:line (the trusted side checks both before showing them).
"""

import json
import os
import sys
import traceback


def main(request_path: str) -> int:
    import numpy as np

    with open(request_path) as fh:
        req = json.load(fh)
    repo, ckpt = req["repo"], req["ckpt"]
    sys.path.insert(0, repo)
    sys.dont_write_bytecode = True
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
        import model as candidate  # the candidate's model.py

        net = candidate.build_model(config, weights)
        images = np.load(req["inputs"], allow_pickle=False)
        n = len(images)
        preds = np.zeros(n, dtype=np.int64)
        for a in range(0, n, int(req["batch"])):
            b = min(n, a + int(req["batch"]))
            out = np.asarray(net.predict(images[a:b]))
            if out.shape == (b - a,) and np.issubdtype(out.dtype, np.integer):
                preds[a:b] = out
            elif out.ndim == 2 and out.shape[0] == b - a and out.shape[1] >= 1 and np.issubdtype(out.dtype, np.number):
                preds[a:b] = np.argmax(np.nan_to_num(out.astype(np.float64), nan=-np.inf), axis=1)
            else:
                print(f"\nREASEARCH-INFER-SHAPE {out.dtype} {out.shape}", flush=True)
                return 3
    except BaseException as exc:  # candidate code failed: type and place only
        place = "?"
        for frame in reversed(traceback.extract_tb(exc.__traceback__)):
            if frame.filename.startswith(repo + os.sep):
                place = f"{os.path.relpath(frame.filename, repo)}:{frame.lineno}"
                break
        print(f"\nREASEARCH-INFER-ERROR {type(exc).__name__} {place}", flush=True)
        return 3
    np.save(req["out"], preds, allow_pickle=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
