"""An engine process that holds many files: its pipes to the workers get descriptor numbers past
1024, which ``select`` cannot watch."""

from __future__ import annotations

import os
import resource

import pytest

from reasearch.engine import SandboxConfig, SandboxPool
from reasearch.engine.protocol import RunRequest, Status
from tests.engine.conftest import MODES, needs_mode


@pytest.mark.parametrize("mode", MODES)
def test_a_pool_started_after_1100_open_files_still_answers(mode: str) -> None:
    needs_mode(mode)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1400
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.fail(f"RLIMIT_NOFILE hard limit {hard} is below the {want} files this test holds")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        assert max(held) >= 1024
        with SandboxPool(SandboxConfig(mode=mode, workers=1, preload=())) as pool:
            out = pool.run(RunRequest(source="def run():\n    return 41 + 1\n"))
            assert out.status is Status.OK and out.value == 42, out.error
            with pool.session(RunRequest(source="def f(x):\n    return 2 * x\n", entry=("f",))) as sess:
                got = sess.call({"x": 4})
                assert got.status is Status.OK and got.value == 8, got.error
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
