# reasearch: jail (imported inside the sandbox: see reasearch/engine/_runtime.py)
"""What the harnesses of the scoring jails share: the checkpoint loaded before any candidate code, the
candidate's module imported from its repository, and a failure written as ``error.json``.

Used by the fixed scoring harnesses of the training tasks (``img``'s and ``nanogpt``'s ``_infer.py``,
``rl``'s ``_policy_server.py``). The trusted side copies such a harness into a fresh folder and runs it by
path in a jail; it imports this module from the jail's code copy (``PYTHONPATH``), at its top, before the
candidate's repository is put on ``sys.path``. Stdlib only at import time; NumPy, torch and safetensors are
imported where they are used.

Loading. The weights are read before any candidate code runs, and nothing is unpickled: ``weights.npz``
with ``allow_pickle=False``, ``model.pt`` with ``torch.load(weights_only=True)``, ``model.safetensors``
with safetensors; ``config.json`` is plain JSON.

Trust boundary. This runs inside the jail, next to candidate code that sees held-out data; what it
prints or raises never reaches the agent. On a failure the harness writes only :func:`write_report`'s
``{"step", "type", "subclass", "where"}`` (the step, the nearest built-in exception class, the innermost
frame in the repository as ``[file, line]``): no message, no output. Candidate code in the same process
can rewrite that file, so the trusted side checks every field against what it knows
(:mod:`reasearch.evaluators._scoring_report`); the whole traceback goes to the host log for a person.
"""

from __future__ import annotations

import builtins
import importlib
import json
import os
import sys
import traceback
from types import ModuleType
from typing import Any

__all__ = ["import_candidate", "load_config", "load_request", "load_state_dict", "load_weights", "write_report"]


def load_request(path: str) -> Any:
    """The request the trusted side wrote for this run (JSON: the repository, the checkpoint, the report's path...)."""
    with open(path) as fh:
        return json.load(fh)


def load_config(ckpt: str) -> Any:
    """The checkpoint's ``config.json``, parsed."""
    with open(os.path.join(ckpt, "config.json")) as fh:
        return json.load(fh)


def _torch_weights(ckpt: str) -> Any:
    """``model.pt``: a state_dict of plain tensors (``weights_only=True`` unpickles nothing else)."""
    import torch

    return torch.load(os.path.join(ckpt, "model.pt"), map_location="cpu", weights_only=True)


def load_weights(ckpt: str) -> Any:
    """The arrays of ``weights.npz`` as a dict (``allow_pickle=False``), else ``model.pt``'s state_dict."""
    npz = os.path.join(ckpt, "weights.npz")
    if os.path.exists(npz):
        import numpy as np

        with np.load(npz, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    return _torch_weights(ckpt)


def load_state_dict(ckpt: str) -> Any:
    """``model.safetensors`` as a state_dict of CPU tensors, else ``model.pt``'s."""
    st = os.path.join(ckpt, "model.safetensors")
    if os.path.exists(st):
        from safetensors.torch import load_file

        return load_file(st, device="cpu")
    return _torch_weights(ckpt)


def import_candidate(repo: str, name: str) -> ModuleType:
    """Imports the candidate's module ``name`` from its repository: from here on candidate code runs."""
    sys.path.insert(0, repo)
    sys.dont_write_bytecode = True
    return importlib.import_module(name)


def write_report(path: str, repo: str, step: str, exc: BaseException) -> None:
    """Writes the failure report: no message, no output, only a step, a built-in class name and a place."""
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
