"""The worker runs the child's request path (and a harness's rehearsal) before it forks, so that
CPython 3.11 quickens that code once instead of in every child: it must actually quicken it, and
must leave nothing of it behind in the worker."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from reasearch.engine import _child

# In a fresh interpreter: which functions of the child's path are quickened (their adaptive bytecode
# differs from the original) before and after quicken_request_path, and what it left behind.
_PROBE = textwrap.dedent("""
    import json, os, resource, sys
    from reasearch.engine import _child

    folder = sys.argv[1]
    fns = [_child._load_candidate, _child._guarded, _child._call, _child._result_frame, _child._set_limits,
           _child.address_space]
    quick = lambda: [f.__code__._co_code_adaptive != f.__code__.co_code for f in fns]
    limits = lambda: [resource.getrlimit(r) for r in (resource.RLIMIT_AS, resource.RLIMIT_CPU,
                      resource.RLIMIT_FSIZE, resource.RLIMIT_NPROC, resource.RLIMIT_NOFILE)]
    state = lambda: {"path": list(sys.path), "candidate": "candidate" in sys.modules, "limits": limits(),
                     "env": dict(os.environ), "cwd": os.getcwd()}
    before, s0 = quick(), state()
    _child.quicken_request_path(folder, rounds=int(sys.argv[2]))
    print(json.dumps({"before": before, "after": quick(), "same": state() == s0, "s0": s0["candidate"]}))
""")


def _probe(tmp_path: Path, rounds: int) -> dict[str, object]:
    (tmp_path / "candidate.py").write_text(_child.PREWARM_SOURCE)
    out = subprocess.run([sys.executable, "-c", _PROBE, str(tmp_path), str(rounds)], capture_output=True,
                         text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def test_the_childs_path_is_quickened_in_the_worker_and_nothing_is_left_behind(tmp_path: Path) -> None:
    got = _probe(tmp_path, _child.QUICKEN_ROUNDS)
    assert got["before"] == [False] * 6  # a fresh interpreter never ran them
    assert got["after"] == [True] * 6
    # sys.path, sys.modules["candidate"], this process's limits, environment and folder: as they were
    assert got["same"] is True and got["s0"] is False


def test_too_few_rounds_quicken_nothing(tmp_path: Path) -> None:
    # CPython 3.11 quickens a function on its 8th call (a loop's turns count too: _set_limits has
    # one): the test above would fail if the worker ran the path fewer times than that, or gave up
    # on its first round.
    after = _probe(tmp_path, 2)["after"]
    assert after[:4] == [False] * 4 and after[5] is False


def test_no_prewarm_folder_is_a_no_op() -> None:
    _child.quicken_request_path(None)  # a worker that could not make one still starts


def test_a_harness_rehearsal_runs_the_rounds_and_a_failing_one_stops_quietly() -> None:
    calls: list[int] = []

    def rehearse() -> dict[str, object]:
        calls.append(1)
        return {"x": [1.0, 2.0]}

    _child.rehearse_harness(types.SimpleNamespace(rehearse=rehearse), 25)
    assert len(calls) == 25

    def broken() -> object:
        calls.append(1)
        raise RuntimeError("no")

    calls.clear()
    _child.rehearse_harness(types.SimpleNamespace(rehearse=broken), 25)
    assert len(calls) == 1
    _child.rehearse_harness(types.SimpleNamespace(), 25)  # no rehearse(): nothing to run


@pytest.mark.parametrize("value", [object(), {1, 2}])
def test_a_rehearsal_whose_result_is_not_plain_data_is_only_framed_as_an_error(value: object) -> None:
    calls: list[int] = []

    def rehearse() -> object:
        calls.append(1)
        return value

    _child.rehearse_harness(types.SimpleNamespace(rehearse=rehearse), 3)
    assert len(calls) == 3  # _result_frame turns it into an error frame; nothing raises
