"""``exec_in_sandbox``: one command per fresh sandbox, in both modes."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch.engine import ExecOutcome, exec_in_sandbox
from reasearch.engine._procs import _nested_pidns, descendants_of, process_table
from reasearch.engine.protocol import Limits
from reasearch.errors import ConfigError
from reasearch.evaluators.result import Status
from tests.engine.conftest import kill_minus_9_by_marker, needs_mode

LIM = Limits(wall_s=10.0, memory_mb=1024, nproc=64)


@pytest.fixture(params=["nsjail", "process"])
def mode(request: pytest.FixtureRequest) -> str:
    needs_mode(request.param)
    return request.param


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A fresh folder the sandbox uid can reach (pytest's tmp_path sits under a 0700 folder)."""
    path = Path(tempfile.mkdtemp(prefix="reasearch-exec-test-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run(argv: list[str], workdir: Path, mode: str, limits: Limits = LIM, **kw: object) -> ExecOutcome:
    before = set(process_table())
    out = exec_in_sandbox(argv, workdir=workdir, limits=limits, mode=mode, **kw)  # type: ignore[arg-type]
    assert out.sandbox_mode == mode
    assert leftovers(before) == []  # nothing of the command is left, not even a zombie
    return out


def leftovers(before: set[int]) -> list[int]:
    """Processes below this one, created since ``before`` (the pids of the process table then), that
    belong to an exec: jailed, nsjail, or in a session of their own. (This process is a subreaper:
    orphans of other tests' processes, such as a killed Ray node's, may come back to it meanwhile;
    they existed before, so they are not the exec's.)"""
    table = process_table()
    mine = os.getsid(0)
    out = []
    for pid in descendants_of(os.getpid(), table):
        if pid in before:
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"reasearch.engine._worker" in cmd:  # a pool's worker (another module's fixture), not ours
            continue
        if _nested_pidns(pid) or b"nsjail" in cmd or table[pid][1] != mine or table[pid][3] == "Z":
            out.append(pid)
    return out


def test_python_runs_and_writes_its_workdir(workdir: Path, mode: str) -> None:
    code = "import numpy, sys; open('out.txt', 'w').write(str(numpy.arange(4).sum())); print(sys.stdin.read())"
    out = run(["python3", "-c", code], workdir, mode, stdin=b"hello from stdin")
    assert out.status is Status.OK, out.stderr
    assert out.exit_code == 0
    assert out.stdout == "hello from stdin\n"
    assert (workdir / "out.txt").read_text() == "6"
    assert out.wall_s > 0 and out.cpu_s > 0


def test_exit_code_and_signal(workdir: Path, mode: str) -> None:
    out = run(["python3", "-c", "import sys; sys.exit(3)"], workdir, mode)
    assert out.status is Status.CRASH and out.exit_code == 3
    out = run(["python3", "-c", "import ctypes; ctypes.string_at(0)"], workdir, mode)  # a real fault
    assert out.status is Status.CRASH and out.signal == 11


def test_timeout_kills_the_whole_tree(workdir: Path, mode: str) -> None:
    lim = Limits(wall_s=0.5, memory_mb=256, nproc=16)
    out = run(["bash", "-c", "sleep 100 & sleep 100"], workdir, mode, limits=lim)
    assert out.status is Status.TIMEOUT
    assert 0.5 <= out.wall_s < 1.5


def test_memory_error_is_oom(workdir: Path, mode: str) -> None:
    lim = Limits(wall_s=10.0, memory_mb=512)
    out = run(["python3", "-c", "x = bytearray(4 * 2**30)"], workdir, mode, limits=lim)
    assert out.status is Status.OOM
    assert "MemoryError" in out.stderr


@pytest.mark.parametrize("oom_killer_acted", [False, True])
def test_a_sigkill_we_did_not_send_is_oom_only_when_the_oom_killer_acted(
        workdir: Path, mode: str, oom_killer_acted: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command killed by SIGKILL from outside (an operator's ``kill -9`` of the jailed process) is a crash that
    says so unless the host's ``oom_kill`` count rose meanwhile; never "out of memory" as a fact."""
    import reasearch.engine.exec as exec_module
    from reasearch.engine._oom import KILLED_UNASKED, OOM_KILLED

    counts = iter([41, 42 if oom_killer_acted else 41])  # the host's count before the command, then after it
    monkeypatch.setattr(exec_module, "oom_kills", lambda: next(counts))
    marker = f"kill-me-{os.getpid()}-{mode}-{oom_killer_acted}"
    killer = threading.Thread(target=kill_minus_9_by_marker, args=(marker,), daemon=True)
    killer.start()
    out = run(["python3", "-c", "import time; time.sleep(30)", marker], workdir, mode)
    killer.join(timeout=5)
    assert out.signal == 9 and out.exit_code is None, out
    if oom_killer_acted:
        assert out.status is Status.OOM and OOM_KILLED in out.stderr
    else:
        assert out.status is Status.CRASH and KILLED_UNASKED in out.stderr and "out-of-memory killer" not in out.stderr


def test_output_is_truncated(workdir: Path, mode: str) -> None:
    lim = Limits(wall_s=10.0, memory_mb=256, output_bytes=1000)
    out = run(["python3", "-c", "import sys\nfor _ in range(10**6): sys.stdout.write('y' * 1000)"], workdir, mode,
              limits=lim)
    assert out.stdout.splitlines()[0] == "y" * 1000
    assert "truncated at 1000 bytes" in out.stdout
    assert out.status is Status.CRASH  # BrokenPipeError once the engine stops reading


def test_nsjail_isolation(workdir: Path) -> None:
    needs_mode("nsjail")
    secret_dir = Path(tempfile.mkdtemp(prefix="reasearch-secret-"))
    os.chmod(secret_dir, 0o755)
    try:
        secret = secret_dir / "answers.txt"
        secret.write_text("42")
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        code = (
            "import socket, sys\n"
            "res = []\n"
            f"try:\n    open({str(secret)!r}).read(); res.append('read')\nexcept OSError as e:\n "
            f"   res.append(type(e).__name__)\n"
            f"try:\n    open({str(secret_dir / 'new.txt')!r}, 'w'); res.append('wrote')\nexcept OSError as e:\n "
            f"   res.append(type(e).__name__)\n"
            f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2); res.append('connected')\n"
            "except OSError as e:\n    res.append(type(e).__name__)\n"
            "print(' '.join(res))\n"
        )
        out = run(["python3", "-c", code], workdir, "nsjail")
        listener.close()
        assert out.status is Status.OK, out.stderr
        assert out.stdout.split() == ["FileNotFoundError", "FileNotFoundError", "ConnectionRefusedError"]
        assert not (secret_dir / "new.txt").exists()
    finally:
        shutil.rmtree(secret_dir, ignore_errors=True)


def test_unreachable_workdir_is_explained(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a directory"):
        exec_in_sandbox(["true"], workdir=tmp_path / "missing", limits=LIM, mode="process")
    needs_mode("nsjail")
    hidden = tmp_path / "deep"
    hidden.mkdir()
    os.chmod(tmp_path, 0o700)
    if os.geteuid() == 0:  # the jail uid cannot pass a 0700 folder: it gets a staged bind mount instead
        out = exec_in_sandbox(["/bin/sh", "-c", "echo made > made.txt; pwd; ls -a .."], workdir=hidden, limits=LIM,
                              mode="nsjail")
        assert out.ok, out.stderr
        assert out.stdout.split() == [str(hidden), ".", "..", "deep"]  # its own path; no sibling visible
        assert (hidden / "made.txt").read_text() == "made\n"
        assert os.stat(tmp_path).st_mode & 0o777 == 0o700  # the user's folder was not opened
        # the mount existed only in the command's private namespace: on the host, mount points are empty
        assert not [p for p in Path("/var/tmp/reasearch-stage").iterdir() if _holds_anything(p)]
    else:  # the jail runs as this user: the folder is reachable
        assert exec_in_sandbox(["true"], workdir=hidden, limits=LIM, mode="nsjail").ok


def _holds_anything(folder: Path) -> bool:
    """Whether a staging folder holds an entry on the host; one another process removed meanwhile holds nothing
    (under pytest-xdist another test's command may end while this one looks)."""
    try:
        return any(folder.iterdir())
    except FileNotFoundError:
        return False
