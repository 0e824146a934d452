"""The fixed inference step of ``img/folder-v1``, run in a scoring jail: weights and test images in, labels out.

Run as ``python3 _infer.py REQUEST_JSON`` (a file path: no package import in the jail). It loads the
checkpoint before any candidate code runs, without unpickling anything (``weights.npz`` with
``allow_pickle=False``, or ``model.pt`` with ``torch.load(weights_only=True)``), imports the candidate's
``model.py`` (the only candidate code here), calls ``build_model(config, weights)`` and then
``predict(images)`` batch by batch, and saves the predicted class of every image to ``predictions.npy``.
Accuracy is computed by the trusted side, which holds the labels; they never enter this jail.

Candidate code here sees the held-out images, so what it prints or raises never reaches the agent: on a
failure this harness writes only ``error.json`` (the step, the nearest built-in exception class, the
innermost frame in the repository as ``[file, line]``), which the trusted side checks field by field
(:mod:`reasearch.evaluators._scoring_report`); the log stays on the host for a person.
"""

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


class _BadOutput(ValueError):
    pass


def main(request_path: str) -> int:
    import numpy as np

    with open(request_path) as fh:
        req = json.load(fh)
    repo, ckpt, report = req["repo"], req["ckpt"], req["report"]
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
        images = np.load(req["inputs"], allow_pickle=False)
        sys.path.insert(0, repo)
        sys.dont_write_bytecode = True
        step = "import"
        import model as candidate  # type: ignore[import-not-found]  # the candidate's model.py

        step = "build"
        net = candidate.build_model(config, weights)
        n = len(images)
        preds = np.zeros(n, dtype=np.int64)
        for a in range(0, n, int(req["batch"])):
            b = min(n, a + int(req["batch"]))
            step = "predict"
            out = np.asarray(net.predict(images[a:b]))
            step = "output"
            if out.shape == (b - a,) and np.issubdtype(out.dtype, np.integer):
                preds[a:b] = out
            elif out.ndim == 2 and out.shape[0] == b - a and out.shape[1] >= 1 and np.issubdtype(out.dtype, np.number):
                preds[a:b] = np.argmax(np.nan_to_num(out.astype(np.float64), nan=-np.inf), axis=1)
            else:
                raise _BadOutput()
    except BaseException as exc:  # noqa: BLE001 -- candidate code failed: the report says where, nothing else
        _report(report, repo, step, exc)
        return 3
    np.save(req["out"], preds, allow_pickle=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
