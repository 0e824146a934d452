"""EPLB's scored windows depend on the evaluator's secret, which never enters the sandbox."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

import reasearch
from reasearch.errors import ConfigError
from reasearch.evaluators import _secret
from reasearch.evaluators.eplb import SyntheticWorkload
from reasearch.evaluators.result import Status

SECRET_A = "secret-a-0123456789abcdef"
SECRET_B = "secret-b-0123456789abcdef"


def _windows(monkeypatch: pytest.MonkeyPatch, secret: str, **params: object) -> tuple[np.ndarray, dict]:
    monkeypatch.setenv(_secret.ENV_VAR, secret)
    return reasearch.make("eplb/v1", num_windows=3, **params).workload_windows()


def test_public_seed_and_generator_do_not_rebuild_the_scored_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    windows, info = _windows(monkeypatch, SECRET_A)
    # what a candidate holding the generator and the public seed (0) would compute
    for guess_seed in (0, int(info["trace_seed"])):
        guess = SyntheticWorkload(seed=guess_seed, window_size=100).windows(3)
        assert not np.array_equal(guess, windows)
    assert info["trace_seed"] == 0 and "seed" not in info["trace_params"]
    assert info["trace_secret"] == _secret.fingerprint(SECRET_A.encode())
    assert SECRET_A not in repr(info)


def test_same_secret_reproduces_other_secret_differs(monkeypatch: pytest.MonkeyPatch) -> None:
    a1, _ = _windows(monkeypatch, SECRET_A)
    a2, _ = _windows(monkeypatch, SECRET_A)
    b, info_b = _windows(monkeypatch, SECRET_B)
    assert np.array_equal(a1, a2)
    assert not np.array_equal(a1, b)
    assert info_b["trace_secret"] == _secret.fingerprint(SECRET_B.encode()) != _secret.fingerprint(SECRET_A.encode())
    # the public seed still selects different traces under one secret
    c, _ = _windows(monkeypatch, SECRET_A, trace_seed=1)
    assert not np.array_equal(a1, c)


def test_fingerprint_is_recorded_in_provenance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_secret.ENV_VAR, SECRET_A)
    task = reasearch.make("eplb/v1", num_windows=2)
    res = task.evaluate(task.seed_program())
    assert res.status is Status.OK, res.feedback
    fp = _secret.fingerprint(SECRET_A.encode())
    assert res.metrics["trace_secret"] == fp and res.provenance is not None
    assert res.provenance.versions["trace_secret"] == fp
    assert SECRET_A not in repr(res.to_dict())


def test_secret_file_is_created_private_and_reused(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.delenv(_secret.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    key = _secret.secret()
    path = tmp_path / "reasearch" / "secret"
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()
    assert stat.S_IMODE(os.lstat(path.parent).st_mode) == 0o700
    assert len(key) == 32 and _secret.secret() == key  # reused, not regenerated
    assert _secret.derive_seed("p", {"x": 1}) == _secret.derive_seed("p", {"x": 1}, key)
    assert _secret.derive_seed("p", {"x": 1}) != _secret.derive_seed("p", {"x": 2})


def test_secret_file_that_others_can_read_or_a_symlink_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.delenv(_secret.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    folder = tmp_path / "reasearch"
    folder.mkdir()
    (folder / "secret").write_bytes(b"k" * 32)
    os.chmod(folder / "secret", 0o644)
    with pytest.raises(ConfigError, match="mode 0600"):
        _secret.secret()
    os.unlink(folder / "secret")
    planted = tmp_path / "planted"
    planted.write_bytes(b"p" * 32)
    os.chmod(planted, 0o600)
    os.symlink(planted, folder / "secret")  # an attacker's known key
    with pytest.raises(ConfigError, match="symlink"):
        _secret.secret()
    os.unlink(folder / "secret")
    (folder / "secret").write_bytes(b"short")
    os.chmod(folder / "secret", 0o600)
    with pytest.raises(ConfigError, match="5 bytes"):
        _secret.secret()


def test_short_env_secret_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_secret.ENV_VAR, "short")
    with pytest.raises(ConfigError, match="at least 16"):
        _secret.secret()


def test_work_outside_the_timed_calls_is_reported_not_scored(monkeypatch: pytest.MonkeyPatch) -> None:
    """Import-time work is not in t_alg (the spec times the calls); it shows in cpu_beyond_calls_s."""
    monkeypatch.setenv(_secret.ENV_VAR, SECRET_A)
    task = reasearch.make("eplb/v1", num_windows=3)
    burn = "import time as _time\n_t0 = _time.thread_time()\nwhile _time.thread_time() - _t0 < 0.8:\n    pass\n"
    res = task.evaluate(burn + task.seed_program())
    assert res.status is Status.OK, res.feedback
    assert res.metrics["cpu_beyond_calls_s"] >= 0.6, (res.cpu_s, res.metrics["t_alg_per_window_s"])
    assert sum(res.metrics["t_alg_per_window_s"]) < res.cpu_s
    plain = task.evaluate(task.seed_program())
    assert plain.metrics["bal_expert"] == res.metrics["bal_expert"]  # same windows, same placements
