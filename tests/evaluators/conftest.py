"""Shared fixtures of the evaluator tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from reasearch.engine import SandboxConfig, SandboxPool
from tests.engine.conftest import MODES, needs_mode


@pytest.fixture(scope="module", params=MODES)
def pool(request: pytest.FixtureRequest) -> Iterator[SandboxPool]:
    """One light pool (one worker, NumPy preloaded) per sandbox mode, shared by a module's tests; a module that
    needs another pool defines its own ``pool``, which takes precedence."""
    needs_mode(request.param)
    p = SandboxPool(SandboxConfig(mode=request.param, workers=1, preload=("numpy",)))
    try:
        yield p
    finally:
        p.close()


_WRITE_HOST_WEIGHTS = '''
import base64, json, os
out = os.environ["REASEARCH_OUT_DIR"]
json.dump(CONFIG, open(os.path.join(out, "config.json"), "w"))
with open(os.path.join(out, "model.pt"), "wb") as fh:
    fh.write(base64.b64decode(open("weights.b64").read()))
'''


def weights_made_on_the_host(model: str, config: dict[str, Any], state: Any = None) -> dict[str, str]:
    """A nanogpt repository whose ``train.py`` only writes ``config.json`` and a ``model.pt`` made here (``torch.save``
    of ``build_model(config).state_dict()`` under seed 0, or of ``state``), carried base64-encoded.

    For tests of the scoring side: training imports no torch (the training jail's torch start, seconds per
    experiment, proves nothing there), and scoring loads the same kind of file a training run would have saved.
    """
    import base64
    import io

    import torch

    if state is None:
        namespace: dict[str, Any] = {}
        exec(compile(model, "model.py", "exec"), namespace)  # the test's own model source
        torch.manual_seed(0)
        state = namespace["build_model"](config).state_dict()
    buf = io.BytesIO()
    torch.save(state, buf)
    return {"train.py": f"CONFIG = {config!r}\n" + _WRITE_HOST_WEIGHTS, "model.py": model,
            "weights.b64": base64.b64encode(buf.getvalue()).decode()}
