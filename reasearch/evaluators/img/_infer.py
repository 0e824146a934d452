"""The fixed inference step of ``img/folder-v2``, run in a scoring jail: weights and test images in, labels out.

Run as ``python3 _infer.py REQUEST_JSON`` (a file path, copied into the scoring folder). It loads the
checkpoint before any candidate code runs, without unpickling anything (``weights.npz`` or ``model.pt``:
:mod:`reasearch.evaluators._scoring_jail`), imports the candidate's ``model.py`` (the only candidate code
here), calls ``build_model(config, weights)`` and then ``predict(images)`` batch by batch, and saves the
predicted class of every image to ``predictions.npy``. Accuracy is computed by the trusted side, which
holds the labels; they never enter this jail.

Candidate code here sees the held-out images: on a failure this harness writes only ``error.json``
(``_scoring_jail.write_report``), checked field by field on the trusted side; the log stays on the host.
"""

import sys

# From the jail's code copy, before the candidate's repository is on sys.path.
from reasearch.evaluators._scoring_jail import import_candidate, load_config, load_request, load_weights, write_report


class _BadOutput(ValueError):
    pass


def main(request_path: str) -> int:
    import numpy as np

    req = load_request(request_path)
    repo, ckpt, report = req["repo"], req["ckpt"], req["report"]
    step = "weights"
    try:
        config = load_config(ckpt)
        weights = load_weights(ckpt)
        images = np.load(req["inputs"], allow_pickle=False)
        step = "import"
        candidate = import_candidate(repo, "model")  # the candidate's model.py: from here on candidate code runs

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
        write_report(report, repo, step, exc)
        return 3
    np.save(req["out"], preds, allow_pickle=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
