"""The worker's quick scratch removal (unlink ``candidate.py``, ``rmdir``) and the scratch folder
made ahead: what a candidate does to its folder must never make them follow a link, keep a
leftover, or hand the next candidate anything."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

from reasearch.engine import SandboxPool
from reasearch.engine.protocol import Limits, RunRequest, Status
from tests.engine.conftest import stray_processes

FAST = Limits(wall_s=5.0, memory_mb=256, nproc=16)

LOOK_BACK = textwrap.dedent("""
    import os
    def run():
        mine = os.path.basename(os.getcwd())
        try:
            names = os.listdir("..")
        except OSError:  # a search-only parent (nsjail): guess the names instead
            names = [f"eval-{k}" for k in range(1, 2000)]
        others = sorted(n for n in names if n not in (mine, "prewarm") and os.path.lexists(os.path.join("..", n)))
        return {"others": others, "mine": sorted(os.listdir("."))}
    """).lstrip()


def _look(pool: SandboxPool) -> None:
    for _ in range(pool.workers):
        out = pool.run(RunRequest(source=LOOK_BACK, limits=FAST))
        assert out.status is Status.OK, out.error
        assert out.value == {"others": [], "mine": ["candidate.py"]}, out.value


def test_candidate_py_swapped_for_a_link_is_never_followed(pool: SandboxPool, tmp_path: Path) -> None:
    victim = tmp_path / "candidate.py"  # what a followed link would delete (process mode: same host)
    victim.write_text("keep me")
    os.chmod(tmp_path, 0o755)
    swap = textwrap.dedent(f"""
        import os
        def run():
            os.remove("candidate.py")
            os.symlink({str(tmp_path)!r}, "candidate.py")  # a link to a folder holding candidate.py
            os.symlink({str(victim)!r}, "other")
            return 1
        """).lstrip()
    for _ in range(pool.workers):
        out = pool.run(RunRequest(source=swap, limits=FAST))
        assert out.status is Status.OK and out.value == 1, out.error
    assert victim.read_text() == "keep me"
    _look(pool)
    assert stray_processes(pool) == []


def test_candidate_py_swapped_for_a_folder_is_removed_in_full(pool: SandboxPool) -> None:
    swap = textwrap.dedent("""
        import os
        def run():
            os.remove("candidate.py")
            os.makedirs("candidate.py/a/b")
            with open("candidate.py/a/b/data", "w") as fh:
                fh.write("x")
            os.chmod("candidate.py/a", 0o500)
            return 1
        """).lstrip()
    for _ in range(pool.workers):
        out = pool.run(RunRequest(source=swap, limits=FAST))
        assert out.status is Status.OK and out.value == 1, out.error
    _look(pool)


def test_leftovers_beside_candidate_py_are_removed(pool: SandboxPool) -> None:
    leave = "import os\ndef run():\n    open('.hidden', 'w').write('x')\n    os.mkdir('d')\n    return 1\n"
    for _ in range(pool.workers):
        out = pool.run(RunRequest(source=leave, limits=FAST))
        assert out.status is Status.OK, out.error
    _look(pool)


def test_refused_file_names_leave_no_folder(pool: SandboxPool) -> None:
    import pytest

    from reasearch.errors import SandboxError

    for _ in range(pool.workers):
        with pytest.raises(SandboxError, match="bad scratch file name"):
            pool.run(RunRequest(source="def run():\n    return 1\n", files={"../x": b"1"}, limits=FAST))
    _look(pool)


def test_files_reach_the_candidate_as_its_own(pool: SandboxPool) -> None:
    read = textwrap.dedent("""
        import os
        def run():
            st = os.stat("data.bin")
            with open("data.bin", "ab") as fh:  # its own file: writable
                fh.write(b"!")
            return {"data": open("data.bin", "rb").read().decode(), "mine": st.st_uid == os.getuid(),
                    "src_mine": os.stat("candidate.py").st_uid == os.getuid()}
        """).lstrip()
    out = pool.run(RunRequest(source=read, files={"data.bin": b"abc"}, limits=FAST))
    assert out.status is Status.OK, out.error
    assert out.value == {"data": "abc!", "mine": True, "src_mine": True}
