"""Which isolation this machine offers, and how a worker (or a one-off command) is launched in it.

Two modes:

* ``nsjail``: the bundled nsjail binary runs each worker in its own user, PID, mount, network, IPC
  and UTS namespaces, as an unprivileged uid, with a read-only interpreter and site-packages, a
  tmpfs ``/tmp``, no network (only an unconnected ``lo``), seccomp denying namespace (``unshare``,
  ``setns`` and ``clone`` with namespace flags), mount, ptrace, bpf, keyctl, perf, io_uring, SysV IPC
  and POSIX message-queue calls (``clone3`` answers ENOSYS so threads fall back to ``clone``; see
  :mod:`reasearch.engine._policy`), and jail-level rlimits; the worker applies the per-evaluation
  limits in each child.
* ``process``: rlimits, a new session and process-group kills only (as root also a separate child
  uid and a private IPC namespace where no SysV object or message queue can be created). No
  filesystem or network isolation and no seccomp: every result says ``sandbox="process"`` and a
  warning is logged once.

The interpreter this process runs may live where the sandbox uid cannot read it (pyenv under a 0700
``/root``): :mod:`reasearch.engine._runtime` then mirrors what the workers need into a world-readable
folder, and the report says so.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from reasearch.engine import _jail
from reasearch.engine._jail import IsolationReport, nsjail_binary
from reasearch.engine._policy import CHILD_UID_IN_JAIL, JAIL_UID, SECCOMP_POLICY, THREAD_ENV
from reasearch.engine.config import SandboxConfig
from reasearch.errors import SandboxUnavailableError

__all__ = [
    "CHILD_UID_IN_JAIL",
    "JAIL_UID",
    "SECCOMP_POLICY",
    "IsolationReport",
    "detect_isolation",
    "make_launcher",
    "nsjail_binary",
]

log = logging.getLogger("reasearch.engine")

_warned_process = False
_POOL_SLOTS = itertools.count()


# The only variables a process-mode worker inherits: API keys and tokens in the engine's environment
# must never reach candidate code.
_PASS_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR")


def _process_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: os.environ[k] for k in _PASS_ENV if k in os.environ}
    env.update(THREAD_ENV)
    env.update(extra)
    return env


class ProcessLauncher:
    """Workers as plain subprocesses (rlimits, sessions, group kills; no filesystem or network isolation)."""

    mode = "process"

    def __init__(self, config: SandboxConfig, tmp: Path) -> None:
        self.config = config
        self.tmp = tmp
        self.numba_base = Path(config.numba_cache_dir) if config.numba_cache_dir else tmp / "numba"
        # Scratch dirs on tmpfs where there is one: creating and removing a dir per evaluation on a
        # journaling disk filesystem costs about a millisecond.
        shm = Path("/dev/shm")
        if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK):
            self.scratch_base = Path(tempfile.mkdtemp(prefix="reasearch-scratch-", dir=shm))
            os.chmod(self.scratch_base, 0o711)
        else:
            self.scratch_base = tmp
        # As root, each child drops to a dedicated uid (keeping only CAP_DAC_READ_SEARCH): root would
        # ignore RLIMIT_NPROC and could kill its worker.
        self.root = os.geteuid() == 0
        # A block of uids no other pool (in this or, barring pid reuse, another process) uses.
        self._uid_base = (1_800_000_000 + (os.getpid() % 500_000) * 4096 + (next(_POOL_SLOTS) * 64) % 4096
                          if self.root else None)

    def child_uid(self, index: int) -> int | None:
        return None if self._uid_base is None else self._uid_base + index % 64

    @property
    def separate_child_uid(self) -> bool:
        return self._uid_base is not None

    def worker_command(self, index: int, preload: tuple[str, ...] | None = None) -> tuple[list[str], dict[str, str]]:
        wdir = self.scratch_base / f"w{index}"
        wdir.mkdir(mode=0o711, exist_ok=True)
        numba_dir = self.numba_base / f"w{index}"
        numba_dir.mkdir(parents=True, exist_ok=True)
        cfg = {
            "scratch_root": str(wdir / "scratch"),
            "preload": list(self.config.preload if preload is None else preload),
            "child_uid": self.child_uid(index),
            "keep_read_search": self.root,
            "report_child": not self.root,
            "private_ipc": self.root,
            "min_free_bytes": int(getattr(self.config, "scratch_min_free_mb", 0)) << 20,
            "zygote": bool(getattr(self.config, "zygote", True)),
        }
        argv = [sys.executable, "-m", "reasearch.engine._worker", json.dumps(cfg)]
        return argv, _process_env({"NUMBA_CACHE_DIR": str(numba_dir)})

    def describe(self) -> str:
        return "sandbox=process (no filesystem or network isolation): rlimits, own session, process-group kills"

    def keepalive(self) -> None:
        """Nothing to keep alive: process mode runs the interpreter in place."""

    def cleanup(self) -> None:
        """Removes the scratch base (the pool removes its own temp dir)."""
        if self.scratch_base != self.tmp:
            shutil.rmtree(self.scratch_base, ignore_errors=True)


def make_launcher(config: SandboxConfig, tmp: Path) -> Any:
    """The launcher for ``config.mode`` (``auto`` resolves here; process fallback warns once)."""
    global _warned_process
    mode = str(config.mode)
    if mode == "process":
        return ProcessLauncher(config, tmp)
    problem = _jail.nsjail_problem()
    if problem is None:
        return _jail.NsjailLauncher(config, tmp)
    if mode == "nsjail":
        raise SandboxUnavailableError(f"nsjail mode cannot run here: {problem}")
    if not _warned_process:
        log.warning("SANDBOX: nsjail is unavailable (%s); falling back to sandbox=process (no filesystem or "
                    "network isolation). Run `reasearch sandbox check` for details.", problem)
        _warned_process = True
    return ProcessLauncher(config, tmp)


def detect_isolation() -> IsolationReport:
    """Probes this machine: can nsjail run a jailed interpreter, and how is the runtime made visible?"""
    return _jail.probe()

