"""How a training job is launched: its command line (nsjail, or a dedicated uid in process mode), what
the job may reach, the budget's signal, and the end of every process it made.

Trust boundary: everything here prepares or ends the run of untrusted code; it reads nothing the job
wrote except through :mod:`reasearch.engine.files`. See :mod:`reasearch.engine.training` for the rules.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reasearch.engine import _procs
from reasearch.engine._cleanup import free_bytes
from reasearch.engine._jail import noexec_config, nsjail_argv
from reasearch.engine._policy import JAIL_UID
from reasearch.engine._policy import THREAD_ENV as _THREAD_ENV
from reasearch.engine._runtime import build_runtime, runtime_root
from reasearch.engine.exec import _kill_group
from reasearch.engine.files import folder_usage
from reasearch.engine.gpu import SlotLease
from reasearch.engine.isolation import make_launcher
from reasearch.errors import SandboxError, SandboxUnavailableError

__all__ = ["PROCESS_SCORING_GAPS", "command", "end_job", "end_orphaned_job", "gpu_jail_args", "make_reachable",
           "open_log", "over_quota", "signal_job"]

# What a scoring jail cannot hold in process mode (no mount namespace, no seccomp): results say it.
PROCESS_SCORING_GAPS = ("sandbox=process: the runtime's site-packages hold only the scoring packages, but the host's "
                        "files stay readable (code that puts a host site-packages folder on sys.path imports any "
                        "package there) and nothing is mounted noexec (native code in the repository or the "
                        "checkpoint can be loaded)")

_QUOTA_CHECK_S = 2.0  # how often the writable folders' bytes are counted (a hard cap is a tmpfs mount)
_QUOTA_MAX_ENTRIES = 100_000  # entries counted per check; more than this is over the quota too
# Dedicated uids of process-mode jobs: a block per driver process, apart from the sandbox pools' blocks
# (1_800_000_000 and up, see isolation.ProcessLauncher).
_JOB_UID_BASE = 1_700_000_000
_JOB_UIDS = itertools.count()

# Run as ``python -S -c _LAUNCH CONFIG_JSON ARGV...``: dies with the driver's thread, pins cores, sets
# rlimits (process mode), then execs the command (nsjail, or the job itself in process mode).
_LAUNCH = (
    "import ctypes, json, os, resource, sys\n"
    "cfg = json.loads(sys.argv[1])\n"
    "ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)\n"  # PR_SET_PDEATHSIG = SIGKILL
    "if os.getppid() != cfg['ppid']:\n    os._exit(70)\n"  # the driver died before prctl
    "if cfg['cpus']:\n    os.sched_setaffinity(0, cfg['cpus'])\n"
    "for name, value in cfg['rlimits'].items():\n    resource.setrlimit(getattr(resource, name), tuple(value))\n"
    "if cfg['uid'] is not None:\n"  # process mode as root: the job's own uid, no capability, no group
    "    u = cfg['uid']\n"
    "    os.setgroups([]); os.setresgid(u, u, u); os.setresuid(u, u, u)\n"
    "    ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)\n"  # a uid change cleared the parent-death signal
    "    if os.getppid() != cfg['ppid']:\n        os._exit(70)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


class _Config:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.preload: tuple[str, ...] = ()
        self.numba_cache_dir = None


def make_reachable(path: Path, *, writable: bool, uid: int = JAIL_UID) -> None:
    """Lets the job's uid reach ``path``: parents searchable (checked), the tree readable; a writable
    tree is handed to ``uid`` (as root). Without root the jail runs as this user: nothing to do."""
    path = Path(path)
    if os.geteuid() != 0:
        return
    blocked = [str(p) for p in reversed(path.parents) if not p.stat().st_mode & 0o001]
    if blocked:
        raise SandboxError(f"the sandbox uid cannot reach {path}: {', '.join(blocked)} is not searchable by other "
                           "users; put experiment folders under /var/tmp (REASEARCH_EXPERIMENTS_DIR) or chmod o+x")
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
            st = os.lstat(name)
            if writable and st.st_uid != uid:
                os.lchown(name, uid, uid)
            if not os.path.islink(name):
                os.chmod(name, (st.st_mode & 0o777) | (0o055 if os.path.isdir(name) else 0o044))


def gpu_jail_args(lease: SlotLease, binds_ro: Sequence[Path] = ()) -> list[str]:
    """nsjail options for a job on ``lease``: ``binds_ro`` read-only; for a real GPU its device nodes
    (read-write, as devices are opened; nothing else of ``/dev/nvidia*``), ``/proc/driver/nvidia`` and each
    driver library file read-only (:func:`reasearch.engine.gpu.driver_libraries`)."""
    extra: list[str] = []
    for p in binds_ro:
        extra += ["-R", str(p)]
    nodes, libs = lease.jail_binds()
    for node in nodes:
        extra += ["-B", node]
    for src, dst in libs:
        extra += ["-R", f"{src}:{dst}"]
    if nodes and os.path.isdir("/proc/driver/nvidia"):
        extra += ["-R", "/proc/driver/nvidia"]
    return extra


def _splice(cmd: list[str], extra: list[str]) -> list[str]:
    """Inserts nsjail options before the ``--`` that starts the jailed command."""
    i = cmd.index("--")
    return cmd[:i] + extra + cmd[i:]


def job_uid() -> int:
    """A uid no other job of this driver uses now (64 in turn per driver process) and no pool's child uses."""
    return _JOB_UID_BASE + (os.getpid() % 1_000_000) * 64 + next(_JOB_UIDS) % 64


def command(argv: Sequence[str], *, cwd: Path, lease: SlotLease, time_budget_s: float, hard_s: float,
             binds_ro: Sequence[Path], binds_rw: Sequence[Path], env: Mapping[str, str] | None, memory_mb: int | None,
             fsize_mb: int, mode: str, packages: Sequence[str] | None = None, noexec: bool = False,
             ) -> tuple[list[str], str | None, dict[str, str], str, int | None, Path | None]:
    """The launcher command line, its cwd and environment, the mode it resolved to, the job's dedicated
    uid (process mode; None in a jail) and the nsjail config file to remove when the job has ended.

    ``packages``: the only packages the job's runtime holds (a scoring jail's list; None: the training
    runtime). ``noexec``: in a jail, ``binds_ro``, ``binds_rw``, ``/tmp`` and ``/dev/shm`` are mounted
    noexec and ``memfd_create`` is denied (:func:`reasearch.engine._jail.noexec_config`); process mode
    cannot do either (:data:`PROCESS_SCORING_GAPS`)."""
    hard = hard_s
    launcher = make_launcher(_Config(mode), Path("/nonexistent"))  # type: ignore[arg-type]
    job_env = {"REASEARCH_TIME_BUDGET_S": f"{float(time_budget_s):g}",
               "REASEARCH_DEADLINE": f"{time.time() + float(time_budget_s):.3f}", **lease.env(), **dict(env or {})}
    rlimits: dict[str, list[int]] = {}
    uid: int | None = None
    config: Path | None = None
    if launcher.mode == "nsjail":
        runtime = launcher.runtime if packages is None else build_runtime(packages=tuple(packages))
        path = f"{Path(runtime.python).parent}:/usr/local/bin:/usr/bin:/bin"
        argv = [runtime.python, *argv[1:]] if argv[0] in ("python", "python3") else list(argv)
        for p in binds_rw:
            make_reachable(Path(p), writable=True)
        for p in binds_ro:
            make_reachable(Path(p), writable=False)
        _, libs = lease.jail_binds()
        lib_dirs = list(dict.fromkeys(os.path.dirname(dst) for _, dst in libs))
        if lib_dirs:  # the driver's folders that are not in the loader's cache: searched after the runtime's
            job_env["LD_LIBRARY_PATH"] = ":".join(
                filter(None, [dict(runtime.env).get("LD_LIBRARY_PATH", ""), *lib_dirs])
            )
        if noexec:
            config = _write_config(noexec_config([str(p) for p in binds_ro], [str(p) for p in binds_rw],
                                                 tmpfs_mb=1024, tmpfs_mode="1777"))
        cmd = nsjail_argv(argv, runtime=runtime, binds_rw=[] if noexec else [(str(p), str(p)) for p in binds_rw],
                          cwd=str(cwd), env={"PATH": path, "HOME": "/tmp", **job_env},
                          time_limit_s=math.ceil(hard) + 5,
                          rlimit_as_mb=memory_mb if memory_mb is not None else "hard",
                          rlimit_cpu_s="hard", rlimit_nproc=4096, rlimit_fsize_mb=fsize_mb, rlimit_nofile=4096,
                          tmpfs_mb=1024, two_uids=False, config=None if config is None else str(config))
        cmd = _splice(cmd, gpu_jail_args(lease, [] if noexec else binds_ro))
        popen_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        popen_cwd = None
    else:
        if os.geteuid() != 0:
            raise SandboxUnavailableError(
                "process mode runs a training job under a uid of its own so it cannot read the held-out data or "
                "the evaluator secret, which needs root; run the driver as root, or use nsjail (`reasearch "
                "sandbox check` says why it cannot run here)")
        uid = job_uid()
        # World-readable (the driver's interpreter may sit in a 0700 home); a package list gets a mirror holding
        # only those packages (direct binds would put the host's whole site-packages on PYTHONPATH).
        runtime = build_runtime() if packages is None else build_runtime(packages=tuple(packages), direct=False)
        for p in binds_rw:
            make_reachable(Path(p), writable=True, uid=uid)
        for p in binds_ro:
            make_reachable(Path(p), writable=False)
        cmd = list(argv)
        if cmd[0] in ("python", "python3"):
            cmd[0] = runtime.python
        elif "/" not in cmd[0]:
            import shutil

            cmd[0] = shutil.which(cmd[0]) or cmd[0]
        if memory_mb is not None:
            rlimits["RLIMIT_AS"] = [memory_mb << 20] * 2
        rlimits["RLIMIT_FSIZE"] = [fsize_mb << 20] * 2
        rlimits["RLIMIT_CORE"] = [0, 0]
        rlimits["RLIMIT_NPROC"] = [4096, 4096]  # counted per uid: the job's own, so exactly its processes
        popen_env = {"PATH": f"{Path(runtime.python).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": str(cwd),
                     "LANG": "C.UTF-8", "TMPDIR": str(binds_rw[0] if binds_rw else cwd),  # a folder it may write
                     **dict(runtime.env), **_THREAD_ENV, **job_env}
        popen_cwd = str(cwd)
    cfg = {"ppid": os.getpid(), "cpus": list(lease.cpus), "rlimits": rlimits, "uid": uid}
    full = [sys.executable, "-S", "-c", _LAUNCH, json.dumps(cfg), *cmd]
    return full, popen_cwd, popen_env, launcher.mode, uid, config


def _write_config(text: str) -> Path:
    """The config in a new file of the private runtime folder (read by nsjail as it starts; removed by the
    caller when the job has ended)."""
    fd, name = tempfile.mkstemp(prefix=".jail-", suffix=".cfg", dir=runtime_root())
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    return Path(name)


def signal_job(pid: int, mode: str, sig: int) -> None:
    """Sends ``sig`` to the job's processes: in a jail those below nsjail (nsjail itself would kill them
    all on SIGTERM), in process mode the job and its process group too."""
    targets = _procs.descendants_of(pid)
    if mode != "nsjail":
        targets.append(pid)
    for p in targets:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


def end_orphaned_job(uid: int) -> bool:
    """Kills every process of a process-mode job's uid whose driver is gone: a driver killed with ``-9`` kills
    its job (``PR_SET_PDEATHSIG``) but not the job's double-forked daemons, which run on as that uid and hold the
    slot lease they inherited. Nothing is done (False) for a uid outside the jobs' range, or while a process
    whose pid maps to the uid's block still runs (a reused pid may be a live driver that owns the block now)."""
    if not _JOB_UID_BASE <= uid < _JOB_UID_BASE + 1_000_000 * 64:
        return False
    block = (uid - _JOB_UID_BASE) // 64
    table = _procs.process_table()
    if any(p % 1_000_000 == block and not _JOB_UID_BASE <= u < _JOB_UID_BASE + 64_000_000
           for p, (_, _, u, _) in table.items()):
        return False
    _procs.kill_orphans(child_pgid=None, uid=uid)
    return True


def end_job(pid: int, uid: int | None) -> None:
    """Kills the job's whole tree and, for a job with a uid of its own, every process of that uid
    (a double-forked ``setsid`` daemon reparented away from the tree included)."""
    _kill_group(pid)
    if uid is not None:
        _procs.kill_orphans(child_pgid=None, uid=uid, keep_unreaped=pid)


def open_log(log_path: Path) -> Any:
    """The log file, created or truncated, never through a symlink planted at its name."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise SandboxError(f"cannot open the job's log {log_path} ({exc.strerror}); remove what is there") from None
    return os.fdopen(fd, "wb")


def over_quota(quota: tuple[list[Path], int | None, int]) -> str | None:
    """Why the writable folders are over the job's quota or the disk's floor (None: they are not)."""
    folders, max_bytes, min_free = quota
    used = entries = 0
    for folder in folders:
        b, n = folder_usage(folder, _QUOTA_MAX_ENTRIES)
        used, entries = used + b, entries + n
        free = free_bytes(str(folder))
        if min_free and free is not None and free < min_free:
            return f"the disk holding {folder} has {free >> 20} MB free, under the {min_free >> 20} MB floor"
    if max_bytes is not None and used > max_bytes:
        return f"the writable folders hold {used >> 20} MB, over the {max_bytes >> 20} MB quota"
    if entries >= _QUOTA_MAX_ENTRIES:
        return f"the writable folders hold {entries} entries or more, over the {_QUOTA_MAX_ENTRIES} entry quota"
    return None
