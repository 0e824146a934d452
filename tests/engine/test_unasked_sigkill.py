"""A candidate process killed by a SIGKILL the engine did not send (an operator's ``kill -9``, a chaos kill, the
candidate itself) is ``OOM`` only when the host's ``oom_kill`` count rose since its worker's last look, else a
``CRASH`` that says it was killed from outside or out of memory: "out of memory" is never claimed as a fact
without the kernel's word. Both sandbox modes, through a pool, an evaluation and a session."""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Iterator

import pytest

import reasearch.engine._handle as handle_module
from reasearch.engine import RunRequest, SandboxConfig, SandboxPool
from reasearch.engine._oom import KILLED_UNASKED
from reasearch.engine.protocol import Limits
from reasearch.evaluators.result import Status
from tests.engine.conftest import MODES, needs_mode

FAST = Limits(wall_s=10.0, memory_mb=512)
ECHO = "reasearch.engine._probe_harness:echo"  # a session harness that calls run(payload)
SELF_KILL = textwrap.dedent("""
    import os, signal
    def run(payload=None):
        os.kill(os.getpid(), signal.SIGKILL)
""")


@pytest.fixture(params=[(m, rose) for m in MODES for rose in (False, True)], ids=lambda p: f"{p[0]}-rose={p[1]}")
def pool_and_rose(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[SandboxPool,
                                                                                                      bool]]:
    mode, rose = request.param
    needs_mode(mode)
    counts = itertools.count(100) if rose else itertools.repeat(100)  # the host's count at each look
    monkeypatch.setattr(handle_module, "oom_kills", lambda: next(counts))
    pool = SandboxPool(SandboxConfig(mode=mode, workers=1))
    try:
        yield pool, rose
    finally:
        pool.close()


def test_an_evaluation_killed_unasked_is_oom_only_when_the_oom_killer_acted(
        pool_and_rose: tuple[SandboxPool, bool]) -> None:
    pool, rose = pool_and_rose
    out = pool.run(RunRequest(source=SELF_KILL, limits=FAST))
    assert out.signal == 9 and out.value is None, out
    if rose:
        assert out.status is Status.OOM and "out of memory" in out.error
    else:
        assert out.status is Status.CRASH and out.error == KILLED_UNASKED
    assert pool.run(RunRequest(source="def run(payload=None):\n    return 7\n", limits=FAST)).value == 7


def test_a_session_call_killed_unasked_is_oom_only_when_the_oom_killer_acted(
        pool_and_rose: tuple[SandboxPool, bool]) -> None:
    pool, rose = pool_and_rose
    source = "import os, signal\n\ndef run(payload):\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    with pool.session(RunRequest(source=source, harness=ECHO, limits=FAST)) as session:
        call = session.call({})
    assert call.status is (Status.OOM if rose else Status.CRASH), call
    assert ("out of memory" in call.error) if rose else (call.error == KILLED_UNASKED)
