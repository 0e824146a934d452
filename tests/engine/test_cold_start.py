"""Cold start: what a fresh process pays before its first evaluation, and what it may skip.

A mirror verified by another of our processes moments ago is not walked again (a stamp in the private
root, trusted exactly as far as the mirror itself); a passed nsjail probe is remembered the same way;
a lazily started pool starts one worker, with the first request's image, on first need.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from reasearch.engine import SandboxConfig, SandboxPool, _jail, _runtime, _runtime_root
from reasearch.engine.protocol import RunRequest
from reasearch.evaluators.result import Status
from tests.engine.conftest import MODES, needs_mode

FOREIGN_UID = 54321


@pytest.fixture()
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small tree built and verified the way the runtime mirror is, in a private root of its own."""
    monkeypatch.setattr(_runtime_root, "_REVERIFY_S", 300.0)
    monkeypatch.setattr(_runtime_root, "_verified", {})
    root = tmp_path / "root"
    root.mkdir(mode=0o711)
    final = root / "reasearch-runtime-test"

    def build(work: Path) -> None:
        (work / "lib").mkdir(mode=0o755)
        (work / "lib" / "mod.py").write_text("X = 1\n")

    assert _runtime_root._reuse_or_build(final, build, full=False) is True
    return final


def _walks(final: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many times a fresh process (no memory of its own) walks ``final`` on reuse."""
    monkeypatch.setattr(_runtime_root, "_verified", {})
    calls = []
    real = _runtime_root._verify

    def counting(top: Path, **kw: object) -> str | None:
        calls.append(top)
        return real(top, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(_runtime_root, "_verify", counting)
    assert _runtime_root._reuse_or_build(final, lambda work: None, full=False) is False
    monkeypatch.setattr(_runtime_root, "_verify", real)
    return len(calls)


def test_a_fresh_process_reuses_a_recent_verification_of_ours(mirror: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stamp = _runtime_root._stamp_path(mirror)
    st = os.lstat(stamp)
    assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o600
    assert _walks(mirror, monkeypatch) == 0


def test_a_stamp_for_another_folder_object_is_not_trusted(mirror: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stamp = _runtime_root._stamp_path(mirror)
    data = json.loads(stamp.read_text())
    data["identity"][0] += 1  # another folder inode than the one verified
    stamp.write_text(json.dumps(data))
    assert _walks(mirror, monkeypatch) == 1


def test_an_old_stamp_is_not_trusted(mirror: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stamp = _runtime_root._stamp_path(mirror)
    data = json.loads(stamp.read_text())
    data["at"] = time.time() - 301.0
    stamp.write_text(json.dumps(data))
    assert _walks(mirror, monkeypatch) == 1


@pytest.mark.parametrize("how", ["mode", "owner", "symlink"])
def test_a_stamp_others_could_have_written_is_not_trusted(mirror: Path, monkeypatch: pytest.MonkeyPatch,
                                                         how: str) -> None:
    stamp = _runtime_root._stamp_path(mirror)
    if how == "mode":
        os.chmod(stamp, 0o666)
    elif how == "owner":
        if os.geteuid() != 0:
            pytest.skip("chown to another uid needs root")
        os.chown(stamp, FOREIGN_UID, FOREIGN_UID)
    else:
        real = stamp.with_name("elsewhere")
        os.rename(stamp, real)
        os.symlink(real, stamp)
    assert _walks(mirror, monkeypatch) == 1


def test_a_changed_mirror_is_walked_and_rebuilt_despite_its_stamp(
    mirror: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest rewritten (a new object) changes the identity the stamp vouches for."""
    manifest = mirror / "MANIFEST.json"
    text = manifest.read_text()
    manifest.unlink()
    manifest.write_text(text)
    (mirror / "lib" / "planted.py").write_text("")
    monkeypatch.setattr(_runtime_root, "_verified", {})
    built = []
    assert _runtime_root._reuse_or_build(mirror, lambda work: built.append(work), full=False) is True
    assert built and not (mirror / "lib" / "planted.py").exists()


def test_prune_removes_the_stamps_of_removed_mirrors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = tmp_path / "base"
    base.mkdir(mode=0o755)
    monkeypatch.setenv("REASEARCH_RUNTIME_DIR", str(base))
    root = _runtime.runtime_root()
    kept, gone = root / "reasearch-runtime-aaa", root / "reasearch-runtime-bbb"
    kept.mkdir()
    for name in (kept.name, gone.name):
        _runtime.write_stamp(_runtime_root._stamp_path(root / name), [1])
    _runtime.write_stamp(root / ".verified-nsjail-probe", [1])
    _runtime_root._prune()
    assert _runtime_root._stamp_path(kept).exists() and (root / ".verified-nsjail-probe").exists()
    assert not _runtime_root._stamp_path(gone).exists()


# ------------------------------------------------------------------------------------- the probe


def test_a_passed_probe_is_remembered_a_failed_one_is_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = tmp_path / "base"
    base.mkdir(mode=0o755)
    monkeypatch.setenv("REASEARCH_RUNTIME_DIR", str(base))
    monkeypatch.setattr(_runtime_root, "_REVERIFY_S", 300.0)
    monkeypatch.setattr(_jail, "_probe_key", lambda: ["nsjail", 1, 2, 3, "boot"])
    probes: list[bool] = []

    def fake_probe(ok: bool) -> _jail.IsolationReport:
        probes.append(ok)
        return _jail.IsolationReport(mode="nsjail" if ok else "process", nsjail_ok=ok, nsjail_binary="nsjail",
                                     runtime="", checks=(), problems=() if ok else ("no jail",))

    monkeypatch.setattr(_jail, "probe", lambda: fake_probe(False))
    for _ in range(2):
        _jail.nsjail_problem.cache_clear()
        assert _jail.nsjail_problem() == "no jail"
    assert probes == [False, False]  # a failure is probed again by every process
    monkeypatch.setattr(_jail, "probe", lambda: fake_probe(True))
    _jail.nsjail_problem.cache_clear()
    assert _jail.nsjail_problem() is None
    _jail.nsjail_problem.cache_clear()
    assert _jail.nsjail_problem() is None
    assert probes == [False, False, True]  # the second process trusted the first one's pass
    monkeypatch.setattr(_jail, "_probe_key", lambda: ["nsjail", 1, 2, 4, "boot"])  # the binary changed
    _jail.nsjail_problem.cache_clear()
    assert _jail.nsjail_problem() is None
    assert probes == [False, False, True, True]
    _jail.nsjail_problem.cache_clear()


# ----------------------------------------------------------------------------- lazy start


@pytest.mark.parametrize("mode", MODES)
def test_a_lazy_pool_starts_one_worker_with_the_first_requests_image(mode: str) -> None:
    needs_mode(mode)
    with SandboxPool(SandboxConfig(mode=mode, workers=2, lazy_start=True)) as pool:
        assert [w.proc for w in pool._workers] == [None, None]  # nothing started with the pool
        out = pool.run(RunRequest(source="import numpy as np\n\ndef run():\n    return int(np.arange(4).sum())\n"))
        assert out.status is Status.OK and out.value == 6 and out.sandbox_mode == mode
        started = [w for w in pool._workers if w.proc is not None]
        assert len(started) == 1 and started[0].profile == ("numpy",)
        assert pool.profile_switches == 0 and pool.restarts == 0  # a first start, not a replacement
        # the same image again: the warm worker serves, the other slot stays cold
        assert pool.run(RunRequest(source="import numpy\n\ndef run():\n    return 1\n")).value == 1
        assert sum(w.proc is not None for w in pool._workers) == 1
        # another image: the cold slot starts with it; the warm NumPy worker is not thrown away
        assert pool.run(RunRequest(source="def run():\n    return 2\n")).value == 2
        assert sorted(w.profile for w in pool._workers) == [(), ("numpy",)]
        assert pool.profile_switches == 0


def test_a_lazy_slot_whose_image_cannot_start_fails_that_request_and_starts_later(tmp_path: Path) -> None:
    with SandboxPool(SandboxConfig(mode="process", workers=1, lazy_start=True)) as pool:
        bad = RunRequest(source="def run():\n    return 1\n", preload=("numpy.no_such_module_xyz",))
        with pytest.raises(Exception, match="could not preload"):
            pool.run(bad)
        assert pool.run(RunRequest(source="def run():\n    return 3\n")).value == 3


def test_default_pool_starts_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    from reasearch.engine import sandbox

    made: list[SandboxConfig | None] = []

    class Recording:
        closed = False

        def __init__(self, config: SandboxConfig | None = None) -> None:
            made.append(config)

    monkeypatch.setattr(sandbox, "SandboxPool", Recording)
    monkeypatch.setattr(sandbox, "_default", None)
    sandbox.default_pool()
    monkeypatch.setattr(sandbox, "_default", None)
    assert made and made[0] is not None and made[0].lazy_start


def test_lazy_start_must_be_a_bool() -> None:
    from reasearch.errors import ConfigError

    with pytest.raises(ConfigError, match="lazy_start"):
        SandboxConfig(lazy_start="yes")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- prestart


@pytest.mark.parametrize("mode", MODES)
def test_a_slot_started_ahead_serves_the_request_it_was_started_for(mode: str) -> None:
    needs_mode(mode)
    req = RunRequest(source="import numpy\n\ndef run():\n    return 7\n")
    with SandboxPool(SandboxConfig(mode=mode, workers=2, lazy_start=True)) as pool:
        assert pool.prestart(req) is True
        assert pool.prestart(req) is False  # already on its way: not a second slot
        out = pool.run(req)  # waits for the slot started ahead rather than starting the other one
        assert out.status is Status.OK and out.value == 7
        assert [w.profile for w in pool._workers if w.proc is not None] == [("numpy",)]
        assert sum(w.cold for w in pool._workers) == 1 and pool.profile_switches == 0
        assert pool.prestart(req) is False  # a worker with that image is up


def test_prestart_needs_a_cold_slot_and_a_failed_one_is_reported_by_the_request() -> None:
    with SandboxPool(SandboxConfig(mode="process", workers=1)) as eager:
        assert eager.prestart(RunRequest(source="def run():\n    return 1\n")) is False  # nothing cold
    bad = RunRequest(source="def run():\n    return 1\n", preload=("numpy.no_such_module_xyz",))
    with SandboxPool(SandboxConfig(mode="process", workers=1, lazy_start=True)) as pool:
        assert pool.prestart(bad) is True
        with pytest.raises(Exception, match="could not preload"):
            pool.run(bad)  # the slot stayed cold: the request starts it and says why it fails
        assert pool.run(RunRequest(source="def run():\n    return 3\n")).value == 3


def test_reasearch_eval_starts_the_sandbox_ahead_for_a_python_candidate(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from reasearch._cli import tasks as cli_tasks

    seen: list[str] = []
    monkeypatch.setattr(SandboxPool, "prestart", lambda self, req: seen.append(req.source) or True)
    monkeypatch.setattr(SandboxPool, "__init__", lambda self, config=None: setattr(self, "_closed", False))
    from reasearch.engine import sandbox

    monkeypatch.setattr(sandbox, "_default", None)
    cand = tmp_path / "cand.py"
    cand.write_text("def run():\n    return 1\n")
    (tmp_path / "prompt.txt").write_text("be brief")
    for path in (str(tmp_path / "prompt.txt"), str(tmp_path / "missing.py"), str(cand)):
        cli_tasks._start_sandbox_ahead(path)
    for t in threading.enumerate():
        if t.name == "reasearch-sandbox-ahead":
            t.join(10)
    monkeypatch.setattr(sandbox, "_default", None)
    assert seen == ["def run():\n    return 1\n"]
