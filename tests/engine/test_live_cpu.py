"""``ProcessTree.live_cpu``: the reply's CPU figure when the child exits during the tree walk.

A process that exits hands its children to the worker (a subreaper); a walk that straddles that
hand-over finds them under neither parent. The worker walks again, until two walks agree, when
the child has exited by the end of its walk. Driven here with a scripted walk, so the race is
certain instead of occasional (the pool-level tests are in test_sandbox_hostile.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from reasearch.engine import _procs
from reasearch.engine._forking import ChildForks
from reasearch.engine._proc_tree import ProcessTree
from reasearch.engine._scratch import ScratchFolders


def _bare_supervisor() -> ProcessTree:
    """The worker's process-tree part on its own: no child forked ahead, no zygote, nothing started."""
    return ProcessTree(False, ChildForks(ScratchFolders("/nonexistent", None), None, False, False, None, False))


@pytest.fixture()
def exited_child() -> Iterator[tuple[int, int]]:
    """(pid, pidfd) of a child that has exited (a zombie, not yet reaped)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    fd = os.pidfd_open(pid)
    deadline = time.monotonic() + 5
    while _procs.read_proc(f"/proc/{pid}/stat").split()[2] != b"Z" and time.monotonic() < deadline:
        time.sleep(0.001)
    yield pid, fd
    os.close(fd)
    os.waitpid(pid, 0)


def _scripted(monkeypatch: pytest.MonkeyPatch, walks: list[list[int]], cpu: dict[int, float]) -> list[int]:
    calls: list[int] = []

    def walk(pid: int, skip: object = None) -> list[int]:
        calls.append(pid)
        return walks[min(len(calls), len(walks)) - 1]

    monkeypatch.setattr(_procs, "children_walk", walk)
    monkeypatch.setattr(_procs, "cpu_s", lambda p: cpu.get(p, 0.0))
    return calls


def test_a_child_that_exited_mid_walk_gets_its_burner_counted(monkeypatch: pytest.MonkeyPatch,
                                                              exited_child: tuple[int, int]) -> None:
    pid, fd = exited_child
    burner = 999_999
    # First walk straddles the hand-over (the burner under neither parent); then it is the worker's.
    calls = _scripted(monkeypatch, [[pid], [pid, burner], [pid, burner]], {pid: 0.01, burner: 0.4})
    assert _bare_supervisor().live_cpu(pid, False, fd) == pytest.approx(0.41)
    assert len(calls) == 3  # until two walks agree


def test_a_live_child_is_walked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.read(r, 1)
        os._exit(0)
    fd = os.pidfd_open(pid)
    try:
        calls = _scripted(monkeypatch, [[pid, 7], [pid]], {pid: 0.01, 7: 0.2})
        assert _bare_supervisor().live_cpu(pid, False, fd) == pytest.approx(0.21)
        assert len(calls) == 1  # still running at the end of its walk: nothing was handed over
    finally:
        os.write(w, b"x")
        os.waitpid(pid, 0)
        os.close(fd)
