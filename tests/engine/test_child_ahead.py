"""What the pre-forked child prepares before its request (``HOME``/``TMPDIR`` and the candidate's
module object for the scratch folder the worker will most likely hand over), the tree walk that
leaves the pre-forked child out, and the child's drop to ``SCHED_IDLE`` once its result is out:
none of it may show a candidate anything but its own folder, hide a process from the clean-up, or
stall a pool on a busy machine."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

import pytest

from reasearch.engine import SandboxPool, _child, _procs
from reasearch.engine.protocol import Limits, RunRequest, Status
from tests.engine.conftest import stray_processes

FAST = Limits(wall_s=10.0, memory_mb=256, nproc=16)

WHERE = textwrap.dedent("""
    import os, sys
    def run(**_):
        spec = __spec__
        found = sorted(os.listdir("."))
        open("left-behind", "w").close()  # the next evaluation's folder must not have it
        return {"cwd": os.getcwd(), "found": found, "home": os.environ.get("HOME"), "tmp": os.environ.get("TMPDIR"),
                "file": os.path.dirname(__file__), "origin": os.path.dirname(spec.origin),
                "name": __name__, "same": sys.modules["candidate"] is sys.modules[__name__],
                "path0": sys.path[0]}
    """).lstrip()


def _check_where(value: dict) -> str:
    cwd = value["cwd"]
    assert os.path.basename(cwd).startswith("eval"), value
    assert value["found"] == ["candidate.py"], value  # a folder made afresh for this evaluation
    assert value["home"] == value["tmp"] == value["file"] == value["origin"] == value["path0"] == cwd, value
    assert value["name"] == "candidate" and value["same"] is True, value
    return cwd


def test_scratch_env_and_module_match_the_folder_request_after_request(pool: SandboxPool) -> None:
    for _ in range(3 * pool.workers):  # each worker's folder is made afresh (see _check_where)
        out = pool.run(RunRequest(source=WHERE, limits=FAST))
        assert out.status is Status.OK, out.error
        _check_where(out.value)


def test_scratch_env_and_module_when_the_child_was_forked_for_another_folder(pool: SandboxPool) -> None:
    # A harness imported for the first time discards the pre-forked child: the request's child is
    # forked after its folder was made, so what a child sets up ahead names another folder.
    out = pool.run(RunRequest(source=WHERE, limits=FAST, harness="reasearch.engine._probe_harness:call"))
    assert out.status is Status.OK, out.error
    _check_where(out.value["value"])
    out = pool.run(RunRequest(source=WHERE, limits=FAST))
    assert out.status is Status.OK, out.error
    _check_where(out.value)


def test_a_candidate_that_moves_home_does_not_move_the_next_ones(pool: SandboxPool) -> None:
    meddle = textwrap.dedent("""
        import os
        def run():
            os.environ["HOME"] = "/"
            os.environ["TMPDIR"] = "/"
            return 1
        """).lstrip()
    for _ in range(pool.workers):
        assert pool.run(RunRequest(source=meddle, limits=FAST)).value == 1
    for _ in range(pool.workers):
        out = pool.run(RunRequest(source=WHERE, limits=FAST))
        assert out.status is Status.OK, out.error
        _check_where(out.value)


def test_a_session_sees_its_own_folder(pool: SandboxPool) -> None:
    with pool.session(RunRequest(source=WHERE, limits=FAST)) as sess:
        first = sess.call({})
        assert first.status is Status.OK, first.error
        _check_where(first.value)
    out = pool.run(RunRequest(source=WHERE, limits=FAST))
    assert out.status is Status.OK, out.error
    _check_where(out.value)


def test_children_walk_skips_a_subtree() -> None:
    # A parent with two children, each with a child of its own: skipping one child leaves out it
    # and its child, and only them.
    script = textwrap.dedent("""
        import os, time
        for _ in range(2):
            if os.fork() == 0:
                if os.fork() == 0:
                    time.sleep(60); os._exit(0)
                time.sleep(60); os._exit(0)
        time.sleep(60)
        """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 20
        while len(_procs.children_walk(proc.pid)) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        below = _procs.children_walk(proc.pid)
        assert len(below) == 4
        direct = [p for p in below if _procs.process_table()[p][0] == proc.pid]
        assert len(direct) == 2
        skipped = direct[0]
        under_skipped = _procs.descendants_of(skipped)
        assert len(under_skipped) == 1
        kept = _procs.children_walk(proc.pid, skip=skipped)
        assert sorted(kept) == sorted(set(below) - {skipped, *under_skipped})
        assert _procs.children_walk(proc.pid, skip=None) == below
        assert sorted(_procs.children_walk(proc.pid, skip=12345678)) == sorted(below)  # no such process
    finally:
        for p in [*_procs.children_walk(proc.pid), proc.pid]:
            try:
                os.kill(p, 9)
            except ProcessLookupError:
                pass
        proc.wait()
        _procs.reap_pids(_procs.children_walk(os.getpid()), wait_s=0.5)


def test_children_walk_skip_without_the_children_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_procs, "_HAVE_CHILDREN_FILE", False)
    test_children_walk_skips_a_subtree()


def test_yield_cpu_lowers_the_child_to_sched_idle() -> None:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked side
        try:
            before = os.sched_getscheduler(0)
            _child._yield_cpu()
            os.write(w, f"{before} {os.sched_getscheduler(0)}".encode())
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 100).decode().split()
    os.close(r)
    os.waitpid(pid, 0)
    assert int(got[0]) != os.SCHED_IDLE
    assert int(got[1]) == os.SCHED_IDLE


def test_the_pool_keeps_serving_while_cpu_hogs_run(pool: SandboxPool) -> None:
    """A child that yields the CPU once its result is out must not stall its worker on a busy
    machine (the worker waits for its exit before it serves again): with one busy loop per core,
    in sessions of their own and in ours, 40 trivial evaluations still finish (generous bound)."""
    hog = "while True: pass"
    n = os.cpu_count() or 2
    hogs = [subprocess.Popen([sys.executable, "-c", hog], start_new_session=bool(i % 2)) for i in range(2 * n)]
    try:
        t0 = time.monotonic()
        for _ in range(40):
            out = pool.run(RunRequest(source="def run():\n    return 1\n", limits=FAST))
            assert out.status is Status.OK and out.value == 1, out.error
        assert time.monotonic() - t0 < 120.0
    finally:
        for h in hogs:
            h.kill()
        for h in hogs:
            h.wait()
    assert stray_processes(pool) == []


def _in_forked_child(fn: Callable[[], dict[str, int]]) -> dict[str, int]:
    """Runs ``fn`` in a forked child (whatever it does to its privileges stays there); its result."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked side
        try:
            os.write(w, repr(fn()).encode())
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 1000).decode()
    os.close(r)
    os.waitpid(pid, 0)
    return eval(got)  # noqa: S307 - our own child's repr of a dict of ints


def _own_caps(*names: str) -> dict[str, int]:
    status = open("/proc/self/status").read()
    return {line.split(":")[0]: int(line.split()[1], 16) for line in status.splitlines() if line.startswith(names)}


def _caps_after(mask: int) -> dict[str, int]:
    """In a forked child that keeps its capabilities across a uid change (SECBIT_KEEP_CAPS, so that
    the uid change alone clears nothing): the sets after ``_set_caps(mask)``."""
    from reasearch.engine import _privilege

    def child() -> dict[str, int]:
        _privilege.prctl(_privilege._PR_SET_SECUREBITS, _privilege._SECBIT_KEEP_CAPS)
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)
        _privilege._set_caps(mask)
        return _own_caps("CapEff", "CapPrm", "CapInh")

    return _in_forked_child(child)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hold capabilities to drop")
def test_prebuilt_capset_arguments_drop_what_they_say() -> None:
    from reasearch.engine import _privilege

    assert _caps_after(0) == {"CapInh": 0, "CapPrm": 0, "CapEff": 0}
    keep = 1 << _privilege._CAP_DAC_READ_SEARCH
    assert _caps_after(keep) == {"CapInh": 0, "CapPrm": keep, "CapEff": keep}
    assert _caps_after(0) == {"CapInh": 0, "CapPrm": 0, "CapEff": 0}  # the shared arguments were not changed
    for mask, (head, data) in _privilege._CAPS_ARGS.items():
        assert (data[0].effective, data[0].permitted, data[0].inheritable) == (mask, mask, 0)
        assert (data[1].effective, data[1].permitted, data[1].inheritable) == (0, 0, 0)
        assert (head.version, head.pid) == (_privilege._CAP_VERSION_3, 0)


def test_the_next_child_rehearses_the_last_harness_after_dropping_its_uid(pool: SandboxPool) -> None:
    probe = "reasearch.engine._probe_harness:call"
    plain = "def run():\n    return 1\n"
    first = pool.run(RunRequest(source=plain, limits=FAST, harness=probe))
    assert first.status is Status.OK, first.error
    rehearsed = []
    for _ in range(4 * pool.workers):
        time.sleep(0.2)  # the pre-forked children have time to rehearse
        out = pool.run(RunRequest(source=plain, limits=FAST, harness=probe))
        assert out.status is Status.OK, out.error
        v = out.value
        assert v["value"] == 1 and v["child_pid"] != v["warm_pid"]
        rehearsed.append(v["rehearsed_here"])
        if pool.separate_child_uid:
            assert v["uid"] != 0  # the rehearsal ran where the candidate runs: after the uid drop
    assert sum(rehearsed) >= 2 * pool.workers, rehearsed  # every child after its worker's first probe request


def test_a_failing_or_missing_rehearsal_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    mod = types.ModuleType("reasearch_test_rehearsal")
    calls = []

    def boom() -> None:
        calls.append(1)
        raise RuntimeError("a broken rehearsal")

    mod.rehearse = boom  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setattr(_child, "_request_waiting", lambda: False)
    _child._rehearse(f"{mod.__name__}:call")  # raises nothing
    assert calls == [1]
    _child._rehearse("no_such_module_anywhere:call")
    _child._rehearse(None)
    mod.rehearse = lambda: {"not": object()}  # type: ignore[attr-defined]  # a value the wire refuses
    _child._rehearse(f"{mod.__name__}:call")


def _caps_after_drop(securebits: int) -> dict[str, int]:
    """In a forked root child that first gains an inheritable and an ambient capability (and sets
    ``securebits``), the sets after the worker's ``drop_bounding_set`` and the child's ``drop_to_uid``."""
    from reasearch.engine import _privilege

    def child() -> dict[str, int]:
        head = _privilege._CapHeader(_privilege._CAP_VERSION_3, 0)
        data = (_privilege._CapData * 2)()
        _privilege._libc.capget(_privilege.ctypes.byref(head), data)
        data[0].inheritable = 1 << 10  # CAP_NET_BIND_SERVICE, then raised into the ambient set
        assert _privilege._libc.capset(_privilege.ctypes.byref(head), data) == 0
        assert _privilege._libc.prctl(_privilege._PR_CAP_AMBIENT, 2, 10, 0, 0) == 0  # PR_CAP_AMBIENT_RAISE
        if securebits:
            _privilege.prctl(_privilege._PR_SET_SECUREBITS, securebits)
        _privilege.drop_bounding_set(False)
        fast = _privilege._UID_CHANGE_CLEARS_ALL
        _privilege.drop_to_uid(65534, False, bounding_dropped=True)
        return {**_own_caps("CapEff", "CapPrm", "CapInh", "CapAmb"), "fast": int(fast)}

    return _in_forked_child(child)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hold capabilities to drop")
def test_a_plain_uid_change_leaves_no_capability_once_the_worker_emptied_inheritable_and_ambient() -> None:
    from reasearch.engine import _privilege

    none = {"CapInh": 0, "CapPrm": 0, "CapEff": 0, "CapAmb": 0}
    assert _caps_after_drop(0) == {**none, "fast": 1}  # the plain setres*id path
    # A securebit that changes what a uid change does: the child takes the capset path instead.
    assert _caps_after_drop(_privilege._SECBIT_KEEP_CAPS) == {**none, "fast": 0}


def _warm_up_with_request_after(wait_s: float, request_after_s: float | None) -> dict[str, int]:
    """``_child._warm_up(None, None, wait_s)`` in a forked child whose fd 4 gets a request after
    ``request_after_s`` (0: before the call; None: never): whether it warmed up, and how long the
    decision took."""
    import threading

    def child() -> dict[str, int]:
        r, w = os.pipe()
        os.dup2(r, 4)
        if request_after_s == 0.0:
            os.write(w, b"request")  # already there
        elif request_after_s is not None:
            threading.Timer(request_after_s, os.write, (w, b"request")).start()
        t0 = time.monotonic()
        warmed = _child._warm_up(None, None, wait_s)
        return {"warmed": int(warmed), "ms": int((time.monotonic() - t0) * 1000)}

    return _in_forked_child(child)


def test_back_to_back_the_child_warms_up_only_if_its_request_is_late() -> None:
    from reasearch.engine._supervisor import BUSY_WARM_DELAY_S, warm_delay

    # The worker's choice: a wait after a request that came back to back, none after a pause.
    assert warm_delay(100.0, 100.0 - 0.001) == BUSY_WARM_DELAY_S > 0.0
    assert warm_delay(100.0, 100.0 - 0.5) == 0.0
    assert warm_delay(100.0, 0.0) == 0.0  # a worker's first request
    # The child's side: a request within the wait skips the warm-up, and does not wait it out.
    early = _warm_up_with_request_after(wait_s=2.0, request_after_s=0.02)
    assert early["warmed"] == 0 and early["ms"] < 1500, early
    # No request within the wait (a pause after all): it warms up once the wait is over.
    late = _warm_up_with_request_after(wait_s=0.05, request_after_s=None)
    assert late["warmed"] == 1 and late["ms"] >= 50, late
    # No wait asked: it warms up at once, unless the request is already there.
    assert _warm_up_with_request_after(wait_s=0.0, request_after_s=None)["warmed"] == 1
    assert _warm_up_with_request_after(wait_s=0.0, request_after_s=0.0)["warmed"] == 0
