"""The soak's training runs: where their experiments and slot leases live, and how the harness finds a training job.

A ``training`` run is an agent on the toy training task (:class:`reasearch.evaluators.testing.ToyRepoTrainingTask`:
``train.py`` sleeps :data:`reasearch._chaos.endpoint.TRAIN_SLEEP_S`, then saves the x of its ``settings.json``; no
torch), each experiment one training job (:func:`reasearch.engine.training.run_job`) on a leased slot. The soak
gives its drivers an experiments root of its own under ``/var/tmp`` (the job's uid must reach it), a lease folder
of its own and one fake GPU (so two training runs at once share one slot, and a killed driver's lease is what
the next experiment waits on). The harness finds the job as it finds a sandbox worker: among the processes under
the driver, the deepest whose command runs ``train.py`` (the job itself in process mode, the jailed interpreter
under nsjail).

Trust boundary: reads ``/proc`` and the soak's own folders; kills only processes under its own drivers.
"""

from __future__ import annotations

import errno
import fcntl
import os
import tempfile
from pathlib import Path

__all__ = ["TRAINER_WAIT_S", "experiment_processes", "held_leases", "is_trainer", "job_of", "running",
           "training_env"]

TRAINER_WAIT_S = 10.0  # a fault that needs a running training job waits this long after its moment for one


def training_env(root: str) -> tuple[dict[str, str], str, str]:
    """The drivers' environment for training runs, the experiments root and the lease folder (both created)."""
    exp = Path(tempfile.mkdtemp(prefix="reasearch-chaos-exp-", dir="/var/tmp"))
    exp.chmod(0o711)  # the job's own uid (process mode) or the jail's must reach the experiment folders
    leases = Path(root) / "leases"
    leases.mkdir(mode=0o700, exist_ok=True)
    env = {"REASEARCH_EXPERIMENTS_DIR": str(exp / "experiments"), "REASEARCH_LEASE_DIR": str(leases),
           "REASEARCH_FAKE_GPUS": "1", "REASEARCH_CPUS_PER_SLOT": "1", "REASEARCH_KEEP_CHECKPOINTS": ""}
    return env, str(exp / "experiments"), str(leases)


def job_of(pids: list[int]) -> int | None:
    """The training job among ``pids`` (processes running ``train.py`` under a driver): the earliest started that
    is not an nsjail (under nsjail, the jailed interpreter; a daemon the job forked starts later). An nsjail
    when it is all there is yet."""
    jobs = [p for p in pids if not _is_nsjail(p)]
    return min(jobs, key=_start_ticks) if jobs else (pids[0] if pids else None)


def running(pid: int) -> bool:
    """True while ``pid`` runs (not a zombie): a job whose command line reads empty for a moment (its launcher
    is exec'ing it) is still there."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def _is_nsjail(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0", 1)[0].endswith(b"nsjail")
    except OSError:
        return False


def _start_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[-1].split()[19])
    except (OSError, ValueError, IndexError):
        return 1 << 62


def is_trainer(pid: int) -> bool:
    """True when ``pid`` runs ``train.py`` (a training job, or the nsjail that holds one)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return any(a == b"train.py" or a.endswith(b"/train.py") for a in argv)


def experiment_processes(experiments: str) -> dict[int, str]:
    """Processes whose working folder lies under the experiments root (a training job runs in its repository
    copy there): pid -> command line."""
    out: dict[int, str] = {}
    if not experiments:
        return out
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{name}/cwd")
            with open(f"/proc/{name}/stat", "rb") as f:
                zombie = f.read().rsplit(b")", 1)[-1].split()[0] in (b"Z", b"X")
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
        if not zombie and (cwd == experiments or cwd.startswith(experiments + os.sep)):
            out[int(name)] = cmd[:120]
    return out


def held_leases(leases: str) -> list[str]:
    """The slot lock files in ``leases`` that someone still holds (each: path and the holder it recorded)."""
    out: list[str] = []
    try:
        names = sorted(os.listdir(leases)) if leases else []
    except OSError:
        return out
    for name in names:
        path = os.path.join(leases, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
                out.append(f"{path} (holder: {holder or 'unknown'})")
        finally:
            os.close(fd)
    return out
