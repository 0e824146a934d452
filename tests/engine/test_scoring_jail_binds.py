"""A scoring jail (``run_job(packages=..., noexec=True)``) holds only its package list, and no native code of the
candidate's loads there: not from its repository or checkpoint, not copied to /tmp, /dev/shm or its writable
folder, not through an anonymous file. Process mode cannot mount or filter: the test pins what it still holds."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch.engine._job_launch import PROCESS_SCORING_GAPS
from reasearch.engine._runtime import runtime_root
from reasearch.engine.gpu import lease_slot
from reasearch.engine.protocol import Status
from reasearch.engine.training import run_job
from tests.engine.conftest import MODES, needs_mode

# What an attacker tries first: the emulator or simulator of the training jail, then its own native code.
ATTACK = textwrap.dedent("""
    import ctypes, json, os, shutil, sys, tempfile
    repo, out = sys.argv[1], sys.argv[2]
    seen = {}
    for name in ("ale_py", "mujoco", "gymnasium", "scipy", "numpy"):
        try:
            __import__(name)
            seen[name] = "imported"
        except ImportError:
            seen[name] = "missing"

    def load(path):
        try:
            ctypes.CDLL(path)
            return "loaded"
        except OSError as exc:
            return "refused: " + str(exc)

    lib = os.path.join(repo, "native.so")
    seen["repo"] = load(lib)
    for where in ("/tmp", "/dev/shm", out):
        fd, copy = tempfile.mkstemp(suffix=".so", dir=where)
        os.close(fd)
        shutil.copyfile(lib, copy)
        seen[where if where != out else "out"] = load(copy)
        os.unlink(copy)  # process mode shares the host's /tmp
    try:
        fd = os.memfd_create("lib")
        os.write(fd, open(lib, "rb").read())
        seen["memfd"] = load("/proc/self/fd/%d" % fd)
    except OSError as exc:
        seen["memfd"] = "refused: " + str(exc)
    print("SEEN " + json.dumps(seen), flush=True)
""")


@pytest.fixture()
def dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    base = Path("/var/tmp") / f"reasearch-test-scoring-jail-{os.getpid()}-{time.monotonic_ns()}"
    base.mkdir(mode=0o755)
    repo, out = base / "repo", base / "out"
    repo.mkdir(mode=0o755)
    out.mkdir()
    (repo / "attack.py").write_text(ATTACK)
    zygote = next((Path(__file__).resolve().parents[2] / "reasearch" / "engine").glob("_zygote*.so"))
    shutil.copyfile(zygote, repo / "native.so")  # any shared library the candidate ships will do
    os.chmod(repo / "native.so", 0o755)
    monkeypatch.setenv("REASEARCH_LEASE_DIR", str(tmp_path_factory.mktemp("leases")))
    monkeypatch.setenv("REASEARCH_FAKE_GPUS", "1")
    yield repo, out
    shutil.rmtree(base, ignore_errors=True)


def _seen(repo: Path, out: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, str], str]:
    import reasearch.engine._job_launch as job_launch

    written: list[Path] = []  # this job's own mount configs (other processes' jails may write theirs meanwhile)
    real = job_launch._write_config
    monkeypatch.setattr(job_launch, "_write_config", lambda text: written.append(real(text)) or written[-1])
    with lease_slot("gpu", wait_s=5) as lease:
        job = run_job(["python3", str(repo / "attack.py"), str(repo), str(out)], cwd=out, lease=lease,
                      time_budget_s=60, grace_s=1, log_path=repo.parent / "attack.log", binds_ro=[repo],
                      binds_rw=[out], memory_mb=2048, mode=mode, packages=("numpy",), noexec=True)
    assert job.status is Status.OK, job.log_tail
    assert len(written) == (1 if mode == "nsjail" else 0), written
    assert all(p.parent == runtime_root() and not p.exists() for p in written)  # removed with the jail
    line = next(x for x in Path(job.log_path).read_text().splitlines() if x.startswith("SEEN "))
    return json.loads(line[5:]), job.sandbox_mode


@pytest.mark.parametrize("mode", MODES)
def test_a_scoring_jail_imports_only_its_packages(dirs: tuple[Path, Path], mode: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    needs_mode(mode)
    seen, ran = _seen(*dirs, mode, monkeypatch)
    assert ran == mode
    assert seen["numpy"] == "imported"  # the list is there...
    assert {seen[m] for m in ("ale_py", "mujoco", "gymnasium", "scipy")} == {"missing"}  # ...and nothing else


@pytest.mark.parametrize("mode", MODES)
def test_no_native_code_of_the_candidates_loads_in_a_scoring_jail(dirs: tuple[Path, Path], mode: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    needs_mode(mode)
    seen, _ = _seen(*dirs, mode, monkeypatch)
    places = ("repo", "/tmp", "/dev/shm", "out", "memfd")
    if mode == "nsjail":
        for place in places:
            assert seen[place].startswith("refused"), (place, seen[place])
        assert "failed to map segment" in seen["repo"]  # noexec, not a missing file
        assert "Operation not permitted" in seen["memfd"]
    else:  # no mount namespace, no seccomp: it loads, and results say so
        assert seen["repo"] == "loaded" and "nothing is mounted noexec" in PROCESS_SCORING_GAPS


def test_the_training_runtime_still_holds_the_emulator(dirs: tuple[Path, Path]) -> None:
    """Without a package list the job gets the training runtime: the restriction is the scoring jail's only."""
    pytest.importorskip("ale_py")
    repo, out = dirs
    with lease_slot("gpu", wait_s=5) as lease:
        job = run_job(["python3", "-c", "import ale_py; print('EMULATOR', ale_py.__name__)"], cwd=out, lease=lease,
                      time_budget_s=60, grace_s=1, log_path=repo.parent / "train.log", binds_ro=[repo],
                      binds_rw=[out], memory_mb=2048, mode="process")
    assert job.status is Status.OK and "EMULATOR ale_py" in Path(job.log_path).read_text()


def test_a_package_list_is_all_the_runtime_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Direct binds carry the list's entries only; ``direct=False`` (process mode) gets a mirror whose
    site-packages holds nothing else, since direct binds put the host's site-packages folder on PYTHONPATH."""
    import numpy

    from reasearch.engine import _runtime

    monkeypatch.setattr(_runtime, "readable_by_others", lambda path: True)  # as a world-readable interpreter
    monkeypatch.setattr(_runtime, "_hidden_host_paths", lambda: [])
    site = str(Path(numpy.__file__).parents[1])
    direct = _runtime.build_runtime(packages=("numpy",))
    assert direct.kind == "direct"
    entries = sorted(Path(b).name for b in direct.binds if str(Path(b).parent) == site)
    assert entries and all(e.startswith("numpy") for e in entries), entries
    assert site in dict(direct.env)["PYTHONPATH"].split(":")  # harmless in a jail (only the entries are bound)
    mirror = _runtime.build_runtime(packages=("numpy",), direct=False)
    assert mirror.kind == "mirror" and site not in dict(mirror.env)["PYTHONPATH"]
    held = sorted(os.listdir(Path(mirror.where) / "lib" / Path(site).parent.name / "site-packages"))
    assert held and all(e.startswith("numpy") for e in held), held
    full = _runtime.build_runtime()  # the training runtime keeps RUNTIME_PACKAGES
    assert len([b for b in full.binds if str(Path(b).parent) == site]) > len(entries)


def test_a_jail_config_left_by_a_killed_driver_is_cleaned(tmp_path: Path) -> None:
    from reasearch.engine._runtime_clean import RECENT_S, clean_runtime

    old, fresh, other = tmp_path / ".jail-old.cfg", tmp_path / ".jail-new.cfg", tmp_path / "notes.cfg"
    for p in (old, fresh, other):
        p.write_text("mount_proc: true\n")
    past = time.time() - RECENT_S - 60
    os.utime(old, (past, past))
    os.utime(other, (past, past))
    clean_runtime(dry_run=True, root=tmp_path)
    assert old.exists()  # a dry run removes nothing
    clean_runtime(root=tmp_path)
    assert not old.exists() and fresh.exists() and other.exists()
