"""The worker's zygote (reasearch/engine/_zygote.c): children forked on request, as the worker's own.

The C extension is driven directly in a throwaway process (a script), and through the pool: each
evaluation's child is the worker's child, the zygote is engine code a candidate cannot reach, and
a pool without the zygote (``SandboxConfig(zygote=False)``) still serves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from reasearch.engine import RunRequest, SandboxConfig, SandboxPool, Status, isolation
from tests.engine.conftest import MODES, needs_mode, stray_processes

_zygote = pytest.importorskip("reasearch.engine._zygote", reason="the C extension is built by `pip install -e .`")

pytestmark = pytest.mark.skipif(not _zygote.available(), reason="glibc's thread-id descriptor is not here")

# A worker in miniature: forks a zygote, asks it for two children with a pipe each, and reports
# what each child saw (its parent, its thread id as glibc caches it, a signal raised at itself).
_SCRIPT = textwrap.dedent(
    """
    import json, os, signal, sys
    from reasearch.engine import _zygote

    mine, its = _zygote.pair(5.0)
    zpid = os.fork()
    if zpid == 0:
        os.close(mine)
        devnull = os.open(os.devnull, os.O_RDONLY)
        msg = _zygote.serve(its, devnull, -1)  # returns in each child only, its pipes on fds 1-4
        got = []
        signal.signal(signal.SIGUSR1, lambda *a: got.append(1))
        try:
            signal.raise_signal(signal.SIGUSR1)  # glibc's raise(): uses the cached thread id
        except OSError as exc:
            got.append(str(exc))
        request = os.read(4, 100).decode()
        report = {"msg": msg.decode(), "request": request, "pid": os.getpid(), "ppid": os.getppid(),
                  "sid": os.getsid(0), "raised": got, "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")),
                  "stdin": os.readlink("/proc/self/fd/0")}
        print("to stdout", flush=True)
        print("to stderr", file=sys.stderr, flush=True)
        os.write(3, json.dumps(report).encode())
        os._exit(7)
    os.close(its)
    out = []
    for i in range(2):
        ends = [os.pipe() for _ in range(4)]  # result, stdout, stderr, request
        _zygote.send(mine, f"hello {i}".encode(), [ends[0][1], ends[1][1], ends[2][1], ends[3][0]])
        for r, w in ends[:3]:
            os.close(w)
        os.close(ends[3][0])
        pid = int.from_bytes(os.read(mine, 8), "little", signed=True)
        os.write(ends[3][1], f"request {i}".encode())
        report = json.loads(os.read(ends[0][0], 65536))
        _, status = os.waitpid(pid, 0)  # only a child of ours can be waited for
        report.update(answer=pid, status=os.waitstatus_to_exitcode(status), zpid=zpid, me=os.getpid(),
                      stdout=os.read(ends[1][0], 100).decode(), stderr=os.read(ends[2][0], 100).decode())
        out.append(report)
    os.close(mine)  # the zygote exits on EOF
    _, zstatus = os.waitpid(zpid, 0)
    print(json.dumps({"children": out, "zygote_exit": os.waitstatus_to_exitcode(zstatus)}))
    """
)


def test_the_zygote_forks_children_of_its_parent_with_their_own_thread_id() -> None:
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["zygote_exit"] == 0  # it ends cleanly when the worker closes its socket
    children = result["children"]
    assert [c["msg"] for c in children] == ["hello 0", "hello 1"]
    for i, c in enumerate(children):
        assert c["pid"] == c["answer"] and c["pid"] != c["zpid"]
        assert c["ppid"] == c["me"]  # CLONE_PARENT: the worker's child, not the zygote's
        assert c["sid"] == c["pid"]  # a session of its own
        assert c["status"] == 7
        assert c["raised"] == [1]  # raise() reached this process: glibc's cached tid is its own
        assert c["request"] == f"request {i}"  # fd 4: the request pipe; fd 3: the result pipe
        assert (c["stdout"], c["stderr"]) == ("to stdout\n", "to stderr\n")
        assert c["stdin"] == "/dev/null"
        assert c["fds"] == [0, 1, 2, 3, 4, 5]  # 5: the listing's own; not the zygote's socket, nothing else
    assert children[0]["pid"] != children[1]["pid"]


def test_the_workers_end_gives_up_waiting_for_an_answer() -> None:
    import time

    a, b = _zygote.pair(0.2)
    try:
        t0 = time.monotonic()
        with pytest.raises(BlockingIOError):
            os.read(a, 8)  # nobody answers
        assert 0.15 < time.monotonic() - t0 < 5.0
    finally:
        os.close(a)
        os.close(b)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError):
            _zygote.pair(bad)


def test_send_refuses_a_bad_descriptor_list() -> None:
    a, b = _zygote.pair(1.0)
    try:
        with pytest.raises(ValueError):
            _zygote.send(a, b"x", [])
        with pytest.raises(ValueError):
            _zygote.send(a, b"x", list(range(9)))
        with pytest.raises(OSError):
            _zygote.send(a, b"x", [987654])  # not an open descriptor
    finally:
        os.close(a)
        os.close(b)


_PARENTAGE = """
import os
def solve():
    ppid = os.getppid()
    siblings = []
    for tid in os.listdir(f"/proc/{ppid}/task"):
        with open(f"/proc/{ppid}/task/{tid}/children") as fh:
            siblings += [int(p) for p in fh.read().split()]
    return {"pid": os.getpid(), "ppid": ppid, "siblings": sorted(p for p in siblings if p != os.getpid())}
"""

_KILL_SIBLINGS = """
import os, signal
def solve():
    ppid = os.getppid()
    killed, refused = [], []
    for tid in os.listdir(f"/proc/{ppid}/task"):
        with open(f"/proc/{ppid}/task/{tid}/children") as fh:
            for p in fh.read().split():
                if int(p) != os.getpid():
                    try:
                        os.kill(int(p), signal.SIGKILL)
                        killed.append(int(p))
                    except OSError:
                        refused.append(int(p))
    return {"killed": killed, "refused": refused}
"""

_TWICE = "def solve(x):\n    return 2 * x\n"


@pytest.mark.parametrize("zygote", [True, False])
@pytest.mark.parametrize("sandbox_mode", MODES)
def test_each_child_is_the_workers_own(sandbox_mode: str, zygote: bool) -> None:
    """With or without the zygote the candidate's parent is its worker. While it runs, its only
    sibling is the zygote (the next child is forked after the reply); without one, it has none."""
    needs_mode(sandbox_mode)
    cfg = SandboxConfig(mode=sandbox_mode, workers=1, preload=(), fit_images=False, zygote=zygote)
    with SandboxPool(cfg) as pool:
        seen = [pool.run(RunRequest(source=_PARENTAGE, entry=("solve",))) for _ in range(3)]
    for r in seen:
        assert r.status is Status.OK, r.error
    pids = [r.value["pid"] for r in seen]
    assert len(set(pids)) == 3
    assert len({r.value["ppid"] for r in seen}) == 1  # one worker, parent of every child
    siblings = [r.value["siblings"] for r in seen]
    if zygote:
        assert len({tuple(s) for s in siblings}) == 1 and len(siblings[0]) == 1, siblings  # one zygote throughout
        assert siblings[0][0] not in pids
    else:
        assert siblings == [[], [], []]


@pytest.mark.parametrize("setting", ["nsjail", "process", "process-one-uid"])
def test_a_candidate_that_kills_every_sibling_does_not_stop_the_pool(setting: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The zygote runs as the worker's uid: a candidate with a uid of its own (a jail, or process
    mode as root) cannot signal it. With one uid for both (process mode as a plain user) it can,
    and the worker then forks its children itself: either way the next evaluations are served."""
    mode = setting.partition("-")[0]
    needs_mode(mode)
    cfg = SandboxConfig(mode=mode, workers=1, preload=(), fit_images=False)
    with monkeypatch.context() as m:
        if setting == "process-one-uid":
            m.setattr(isolation.os, "geteuid", lambda: 1000)  # the launcher then plans for one uid
        pool = SandboxPool(cfg)
    with pool:
        assert pool.separate_child_uid is (setting != "process-one-uid")
        zygote = pool.ping()[0]["zygote"]
        assert zygote is not None
        attack = pool.run(RunRequest(source=_KILL_SIBLINGS, entry=("solve",)))
        assert attack.status is Status.OK, attack.error
        if setting == "process-one-uid":
            assert attack.value == {"killed": [zygote], "refused": []}
            assert pool.ping()[0]["zygote"] is None  # the worker saw it go
        else:
            assert attack.value["killed"] == [] and len(attack.value["refused"]) == 1  # the zygote
        after = [pool.run(RunRequest(source=_TWICE, entry=("solve",), payload={"x": i})) for i in range(5)]
        assert stray_processes(pool) == []
    assert [r.value for r in after] == [0, 2, 4, 6, 8]
    assert all(r.status is Status.OK for r in after)


_IDENTITY = """
import os
def solve():
    fields = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapAmb", "NoNewPrivs", "Seccomp"):
                fields[key] = value.split()
    fields["sid"] = os.getsid(0) == os.getpid()
    fields["fds"] = sorted(int(f) for f in os.listdir("/proc/self/fd"))
    fields["stdin"] = os.readlink("/proc/self/fd/0")
    fields["env"] = [os.environ.get("HOME"), os.environ.get("TMPDIR"), os.getcwd()]
    return fields
"""


@pytest.mark.parametrize("sandbox_mode", MODES)
def test_a_child_of_the_zygote_is_set_up_as_one_the_worker_forks(sandbox_mode: str) -> None:
    """Session, descriptors, uid, groups, capabilities, environment: the same with the zygote
    (which does part of it in C) as without it, and none of them privileged."""
    needs_mode(sandbox_mode)
    seen = {}
    for zygote in (True, False):
        cfg = SandboxConfig(mode=sandbox_mode, workers=1, preload=(), fit_images=False, zygote=zygote)
        with SandboxPool(cfg) as pool:
            runs = [pool.run(RunRequest(source=_IDENTITY, entry=("solve",))) for _ in range(2)]
        assert all(r.status is Status.OK for r in runs), [r.error for r in runs]
        assert runs[0].value == runs[1].value
        seen[zygote] = runs[0].value
    per_pool = ("env", "Uid", "Gid")  # process mode: each pool has its own scratch folder and child uid
    assert {k: v for k, v in seen[True].items() if k not in per_pool} == \
        {k: v for k, v in seen[False].items() if k not in per_pool}
    ident = seen[True]
    assert ident["sid"] is True
    assert ident["fds"] == [0, 1, 2, 3, 4, 5]  # 5: the listing's own
    assert ident["stdin"] == "/dev/null"
    assert len(set(ident["Uid"])) == 1 and ident["Uid"][0] != "0"
    assert len(set(ident["Gid"])) == 1 and ident["Gid"][0] != "0"
    assert ident.get("Groups", []) == []
    assert int(ident["CapInh"][0], 16) == int(ident["CapAmb"][0], 16) == 0
    # Process mode as root keeps CAP_DAC_READ_SEARCH (bit 2) alone, by design (see drop_to_uid).
    assert int(ident["CapEff"][0], 16) == (0 if sandbox_mode == "nsjail" else int(ident["CapEff"][0], 16) & 0x4)
    home, tmpdir, cwd = ident["env"]
    assert home == tmpdir == cwd


_STOP_SIBLINGS = _KILL_SIBLINGS.replace("signal.SIGKILL", "signal.SIGSTOP")


def test_a_zygote_stopped_by_a_candidate_is_replaced_by_forks_from_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """One uid for worker and child (process mode as a plain user): a candidate can stop the
    zygote. The worker waits ZYGOTE_TIMEOUT_S for its answer at most, kills it, and forks its
    children itself: nothing hangs, the evaluations after it are served."""
    import time

    from reasearch.engine._supervisor import ZYGOTE_TIMEOUT_S

    with monkeypatch.context() as m:
        m.setattr(isolation.os, "geteuid", lambda: 1000)  # the launcher then plans for one uid
        pool = SandboxPool(SandboxConfig(mode="process", workers=1, preload=(), fit_images=False))
    with pool:
        zygote = pool.ping()[0]["zygote"]
        attack = pool.run(RunRequest(source=_STOP_SIBLINGS, entry=("solve",)))
        assert attack.status is Status.OK and attack.value["killed"] == [zygote]
        t0 = time.monotonic()
        after = [pool.run(RunRequest(source=_TWICE, entry=("solve",), payload={"x": i})) for i in range(3)]
        waited = time.monotonic() - t0
        assert pool.ping()[0]["zygote"] is None
        assert stray_processes(pool) == []
    assert [r.value for r in after] == [0, 2, 4] and all(r.status is Status.OK for r in after)
    assert waited < ZYGOTE_TIMEOUT_S + 5.0
