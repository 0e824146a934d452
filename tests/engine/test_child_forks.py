"""The worker's children part (``ChildForks``) on its own, with no supervisor (issue 42 item 3c): the
deaths of the zygote and of the child forked ahead are booked by it, and a candidate's pid is not."""

from __future__ import annotations

import os

import pytest

from reasearch.engine._forking import ChildForks
from reasearch.engine._proc_tree import ProcessTree
from reasearch.engine._pump import Child
from reasearch.engine._scratch import ScratchFolders


def _forks() -> ChildForks:
    return ChildForks(ScratchFolders("/nonexistent", None), None, False, False, None, zygote_wanted=False)


def test_a_dead_zygote_is_forgotten_and_its_socket_closed() -> None:
    forks = _forks()
    r, w = os.pipe()
    forks.zpid, forks.zsock = 4242, r
    assert forks.lost(4243) is False and forks.zpid == 4242  # a candidate's pid is not the zygote
    assert forks.lost(4242) is True and forks.zpid is None and forks.zsock is None
    os.close(w)
    with pytest.raises(OSError):  # the zygote's socket is closed
        os.fstat(r)


def test_a_dead_child_forked_ahead_is_dropped_with_its_pipes() -> None:
    forks = _forks()
    pipes = [os.pipe() for _ in range(4)]
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    pidfd = os.open(os.devnull, os.O_RDONLY)  # stands for the pidfd: closed with the rest
    forks.idle = Child(pid=pid, pidfd=pidfd, result_r=pipes[0][0], calls_w=pipes[1][1], out_r=pipes[2][0],
                       err_r=pipes[3][0], forked_ns=0, fork_ret_ns=0)
    tree = ProcessTree(False, forks)
    tree.account(None, pid, 0, None)  # what a reap of that pid books: no candidate's CPU
    assert forks.idle is None
    for fd in (pipes[0][0], pipes[1][1], pipes[2][0], pipes[3][0], pidfd):
        with pytest.raises(OSError):  # every worker-side end of the dead child is closed
            os.fstat(fd)
    for fd in (pipes[0][1], pipes[1][0], pipes[2][1], pipes[3][1]):
        os.close(fd)
