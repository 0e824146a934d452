"""The evaluator's secret: hidden test data (EPLB's scored workload windows) is seeded from it.

A public seed and the generator's code are not enough to rebuild what a candidate is scored on: the
trusted side derives the real seed as ``HMAC-SHA256(secret, purpose + parameters)``. The secret is
``$REASEARCH_SECRET`` when set (at least 16 characters), else 32 random bytes created on first use in
``$XDG_DATA_HOME/reasearch/secret`` (default ``~/.local/share/reasearch/secret``), mode 0600 in a 0700
folder, never followed through a symlink. Results record only :func:`fingerprint` (a hash of the
secret), so a run is reproducible on the machine (or with the variable) that made it, and a result
says which secret it was scored under. Nothing here enters the sandbox: this module carries no jail
marker, the jail binds no home folder, and the sandbox environment is an allowlist without this variable.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reasearch.errors import ConfigError

__all__ = ["ENV_VAR", "derive_seed", "fingerprint", "secret", "secret_path"]

ENV_VAR = "REASEARCH_SECRET"
_SIZE = 32
_MIN_ENV_CHARS = 16


def secret_path() -> Path:
    """Where the secret file lives (``$XDG_DATA_HOME/reasearch/secret``)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "reasearch" / "secret"


def _read_file(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise ConfigError(f"the secret file {path} is a symlink; delete it (a secret is never read through a "
                          "link: whoever made it may know the key)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise ConfigError(f"the secret file {path} must be a regular file of uid {os.geteuid()} with mode 0600 "
                              f"(it is mode {stat.S_IMODE(st.st_mode):o}, uid {st.st_uid}); fix or delete it")
        data = os.read(fd, _SIZE + 1)
    finally:
        os.close(fd)
    if len(data) != _SIZE:
        raise ConfigError(f"the secret file {path} holds {len(data)} bytes, not {_SIZE}; delete it to make a new one "
                          "(results scored under the old secret will no longer reproduce)")
    return data


def secret() -> bytes:
    """The secret key (from ``$REASEARCH_SECRET``, else the secret file, created on first use).

    Raises:
        ConfigError: the variable is too short, or the file is not a private regular file of ours.
    """
    env = os.environ.get(ENV_VAR)
    if env is not None:
        if len(env) < _MIN_ENV_CHARS:
            raise ConfigError(f"{ENV_VAR} must be at least {_MIN_ENV_CHARS} characters (a random string)")
        return env.encode("utf-8")
    path = secret_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        return _read_file(path)
    except FileNotFoundError:
        pass
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:  # made by a concurrent process: use it
        return _read_file(path)
    try:
        os.write(fd, os.urandom(_SIZE))
    finally:
        os.close(fd)
    return _read_file(path)


def fingerprint(key: bytes | None = None) -> str:
    """A short public hash of the secret (recorded with results; it does not reveal the secret)."""
    key = secret() if key is None else key
    return hashlib.sha256(b"reasearch secret fingerprint\0" + key).hexdigest()[:16]


def derive_seed(purpose: str, params: Mapping[str, Any], key: bytes | None = None) -> int:
    """A seed in ``[0, 2**63)`` that only the secret's holder can compute from ``purpose`` and ``params``."""
    key = secret() if key is None else key
    message = json.dumps([purpose, dict(params)], sort_keys=True, separators=(",", ":")).encode("utf-8")
    return int.from_bytes(hmac.new(key, message, hashlib.sha256).digest()[:8], "big") >> 1
