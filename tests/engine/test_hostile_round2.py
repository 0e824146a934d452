"""Hostile candidates, second round (issue 10 §2, items 4-8 and 11), in both modes where they apply."""

from __future__ import annotations

import os
import textwrap

import pytest

from reasearch.engine import SandboxConfig, SandboxPool
from reasearch.engine.protocol import Limits, RunRequest, Status
from tests.engine.conftest import needs_mode, stray_processes

FAST = Limits(wall_s=5.0, memory_mb=256, nproc=16)


def src(code: str) -> str:
    return textwrap.dedent(code).lstrip()


def assert_still_serving(pool: SandboxPool) -> None:
    out = pool.run(RunRequest(source="def run(x):\n    return x * 2\n", payload={"x": 21}))
    assert out.status is Status.OK, out.error
    assert out.value == 42
    assert stray_processes(pool) == []


def run_on_every_worker(pool: SandboxPool, request: RunRequest) -> list:
    """Runs ``request`` once per worker (idle workers are served in turn, so each gets one)."""
    return [pool.run(request) for _ in range(pool.workers)]


# -- 4. namespaces through clone() -------------------------------------------------------------------

_CLONE_NS = src("""
    import ctypes, os
    FLAGS = {"NEWNS": 0x00020000, "NEWCGROUP": 0x02000000, "NEWUTS": 0x04000000, "NEWIPC": 0x08000000,
             "NEWUSER": 0x10000000, "NEWPID": 0x20000000, "NEWNET": 0x40000000}
    def run():
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        out = {}
        for name, flag in FLAGS.items():
            # x86_64 clone(flags, newsp=0, parent_tid, child_tid, tls): fork-like, in new namespaces
            pid = libc.syscall(56, ctypes.c_ulong(flag | 17), 0, 0, 0, 0)
            if pid == 0:
                os._exit(0)
            if pid > 0:
                os.waitpid(pid, 0)
                out[name] = "created"
            else:
                out[name] = os.strerror(ctypes.get_errno())
        return out
    """)


def test_clone_with_namespace_flags_is_denied(pool: SandboxPool) -> None:
    if pool.mode == "process":
        pytest.skip("process mode has no seccomp filter (no namespace isolation at all); every result says "
                    "sandbox=process, and nested namespaces give nothing the candidate does not already have")
    out = pool.run(RunRequest(source=_CLONE_NS, limits=FAST))
    assert out.status is Status.OK, out.error
    assert set(out.value) == {"NEWNS", "NEWCGROUP", "NEWUTS", "NEWIPC", "NEWUSER", "NEWPID", "NEWNET"}
    assert all(v == "Operation not permitted" for v in out.value.values()), out.value
    assert_still_serving(pool)


def test_fork_and_threads_still_work(pool: SandboxPool) -> None:
    ok = src("""
        import os, threading
        def run():
            box = []
            t = threading.Thread(target=box.append, args=(7,))
            t.start(); t.join()
            pid = os.fork()
            if pid == 0:
                os._exit(3)
            _, status = os.waitpid(pid, 0)
            return [box, os.waitstatus_to_exitcode(status)]
        """)
    out = pool.run(RunRequest(source=ok, limits=FAST))
    assert out.status is Status.OK, out.error
    assert out.value == [[7], 3]


# -- 5. SysV IPC and POSIX message queues --------------------------------------------------------------

_IPC_MAKER = src("""
    import ctypes, os
    def run(size):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        libc.mq_open.restype = ctypes.c_int
        out = {}
        shm = libc.shmget(0x5EC7E7, ctypes.c_size_t(size), 0o1666)  # IPC_CREAT | 0666
        out["shm"] = shm if shm >= 0 else os.strerror(ctypes.get_errno())
        if shm >= 0:
            addr = libc.shmat(shm, None, 0)
            if addr not in (None, ctypes.c_void_p(-1).value):
                ctypes.memset(addr, 0x41, size)  # touch every page: real memory
                libc.shmdt(ctypes.c_void_p(addr))
        msg = libc.msgget(0x5EC7E8, 0o1666)
        out["msg"] = msg if msg >= 0 else os.strerror(ctypes.get_errno())
        sem = libc.semget(0x5EC7E9, 1, 0o1666)
        out["sem"] = sem if sem >= 0 else os.strerror(ctypes.get_errno())
        mq = libc.mq_open(b"/reasearch-leak", os.O_CREAT | os.O_RDWR, 0o666, None)
        out["mq"] = mq if mq >= 0 else os.strerror(ctypes.get_errno())
        return out
    """)

_IPC_FINDER = src("""
    import ctypes, os
    def run():
        libc = ctypes.CDLL(None, use_errno=True)
        found = {}
        found["shm"] = libc.shmget(0x5EC7E7, 0, 0) >= 0
        found["msg"] = libc.msgget(0x5EC7E8, 0) >= 0
        found["sem"] = libc.semget(0x5EC7E9, 0, 0) >= 0
        found["mq"] = libc.mq_open(b"/reasearch-leak", os.O_RDONLY, 0, None) >= 0
        for kind in ("shm", "msg", "sem"):
            try:
                with open(f"/proc/sysvipc/{kind}") as fh:
                    found[kind + "_table"] = len(fh.read().splitlines()) - 1
            except OSError:
                found[kind + "_table"] = 0
        return found
    """)


def _needs_private_ipc(pool: SandboxPool) -> None:
    if pool.mode == "process" and os.geteuid() == 0 and os.access("/proc/sys/kernel/shmmni", os.W_OK):
        assert all(info.get("private_ipc") for info in pool.worker_info())  # possible here: must be done
    if pool.mode == "process" and not all(info.get("private_ipc") for info in pool.worker_info()):
        pytest.skip("process mode without root (or without CAP_SYS_ADMIN) shares the host's IPC namespace: no "
                    "isolation, and every result says sandbox=process")


def test_sysv_ipc_and_mqueues_do_not_survive_a_candidate(pool: SandboxPool) -> None:
    _needs_private_ipc(pool)
    made = run_on_every_worker(pool, RunRequest(source=_IPC_MAKER, payload={"size": 1 << 20}, limits=FAST))
    assert all(o.status is Status.OK for o in made), [o.error for o in made]
    found = run_on_every_worker(pool, RunRequest(source=_IPC_FINDER, limits=FAST))
    for o in found:
        assert o.status is Status.OK, o.error
        assert o.value == {"shm": False, "msg": False, "sem": False, "mq": False,
                           "shm_table": 0, "msg_table": 0, "sem_table": 0}, (made[0].value, o.value)
    assert_still_serving(pool)


def test_shm_cannot_pin_memory_beyond_the_limit(pool: SandboxPool) -> None:
    _needs_private_ipc(pool)
    pinner = src("""
        import ctypes, os
        def run(n, size):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.shmat.restype = ctypes.c_void_p
            pinned = 0
            for i in range(n):  # attach, touch, detach: the address space never holds more than one
                shm = libc.shmget(0x5EC800 + i, ctypes.c_size_t(size), 0o1600)
                if shm < 0:
                    continue
                addr = libc.shmat(shm, None, 0)
                if addr in (None, ctypes.c_void_p(-1).value):
                    continue
                ctypes.memset(addr, 0x41, size)
                libc.shmdt(ctypes.c_void_p(addr))
                pinned += size
            return pinned
        """)
    limits = Limits(wall_s=10.0, memory_mb=128)
    out = pool.run(RunRequest(source=pinner, payload={"n": 8, "size": 64 << 20}, limits=limits))
    assert out.status is Status.OK, out.error
    assert out.value <= limits.memory_mb << 20, f"pinned {out.value >> 20} MB past a {limits.memory_mb} MB limit"
    assert_still_serving(pool)


# -- 6. cleanup that can fail ---------------------------------------------------------------------------

_DEEP = src("""
    import os
    def run(depth, fill_mb):
        with open("secret.txt", "w") as fh:
            fh.write("the previous candidate's answer")
        os.mkdir("locked")
        with open("locked/inner.txt", "w") as fh:
            fh.write("x")
        os.chmod("locked", 0)
        top = os.getcwd()
        for _ in range(depth):
            os.mkdir("d")
            os.chdir("d")
        os.chmod(".", 0o500)  # read-only deepest level with a file in it
        os.chdir(top)
        written = 0
        chunk = b"\\0" * (1 << 20)
        try:
            i = 0
            while written < fill_mb << 20:
                with open(f"fill{i}", "wb") as fh:
                    for _ in range(8):
                        fh.write(chunk)
                        written += len(chunk)
                i += 1
        except OSError:
            pass
        return written >> 20
    """)

_LOOK_BACK = src("""
    import os
    def run():
        mine = os.path.basename(os.getcwd())
        seen = {}
        try:
            names = os.listdir("..")
        except OSError:  # a search-only parent (nsjail): guess the names instead
            names = [f"eval-{k}" for k in range(1, 500)]
        for name in names:
            path = os.path.join("..", name)
            if name in (mine, "prewarm") or not os.path.lexists(path):
                continue
            try:
                seen[name] = sorted(os.listdir(path))
            except OSError as exc:
                seen[name] = type(exc).__name__
        return {"others": seen, "mine": sorted(os.listdir("."))}
    """)


def test_deep_tree_is_cleaned_up_before_the_next_candidate(pool: SandboxPool) -> None:
    deep = run_on_every_worker(pool, RunRequest(source=_DEEP, payload={"depth": 5000, "fill_mb": 0},
                                                limits=Limits(wall_s=30.0, memory_mb=256, fsize_mb=64)))
    assert all(o.status is Status.OK for o in deep), [o.error for o in deep]
    looks = run_on_every_worker(pool, RunRequest(source=_LOOK_BACK, limits=FAST))
    for o in looks:
        assert o.status is Status.OK, o.error
        assert o.value["others"] == {}, o.value
        assert o.value["mine"] == ["candidate.py"]
    assert_still_serving(pool)


def test_full_scratch_filesystem_leaves_a_working_worker() -> None:
    """nsjail: the jail's tmpfs filled to the brim behind an undeletable-looking tree; the next evaluation works."""
    needs_mode("nsjail")
    with SandboxPool(SandboxConfig(mode="nsjail", workers=1, preload=())) as pool:
        out = pool.run(RunRequest(source=_DEEP, payload={"depth": 3000, "fill_mb": 2048},
                                  limits=Limits(wall_s=60.0, memory_mb=256, fsize_mb=64)))
        assert out.status is Status.OK, out.error
        assert out.value >= 100  # it did fill the tmpfs (it is a few hundred MB)
        big = src("""
            def run():
                with open("data.bin", "wb") as fh:
                    fh.write(b"\\0" * (32 << 20))
                return "written"
            """)
        out = pool.run(RunRequest(source=big, limits=Limits(wall_s=10.0, memory_mb=256, fsize_mb=64)))
        assert out.status is Status.OK, out.error
        assert out.value == "written"
        assert_still_serving(pool)


@pytest.mark.parametrize("mode", ["nsjail", "process"])
def test_worker_with_too_little_scratch_space_is_replaced(mode: str) -> None:
    """A worker whose scratch filesystem is short of space after clean-up retires; the engine starts a
    fresh one before the next request, which is served normally (the request is not lost)."""
    needs_mode(mode)
    cfg = SandboxConfig(mode=mode, workers=1, preload=(), scratch_min_free_mb=1 << 30)  # never enough
    with SandboxPool(cfg) as pool:
        for i in range(3):
            out = pool.run(RunRequest(source="def run(x):\n    return x + 1\n", payload={"x": i}))
            assert out.status is Status.OK, out.error
            assert out.value == i + 1
        assert pool.restarts >= 2  # each request after the first found its worker retired


# -- 7. malformed result frames ------------------------------------------------------------------------

def _frame_writer(header_expr: str) -> str:
    return src(f"""
        import os
        def run():
            head = {header_expr}
            body = len(head).to_bytes(4, "big") + head
            os.write(3, len(body).to_bytes(8, "big") + body)
            os._exit(0)
        """)


@pytest.mark.parametrize("header_expr", [
    "b'[' * 100000 + b']' * 100000",  # nesting past the JSON decoder's recursion limit
    "b'{\"kind\": \"ok\", \"blobs\": [], \"value\": ' + b'[' * 5000 + b']' * 5000 + b'}'",
    "b'{\"kind\": \"ok\", \"blobs\": [], \"value\": ' + b'{\"a\": ' * 3000 + b'1' + b'}' * 3000 + b'}'",
    "b'{\"kind\": \"ok\", \"blobs\": [], \"value\": {\"$nd\": 7}}'",
    "b'{\"kind\": \"ok\", \"blobs\": [], \"value\": {\"$d\": [1]}}'",
    "b'{\"kind\": \"ok\", \"blobs\": 5}'",
    "b'{\"kind\": [1, 2]}'",
    "b'\"just a string\"'",
])
def test_malformed_result_frame_is_crash(pool: SandboxPool, header_expr: str) -> None:
    out = pool.run(RunRequest(source=_frame_writer(header_expr), limits=FAST))
    assert out.status is Status.CRASH
    assert out.value is None
    assert out.error  # with a reason
    assert_still_serving(pool)


def test_malformed_frame_in_a_session_call_is_crash(pool: SandboxPool) -> None:
    session_src = src("""
        import os
        def run(p):
            if p["x"] == 1:
                head = b'[' * 100000 + b']' * 100000
                body = len(head).to_bytes(4, "big") + head
                os.write(3, len(body).to_bytes(8, "big") + body)
                return None
            return p["x"]
        """)
    with pool.session(RunRequest(source=session_src, harness="reasearch.engine._probe_harness:echo",
                                 limits=FAST)) as sess:
        assert sess.call({"x": 2}).value == 2
        first = sess.call({"x": 1})
        assert first.status is Status.CRASH
        assert first.error
        assert sess.closed  # the child that sent garbage is gone: no reply can be out of step
    assert_still_serving(pool)


# -- 8. arrays that lie about their size -----------------------------------------------------------------

_LYING_ARRAY = src("""
    import io, os, json
    import numpy as np
    def run(descr, shape, data_len):
        buf = io.BytesIO()
        np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": tuple(shape)})
        blob = buf.getvalue() + b"\\0" * data_len
        head = json.dumps({"kind": "ok", "value": {"$nd": 0}, "blobs": [len(blob)]}).encode()
        body = len(head).to_bytes(4, "big") + head + blob
        os.write(3, len(body).to_bytes(8, "big") + body)
        os._exit(0)
    """)


@pytest.mark.parametrize("descr, shape, data_len", [
    ("|V0", [10**8], 0),
    ("|S0", [10**8], 0),
    ("<U0", [10**8], 0),
    ("<f8", [10**8], 16),  # declares 800 MB, sends 16 bytes
    ("<f8", [2], 64),  # more bytes than declared
    ("|S4", [4], 16),  # a string dtype: not numeric
    ("<M8[s]", [2], 16),  # datetimes are not plain numbers
])
def test_array_lying_about_its_size_is_crash(pool: SandboxPool, descr: str, shape: list, data_len: int) -> None:
    out = pool.run(RunRequest(source=_LYING_ARRAY, payload={"descr": descr, "shape": shape, "data_len": data_len},
                              limits=FAST))
    assert out.status is Status.CRASH
    assert out.value is None
    assert "array" in out.error
    assert_still_serving(pool)


# -- 11. CPU time of exited threads -----------------------------------------------------------------------

def test_cpu_time_of_exited_threads_counts(pool: SandboxPool) -> None:
    """Two threads burn 0.2 s of CPU each and exit before the child does: their 0.4 s counts (the live
    threads' accounting alone would see almost none of it). 0.2 s per thread, not more: the suite's time."""
    burner = src("""
        import threading, time
        def burn():
            t = time.thread_time()
            while time.thread_time() - t < 0.2:
                pass
        KEEP = []
        def run():
            threads = [threading.Thread(target=burn) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            KEEP.append(b"\\1" * (96 << 20))  # a slow exit: the worker replies before the child is reaped
            return "burnt"
        """)
    out = pool.run(RunRequest(source=burner, limits=Limits(wall_s=60.0, cpu_s=30.0, memory_mb=512)))
    assert out.status is Status.OK, out.error
    assert out.cpu_s >= 0.38, out.cpu_s


# -- 5b. the jail's memory as a whole -------------------------------------------------------------------

def test_jail_memory_is_bounded_as_a_whole() -> None:
    """Each process stays under its address-space limit, but together they pass the jail's cgroup cap."""
    needs_mode("nsjail")
    with SandboxPool(SandboxConfig(mode="nsjail", workers=1, preload=(), jail_memory_mb=768)) as pool:
        if not pool._launcher.memory_cgroup:
            pytest.skip("no cgroup v1 memory controller usable here (needs root): rlimits only")
        assert "768 MB per jail (cgroup)" in pool.isolation
        # Every child holds its memory until all have written theirs or died (no fixed sleep to line
        # them up: the parent releases them once each one reported or was killed).
        hog = src("""
            import os, select, time
            def run(n, mb):
                ready_r, ready_w = os.pipe()
                go_r, go_w = os.pipe()
                pids = []
                for _ in range(n):
                    pid = os.fork()
                    if pid == 0:
                        os.close(go_w)  # else the parent's close would never reach EOF here
                        data = b"\\1" * (mb << 20)  # written, so resident
                        os.write(ready_w, b"x")
                        os.read(go_r, 1)  # until the parent lets go
                        os._exit(0 if data else 1)
                    pids.append(pid)
                os.close(ready_w)
                ready, status = 0, {}
                deadline = time.monotonic() + 20
                while ready + len(status) < n and time.monotonic() < deadline:
                    if select.select([ready_r], [], [], 0.05)[0]:
                        ready += len(os.read(ready_r, 64))
                    for pid in pids:
                        if pid not in status and os.waitpid(pid, os.WNOHANG)[0]:
                            status[pid] = "killed"
                os.close(go_w)
                ok = 0
                for pid in pids:
                    if pid not in status:
                        ok += os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
                return ok
            """)
        out = pool.run(RunRequest(source=hog, payload={"n": 4, "mb": 300},
                                  limits=Limits(wall_s=30.0, memory_mb=512, nproc=16)))
        # 4 x 300 MB resident cannot fit in 768 MB: some process of the jail was killed
        assert out.status is not Status.OK or out.value < 4, (out.status, out.value)
        out = pool.run(RunRequest(source="def run():\n    return 'fine'\n"))
        assert out.status is Status.OK and out.value == "fine"
