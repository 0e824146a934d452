"""Hostile candidates, in both modes: each ends in the right status and the engine keeps serving."""

from __future__ import annotations

import os
import select
import socket
import textwrap
from pathlib import Path

import numpy as np
import pytest

from reasearch.engine import SandboxPool
from reasearch.engine._procs import process_table
from reasearch.engine.protocol import Limits, RunRequest
from reasearch.evaluators.result import Status
from tests.engine.conftest import needs_mode, stray_processes

FAST = Limits(wall_s=1.0, memory_mb=256, nproc=16)


def src(code: str) -> str:
    return textwrap.dedent(code).lstrip()


def assert_still_serving(pool: SandboxPool, restarts_before: int | None = None) -> None:
    """The next request is served normally, nothing is left running, and no worker was respawned."""
    out = pool.run(RunRequest(source="def run(x):\n    return x * 2\n", payload={"x": 21}))
    assert out.status is Status.OK, out.error
    assert out.value == 42
    assert stray_processes(pool) == []
    if restarts_before is not None:
        assert pool.restarts == restarts_before


def test_infinite_loop_is_killed_near_its_limit(pool: SandboxPool) -> None:
    before = pool.restarts
    lim = Limits(wall_s=0.5, memory_mb=256)
    out = pool.run(RunRequest(source="def run():\n    while True:\n        pass\n", limits=lim))
    assert out.status is Status.TIMEOUT
    assert out.value is None
    # The bound: killed within 0.5 s of running past the limit. A busy loop's running time is
    # its CPU time; its wall time adds what it waited for a CPU on a busy machine (not counted, up to
    # the outer bound: see tests/engine/test_load.py).
    assert out.cpu_s <= 1.0
    assert 0.5 <= out.wall_s <= lim.outer_wall_s() + 0.5
    assert "wall-time limit" in out.error
    assert_still_serving(pool, before)


def test_cpu_limit_gives_timeout(pool: SandboxPool) -> None:
    out = pool.run(RunRequest(source="def run():\n    while True:\n        pass\n",
                              limits=Limits(wall_s=30.0, cpu_s=1.0, memory_mb=256)))
    assert out.status is Status.TIMEOUT
    assert out.signal in (24, 9)  # SIGXCPU at the soft limit (SIGKILL at the hard one)
    assert "CPU-time limit" in out.error  # it was the CPU limit, not the 30 s wall limit
    assert out.cpu_s >= 0.5  # measured by the worker's wait4, not reported by the child
    assert_still_serving(pool)


def test_memory_hog_is_oom_and_worker_survives(pool: SandboxPool) -> None:
    before = pool.restarts
    hog = src("""
        def run():
            chunks = []
            while True:
                chunks.append(bytearray(50 * 2**20))
        """)
    roomy = Limits(wall_s=10.0, memory_mb=256)  # touching 256 MB can take a while on a loaded machine
    out = pool.run(RunRequest(source=hog, limits=roomy))
    assert out.status is Status.OOM, out.error
    out = pool.run(RunRequest(source="def run():\n    return bytearray(8 * 2**30)\n", limits=roomy))
    assert out.status is Status.OOM
    assert_still_serving(pool, before)


def test_fork_bomb_is_bounded_and_killed(pool: SandboxPool) -> None:
    bomb = src("""
        import os
        def run():
            n = 0
            while True:
                try:
                    if os.fork() == 0:
                        n = 0
                    else:
                        n += 1
                except OSError:
                    pass
        """)
    out = pool.run(RunRequest(source=bomb, limits=Limits(wall_s=0.5, memory_mb=256, nproc=16)))
    assert out.status is Status.TIMEOUT, out.error
    assert "wall-time limit" in out.error
    assert stray_processes(pool) == []
    assert_still_serving(pool)


def test_fork_bomb_hits_nproc(pool: SandboxPool) -> None:
    counter = src("""
        import os, time
        def run():
            made = 0
            for _ in range(100):
                try:
                    pid = os.fork()
                except OSError:
                    break
                if pid == 0:
                    time.sleep(30)
                    os._exit(0)
                made += 1
            return made
        """)
    out = pool.run(RunRequest(source=counter, limits=Limits(wall_s=5.0, memory_mb=256, nproc=8)))
    assert out.status is Status.OK, out.error
    assert 1 <= out.value < 8  # RLIMIT_NPROC applies (root's exemption is dropped with the uid)
    assert_still_serving(pool)


def test_loopback_connect(pool: SandboxPool) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    probe = src("""
        import socket
        def run(port):
            s = socket.socket()
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", port))
                return "connected"
            except OSError as exc:
                return type(exc).__name__
        """)
    try:
        out = pool.run(RunRequest(source=probe, payload={"port": port}, limits=Limits(wall_s=5.0, memory_mb=256)))
        arrived = bool(select.select([listener], [], [], 0.2)[0])
    finally:
        listener.close()
    assert out.status is Status.OK, out.error
    if pool.mode == "nsjail":  # its own network namespace: the host's loopback is not there
        assert out.value == "ConnectionRefusedError"
        assert not arrived
    else:  # process mode promises no network isolation, and says so
        assert out.value == "connected"
        assert arrived


def test_write_outside_scratch_is_denied(pool: SandboxPool, tmp_path: Path) -> None:
    target_dir = tmp_path / "outside"
    target_dir.mkdir(mode=0o755)
    target = target_dir / "evil.txt"
    writer = src("""
        import os
        def run(paths):
            out = {}
            for p in paths:
                try:
                    with open(p, "w") as fh:
                        fh.write("pwned")
                    out[p] = "written"
                except OSError as exc:
                    out[p] = type(exc).__name__
            with open("inside.txt", "w") as fh:  # the scratch dir is writable
                fh.write("ok")
            out["scratch"] = os.path.exists("inside.txt")
            return out
        """)
    paths = [str(target), "/usr/evil.txt"]
    if pool.mode == "nsjail":  # the jail's own /tmp: not writable either (nothing may reach a later candidate)
        paths.append("/tmp/left-for-the-next-candidate.txt")
    out = pool.run(RunRequest(source=writer, payload={"paths": paths}, limits=FAST))
    assert out.status is Status.OK, out.error
    assert out.value["scratch"] is True
    if pool.mode == "nsjail":
        assert out.value["/tmp/left-for-the-next-candidate.txt"] == "PermissionError"
    assert out.value["/usr/evil.txt"] != "written"
    assert not Path("/usr/evil.txt").exists()
    if pool.mode == "nsjail" or pool.separate_child_uid:
        assert out.value[str(target)] in ("FileNotFoundError", "PermissionError", "OSError")
        assert not target.exists()
    else:  # process mode as a plain user: no filesystem isolation
        assert out.value[str(target)] == "written"


def test_read_of_a_host_file_outside_the_binds(pool: SandboxPool, tmp_path: Path) -> None:
    secret = tmp_path / "hidden_answers.json"
    secret.write_text('{"answer": 42}')
    reader = src("""
        def run(path):
            try:
                with open(path) as fh:
                    return fh.read()
            except OSError as exc:
                return type(exc).__name__
        """)
    out = pool.run(RunRequest(source=reader, payload={"path": str(secret)}, limits=FAST))
    assert out.status is Status.OK, out.error
    if pool.mode == "nsjail":
        assert out.value in ("FileNotFoundError", "PermissionError")
    else:  # process mode: no filesystem isolation (the CLI and every result say so)
        assert out.value == '{"answer": 42}'


def test_kill_of_the_worker(pool: SandboxPool) -> None:
    before = pool.restarts
    killer = src("""
        import os, signal
        def run():
            try:
                os.kill(os.getppid(), signal.SIGKILL)
                return "sent"
            except OSError as exc:
                return type(exc).__name__
        """)
    out = pool.run(RunRequest(source=killer, limits=FAST))
    if pool.separate_child_uid:  # real prevention: the child runs as another uid
        assert out.status is Status.OK
        assert out.value == "PermissionError"
        assert_still_serving(pool, before)
    else:  # one uid only: the worker dies, the request is a CRASH and a fresh worker serves the next
        assert out.status is Status.CRASH
        assert "worker died" in out.error
        assert pool.restarts == before + 1
        assert_still_serving(pool)


def test_stdout_flood_is_truncated_early(pool: SandboxPool) -> None:
    flood = src("""
        import sys
        def run():
            chunk = "x" * 2**20
            for _ in range(1024):  # 1 GiB in total
                sys.stdout.write(chunk)
            return "done"
        """)
    out = pool.run(RunRequest(source=flood, limits=Limits(wall_s=10.0, memory_mb=256, output_bytes=64 * 1024)))
    assert out.status is Status.CRASH  # the pipe is closed at the cap: the writer gets EPIPE
    assert "BrokenPipeError" in out.error
    assert out.stdout.startswith("x" * 1000)
    assert out.stdout.count("x") == 64 * 1024
    assert "truncated at 65536 bytes" in out.stdout
    assert out.wall_s < 10.0  # cut off, not read to the end or killed at the limit
    assert_still_serving(pool)


def test_grandchild_left_sleeping_is_killed(pool: SandboxPool) -> None:
    leaver = src("""
        import os, time
        def run():
            pid = os.fork()
            if pid == 0:
                os.setsid()  # try to escape the process group as well
                if os.fork() == 0:
                    time.sleep(60)
                os._exit(0)
            os.waitpid(pid, 0)
            return "left one behind"
        """)
    out = pool.run(RunRequest(source=leaver, limits=FAST))
    assert out.status is Status.OK
    assert out.value == "left one behind"
    assert stray_processes(pool) == []
    assert_still_serving(pool)


def test_process_spawned_right_after_the_worker_read_the_result_is_killed(pool: SandboxPool) -> None:
    """After its result is out the child runs candidate code once more (its stdout's flush), waits
    for the worker to read the result, then spawns an escaping sleeper (a new session at once): with
    no thread ever started, that spawn can land after the worker found no process created since the
    child (when it may skip its tree walk). Nothing is left behind, whatever the delay: the walk is
    skipped only when the one pid handed out since is the next child's, right after the child's."""
    leaver = src("""
        import fcntl, os, struct, sys, termios, time
        class LingeringStdout:
            def __init__(self, real):
                self.real, self.calls = real, 0
            def write(self, s):
                return self.real.write(s)
            def flush(self):
                self.calls += 1
                if self.calls == 2:  # the flush after the result is out
                    while struct.unpack("i", fcntl.ioctl(3, termios.FIONREAD, bytes(4)))[0]:
                        pass  # ... until the worker has read it
                    t = time.perf_counter() + DELAY  # ... and, maybe, is past its checks
                    while time.perf_counter() < t:
                        pass
                    os.posix_spawn("/bin/sleep", ["sleep", "60"], {}, setsid=True)  # out of the group at once
        def run():
            sys.stdout = LingeringStdout(sys.stdout)
            return "returned"
        """)
    for delay_us in (0, 10, 20, 30, 40, 50, 60, 80, 100, 150, 200, 300):
        out = pool.run(RunRequest(source=f"DELAY = {delay_us} / 1e6\n" + leaver, limits=FAST))
        assert out.status is Status.OK and out.value == "returned"
    assert stray_processes(pool) == []
    assert_still_serving(pool)


@pytest.mark.parametrize("body, fragment", [
    ("os.write(3, (16).to_bytes(8, 'big') + b'\\xff' * 16)\n    os._exit(0)", "garbage"),
    ("os.write(3, b'\\xff' * 200)\n    os._exit(0)", "result larger than"),
    ("os.write(3, (100).to_bytes(8, 'big') + b'{')\n    os._exit(0)", "without a result"),
    ("os.close(3)\n    return 1", "without a result"),
    ("os.write(3, (10**12).to_bytes(8, 'big'))\n    os._exit(0)", "result larger than"),
])
def test_garbage_or_closed_result_pipe(pool: SandboxPool, body: str, fragment: str) -> None:
    out = pool.run(RunRequest(source=f"import os\ndef run():\n    {body}\n", limits=FAST))
    assert out.status is Status.CRASH
    assert fragment in out.error
    assert_still_serving(pool)


def test_result_beyond_size_cap_is_refused(pool: SandboxPool) -> None:
    big = "import numpy as np\ndef run():\n    return np.zeros(10**7)\n"  # 80 MB
    out = pool.run(RunRequest(source=big, limits=Limits(wall_s=5.0, memory_mb=512, result_bytes=1 << 20)))
    assert out.status is Status.CRASH
    assert out.error == f"result larger than {1 << 20} bytes (refused)"
    assert out.value is None
    assert_still_serving(pool)


def test_sys_exit_without_result(pool: SandboxPool) -> None:
    out = pool.run(RunRequest(source="import sys\ndef run():\n    sys.exit(3)\n", limits=FAST))
    assert out.status is Status.CRASH
    assert out.exit_code == 3
    assert "exited with code 3 without a result" in out.error
    out = pool.run(RunRequest(source="import os\ndef run():\n    os._exit(0)\n", limits=FAST))
    assert out.status is Status.CRASH
    assert out.exit_code == 0
    assert "without a result" in out.error
    assert_still_serving(pool)


def test_signal_death_is_crash(pool: SandboxPool) -> None:
    out = pool.run(RunRequest(source="import os, signal\ndef run():\n    os.kill(os.getpid(), signal.SIGSEGV)\n",
                              limits=FAST))
    assert out.status is Status.CRASH
    assert out.signal == 11
    assert "SIGSEGV" in out.error
    assert_still_serving(pool)


def test_candidate_cannot_spoof_its_timing(pool: SandboxPool) -> None:
    cheat = src("""
        import time
        def run():
            t = time.process_time()
            while time.process_time() - t < 0.3:  # burn 0.3 s of CPU
                pass
            return {"wall_s": 0.0, "cpu_s": 0.0}
        """)
    out = pool.run(RunRequest(source=cheat, limits=Limits(wall_s=5.0, memory_mb=256)))
    assert out.status is Status.OK
    assert out.wall_s >= 0.3
    assert out.cpu_s >= 0.29  # rusage of the child, from the worker's wait4
    assert np.isfinite(out.cpu_s)


def burner_candidate(cpu_s: float) -> str:
    """A candidate that forks a CPU burner and returns once the burner has burnt ``cpu_s`` of its own
    CPU (it says so on a pipe, then burns on until killed with the evaluation's tree). The result then
    waits for CPU actually spent, not for a wall-clock sleep that a busy machine fills with less."""
    return src(f"""
        import os, time
        def run():
            r, w = os.pipe()
            if os.fork() == 0:
                os.close(r)
                while time.process_time() < {cpu_s}:
                    pass
                os.write(w, b"x")
                while True:
                    pass
            os.close(w)
            os.read(r, 1)
            return 1
        """)


def test_cpu_hidden_in_a_background_process_is_counted(pool: SandboxPool) -> None:
    """A candidate that leaves a CPU burner running behind its result: the burner's CPU up to the
    reply is in ``cpu_s`` (the worker walks the tree whenever any process was created; in a jail it
    skips the walk only when the namespace's last pid is still the child's own)."""
    hide = burner_candidate(0.2)
    for _ in range(3):  # the reply usually goes out before the child exits (the early path), not always
        out = pool.run(RunRequest(source=hide, limits=Limits(wall_s=20.0, memory_mb=256)))
        assert out.status is Status.OK and out.value == 1
        assert out.cpu_s >= 0.2, out.cpu_s  # the burner had burnt 0.2 s of CPU before the result
    assert_still_serving(pool)


def test_cpu_of_a_burner_is_counted_when_its_parent_exits_right_after_its_result(pool: SandboxPool) -> None:
    """The race behind an intermittent failure of the test above: the child exits right after its
    result, handing its CPU burner to the worker (a subreaper) while the worker walks the tree for
    the reply's CPU figure; a walk that straddles that hand-over found the burner under neither
    parent. Many short runs, each of which must count the burner."""
    hide = burner_candidate(0.1)
    seen = []
    for _ in range(8):
        out = pool.run(RunRequest(source=hide, limits=Limits(wall_s=20.0, memory_mb=256)))
        assert out.status is Status.OK and out.value == 1
        seen.append(out.cpu_s)
    assert min(seen) >= 0.1, seen  # the burner had burnt 0.1 s of CPU before each result
    assert_still_serving(pool)


def test_one_uid_worker_killed_by_its_child_is_respawned(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where no second uid is available (process mode as a plain user), the child CAN kill its worker:
    the request is a CRASH, the worker is respawned, its orphans are killed, the next request is served."""
    from reasearch.engine import SandboxConfig, isolation

    with monkeypatch.context() as m:
        m.setattr(isolation.os, "geteuid", lambda: 1000)  # the launcher then plans for one uid
        pool = SandboxPool(SandboxConfig(mode="process", workers=1, preload=()))
    try:
        assert not pool.separate_child_uid
        killer = src("""
            import os, signal, time
            def run(note):
                pid = os.fork()
                if pid == 0:  # an orphan-to-be in the child's session
                    time.sleep(60)
                    os._exit(0)
                with open(note, "w") as fh:  # who is who, for the checks below
                    fh.write(f"{os.getpid()} {pid} {os.getppid()}")
                os.kill(os.getppid(), signal.SIGKILL)
                time.sleep(60)
            """)
        note = tmp_path / "pids"
        out = pool.run(RunRequest(source=killer, payload={"note": str(note)},
                                  limits=Limits(wall_s=5.0, memory_mb=256)))
        assert out.status is Status.CRASH
        assert "worker died" in out.error
        assert pool.restarts == 1
        assert_still_serving(pool, 1)
        child, grandchild, worker = (int(x) for x in note.read_text().split())
        # The dead worker's child and grandchild came back to this process (a subreaper): both are
        # killed and reaped (no zombie either), and nothing is left in the child's session.
        table = process_table()
        left = {p: table[p] for p in (worker, child, grandchild) if p in table}
        left.update({p: row for p, row in table.items() if row[1] == child})
        assert left == {}, [(p, row, _proc_text(p, "cmdline")) for p, row in left.items()]
    finally:
        pool.close()


def _proc_text(pid: int, name: str) -> str:
    """/proc/<pid>/<name> as text (for failure messages); '' once it is gone."""
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.parametrize("mode", ["nsjail", "process"])
def test_stuck_worker_is_killed_by_the_engine(mode: str) -> None:
    """The backstop: a worker that does not answer within wall + grace is killed with its jail. The
    engine's deadline is the request's wall limit + grace (moved only by the waits for a CPU the worker
    reports counting), not the outer bound that caps those waits (``Limits.outer_wall_s``)."""
    import signal
    import threading

    from reasearch.engine import SandboxConfig

    needs_mode(mode)
    with SandboxPool(SandboxConfig(mode=mode, workers=1, preload=(), grace_s=0.3)) as pool:
        w = pool._workers[0]
        table = process_table()
        worker_pid = w.proc.pid
        if mode == "nsjail":  # the worker is the jail's pid 1, a child of nsjail
            worker_pid = next(p for p, row in table.items() if row[0] == w.proc.pid)
        threading.Timer(0.1, os.kill, (worker_pid, signal.SIGSTOP)).start()
        out = pool.run(RunRequest(source="import time\ndef run():\n    time.sleep(0.5)\n    return 1\n",
                                  limits=Limits(wall_s=0.6, memory_mb=256)))
        assert out.status is Status.TIMEOUT
        assert "did not answer within 0.6 s + 0.3 s grace;" in out.error, out.error
        assert out.wall_s >= 0.9  # it waited the whole deadline first
        assert pool.restarts == 1
        assert_still_serving(pool, 1)
