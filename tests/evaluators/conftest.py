"""Shared fixtures of the evaluator tests."""

from __future__ import annotations

from collections.abc import Iterator

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
