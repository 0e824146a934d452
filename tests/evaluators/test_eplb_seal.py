"""EPLB's seal watched at the boundary: the placement made on window i is scored on window i+1, so window
i+1 must not reach the candidate's process before its own timed call (and the last window never). Checked
twice, in both sandbox modes: on the trusted side, by recording every payload the candidate's session is
sent; and inside the sandbox, by a candidate that spies on every call its process receives (the harness
runs in the candidate's process and is patchable) and fails loudly when a window arrives early."""

from __future__ import annotations

from typing import Any

import numpy as np

import reasearch
from reasearch.engine import SandboxPool
from reasearch.evaluators.eplb._timing import CALIBRATION_SOURCE
from reasearch.evaluators.eplb.session import WARM_ECHOES
from reasearch.evaluators.result import Status

NUM_WINDOWS = 5

# Wraps the harness's echo path (the untimed warm-up calls) and its call path, and fails the evaluation
# (a CRASH naming the leak) when a window reaches this process before the timed call that carries it.
SPY = r'''
import hashlib
import sys

import numpy as np
from reasearch.native.eplb import rebalance_experts as _lib

_h = sys.modules["reasearch.evaluators.eplb.harness"]
SEEN = []  # digests of every window this process was handed, in order, echo or timed call
TIMED = []  # digests of the windows of the timed calls so far
_echo = _h._echo


def _digest(weight):
    return hashlib.sha256(np.ascontiguousarray(np.asarray(weight, dtype=np.int64)).tobytes()).hexdigest()


def _spy(payload):
    if "weight" in payload:
        SEEN.append(_digest(payload["weight"]))
    return _echo(payload)


_h._echo = _spy


def rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus):
    d = _digest(weight)
    TIMED.append(d)
    SEEN.append(d)
    if len(SEEN) == 1:
        raise RuntimeError("SPY-BLIND: the spy saw no warm-up call")
    early = {s for s in SEEN if s not in TIMED}
    if early:
        raise RuntimeError(f"LEAK: {len(early)} window(s) reached this process before their timed call")
    return _lib(weight, num_replicas, num_groups, num_nodes, num_gpus)
'''


class _Recording:
    """A runner that records every payload sent to each session, by session kind."""

    def __init__(self, inner: SandboxPool) -> None:
        self.inner = inner
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.mode = inner.mode

    def session(self, request: Any) -> Any:
        name = "calibration" if request.source == CALIBRATION_SOURCE else "candidate"
        inner, sent = self.inner.session(request), self.sent

        class _Session:
            @property
            def closed(self) -> bool:
                return bool(getattr(inner, "closed", False))

            def call(self, payload: dict[str, Any], timeout_s: float | None = None) -> Any:
                sent.append((name, dict(payload)))
                return inner.call(payload, timeout_s=timeout_s)

            def close(self) -> Any:
                return inner.close()

        return _Session()

    def run(self, request: Any) -> Any:
        return self.inner.run(request)


def _window_of(payload: dict[str, Any], windows: np.ndarray) -> int | None:
    if "weight" not in payload:
        return None
    weight = np.asarray(payload["weight"], dtype=np.int64)
    (hit,) = [i for i in range(windows.shape[0]) if np.array_equal(weight, windows[i])]
    return hit


def test_no_window_reaches_the_candidate_before_its_timed_call(pool: SandboxPool) -> None:
    task: Any = reasearch.make("eplb/v1", num_windows=NUM_WINDOWS)
    windows, _ = task.workload_windows()
    runner = _Recording(pool)
    res = task.evaluate(SPY, executor=runner)
    assert res.status is Status.OK, res.feedback  # the spy inside the sandbox saw nothing early
    assert res.provenance is not None and res.provenance.sandbox_mode == pool.mode
    # On the trusted side: the candidate's session got, in order, windows 0, 0, .. (warm-up), then each
    # timed call's own window; never a window ahead of the timed calls, never the last one.
    got = [(("echo" if "echo" in p else "call"), _window_of(p, windows))
           for name, p in runner.sent if name == "candidate" and "setup" not in p]
    assert [k for k, _ in got] == ["echo"] * WARM_ECHOES + ["call"] * (NUM_WINDOWS - 1)
    timed = 0
    for kind, window in got:
        assert window is not None and window <= timed, f"window {window} sent before timed call {timed}: {got}"
        timed += kind == "call"
    assert NUM_WINDOWS - 1 not in {w for _, w in got}
