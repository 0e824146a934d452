"""Accelerator slots: GPU discovery (no torch import) and exclusive leases across processes.

A *slot* is what one experiment runs on: one GPU, or (on a machine without usable GPUs) a set of
pinned CPU cores. :func:`lease_slot` takes one exclusively for the whole machine: each slot has a
lock file in a lock folder owned by this user, held with ``fcntl.flock``. The kernel drops a flock
when the last descriptor on it closes, so a holder that dies (``kill -9`` included) never leaks its
slot; several agent runs (separate processes) on one box therefore share its GPUs correctly.

Discovery: ``REASEARCH_FAKE_GPUS=N`` declares N fake devices (tests; nothing is bound into the
jail for them); otherwise ``nvidia-smi --query-gpu=index,uuid,name,memory.total`` when it is on
PATH; otherwise ``/proc/driver/nvidia/gpus/*/information``. A device whose ``/dev/nvidiaN`` node
is missing is listed by :func:`gpu_report` with the reason and never leased.

A lease sets ``CUDA_VISIBLE_DEVICES`` to its device (``""`` for a CPU slot, so a CUDA build sees no
GPU) and the thread counts of OpenMP/MKL to its cores, and names what to bind into the jail: the
device nodes ``/dev/nvidiaN`` plus ``/dev/nvidiactl``, ``/dev/nvidia-uvm``, ``/dev/nvidia-uvm-tools`` and
``/dev/nvidia-caps`` (those present), and the driver's user-space libraries (:func:`driver_libraries`),
each file bound read-only on its own, never their folder.

Devices this process may use: when ``CUDA_VISIBLE_DEVICES`` is set in the process that leases (a Ray
task with ``num_gpus``: Ray sets it to the GPUs it assigned; or a user restricting a run), only the
devices it names are candidates (numbers are driver indices, i.e. ``nvidia-smi`` order as under
``CUDA_DEVICE_ORDER=PCI_BUS_ID``; ``GPU-...`` entries are UUIDs or their prefixes); an empty value means
none (CPU slots). The lease on the chosen device is still the machine-wide flock, so processes outside
Ray on the same box never collide with Ray's tasks. The engine never imports Ray.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from reasearch.engine.waits import NOTICE_EVERY_S, WaitTicker, describe_holder, holder_record
from reasearch.errors import ConfigError, SandboxError

__all__ = [
    "GpuDevice", "GpuReport", "SlotBusyError", "SlotLease", "cpu_slots", "discover_gpus", "driver_libraries",
    "gpu_report", "lease_dir", "lease_slot", "slot_status", "visible_devices",
]

_CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-caps")
# The driver's user-space libraries a CUDA process loads (libcuda dlopens the others by soname).
_DRIVER_LIB = re.compile(r"^lib(cuda|cudadebugger|nvidia-(ml|ptxjitcompiler|nvvm|gpucomp|allocator|fatbinaryloader))"
                         r"\.so(\.[0-9]+)*$")
_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
             "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/wsl/lib")


class SlotBusyError(SandboxError):
    """No slot of the requested kind became free within the wait."""


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One NVIDIA device as the driver lists it.

    Attributes:
        index: the driver's index (``/dev/nvidia{index}``, ``CUDA_VISIBLE_DEVICES``).
        uuid: the device UUID (``GPU-...``), or ``fake-N`` for a faked device.
        name: product name.
        memory_mb: total memory in MiB (0 when unknown).
        fake: True for devices declared by ``REASEARCH_FAKE_GPUS`` (no device node is bound).
    """

    index: int
    uuid: str
    name: str
    memory_mb: int = 0
    fake: bool = False

    @property
    def node(self) -> str:
        return f"/dev/nvidia{self.index}"


@dataclass(frozen=True, slots=True)
class GpuReport:
    """What ``reasearch sandbox check --gpu`` prints: the devices seen and why each is (not) usable.

    Attributes:
        source: where the list came from (``fake``, ``nvidia-smi``, ``/proc/driver/nvidia``, ``none``).
        usable: devices experiments can lease.
        unusable: ``(device, reason)`` for each device that cannot be leased.
        note: why no device was found, when none was.
    """

    source: str
    usable: tuple[GpuDevice, ...]
    unusable: tuple[tuple[GpuDevice, str], ...] = ()
    note: str = ""


def _fake_count() -> int | None:
    raw = os.environ.get("REASEARCH_FAKE_GPUS")
    if raw is None or raw == "":
        return None
    try:
        n = int(raw)
    except ValueError:
        raise ConfigError(f"REASEARCH_FAKE_GPUS must be a whole number, not {raw!r}") from None
    if not 0 <= n <= 64:
        raise ConfigError(f"REASEARCH_FAKE_GPUS must be between 0 and 64, not {n}")
    return n


def _from_nvidia_smi(binary: str) -> list[GpuDevice] | None:
    try:
        cp = subprocess.run([binary, "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"],
                            capture_output=True, text=True, timeout=20, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if cp.returncode != 0:
        return None
    out = []
    for line in cp.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not parts[0].isdigit():
            continue
        mem = re.match(r"\d+", parts[3])
        out.append(GpuDevice(int(parts[0]), parts[1], parts[2], int(mem.group()) if mem else 0))
    return out


def _from_proc(root: Path = Path("/proc/driver/nvidia/gpus")) -> list[GpuDevice]:
    out: list[GpuDevice] = []
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        try:
            info = (d / "information").read_text()
        except OSError:
            continue
        fields = dict((k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in info.splitlines()) if v)
        minor = fields.get("Device Minor", "")
        if not minor.isdigit():
            continue
        out.append(GpuDevice(int(minor), fields.get("GPU UUID", d.name), fields.get("Model", "NVIDIA GPU")))
    return out


def gpu_report() -> GpuReport:
    """Discovers GPUs (without importing torch) and says which can be leased, and why not."""
    fake = _fake_count()
    if fake is not None:
        devices = tuple(GpuDevice(i, f"fake-{i}", "fake GPU", 0, fake=True) for i in range(fake))
        visible = visible_devices()
        if visible is not None:
            why = f"not in CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')!r} of this process"
            return GpuReport("fake", tuple(d for d in devices if _is_visible(d, visible)),
                             tuple((d, why) for d in devices if not _is_visible(d, visible)),
                             note="" if fake else "REASEARCH_FAKE_GPUS=0")
        return GpuReport("fake", devices, note="" if fake else "REASEARCH_FAKE_GPUS=0")
    smi = shutil.which("nvidia-smi")
    found = _from_nvidia_smi(smi) if smi else None
    source = "nvidia-smi"
    if found is None:
        found, source = _from_proc(), "/proc/driver/nvidia"
    if not found:
        note = ("nvidia-smi failed and " if smi else "no nvidia-smi on PATH and ") + \
            "/proc/driver/nvidia/gpus lists no device (no NVIDIA driver loaded): experiments use CPU slots"
        return GpuReport("none", (), note=note)
    usable, unusable = [], []
    visible = visible_devices()
    for dev in found:
        if visible is not None and not _is_visible(dev, visible):
            unusable.append((dev, f"not in CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')!r} of this "
                                  "process (a Ray task gets the GPUs Ray assigned it)"))
        elif not os.path.exists(dev.node):
            unusable.append((dev, f"{dev.node} does not exist (driver listed the device, but no device node)"))
        elif not os.path.exists("/dev/nvidiactl"):
            unusable.append((dev, "/dev/nvidiactl does not exist"))
        else:
            usable.append(dev)
    return GpuReport(source, tuple(usable), tuple(unusable))


def visible_devices() -> tuple[str, ...] | None:
    """The entries of this process's ``CUDA_VISIBLE_DEVICES`` (None: unset, every device may be used).

    As CUDA does, parsing stops at the first entry that names no device (``-1``, garbage); an empty
    value means no GPU at all.
    """
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    out: list[str] = []
    for part in raw.split(","):
        part = part.strip()
        if not (part.isdigit() or part.startswith(("GPU-", "fake-"))):
            break
        out.append(part)
    return tuple(out)


def _is_visible(dev: GpuDevice, visible: tuple[str, ...]) -> bool:
    for entry in visible:
        if entry.isdigit() and int(entry) == dev.index:
            return True
        if not entry.isdigit() and dev.uuid.startswith(entry):
            return True
    return False


def driver_libraries(search_dirs: list[str] | None = None) -> list[tuple[str, str]]:
    """The NVIDIA driver's user-space libraries to bind read-only into a GPU jail, as ``(source, target)``.

    Each library file (``libcuda.so.1``, ``libnvidia-ml.so.1``, ``libnvidia-ptxjitcompiler.so.1``, ...) is
    bound on its own at its own path (the source is the resolved file, so a symlinked soname works); the
    folder it sits in is not, so nothing else of a host library folder becomes visible. Files under the
    folders every jail already sees read-only (``/usr``, ``/lib``, ...) need no bind and are left out.

    Search: ``REASEARCH_CUDA_LIB_DIRS`` (colon-separated folders) when set; otherwise the paths
    ``ldconfig -p`` lists for these names plus the usual driver folders. A name whose resolved file is
    not itself a driver library (a symlink to elsewhere) is skipped.
    """
    from reasearch.engine._runtime import SYSTEM_RO

    env = os.environ.get("REASEARCH_CUDA_LIB_DIRS")
    candidates: list[str] = []
    if search_dirs is None and env is not None:
        search_dirs = [d for d in env.split(":") if d]
    if search_dirs is None:
        search_dirs = list(_LIB_DIRS)
        ldconfig = shutil.which("ldconfig") or next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig")
                                                     if os.path.exists(p)), None)
        if ldconfig:
            try:
                out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=10, check=False,
                                     stdin=subprocess.DEVNULL).stdout
            except (OSError, subprocess.TimeoutExpired):
                out = ""
            for line in out.splitlines():
                name, _, path = line.strip().partition(" => ")
                if path and _DRIVER_LIB.match(name.split(" ", 1)[0]):
                    candidates.append(path.strip())
    for folder in search_dirs:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        candidates += [os.path.join(folder, n) for n in names if _DRIVER_LIB.match(n)]
    visible_anyway = [os.path.realpath(p) for p in SYSTEM_RO if os.path.isdir(p)]
    seen: set[str] = set()
    binds: list[tuple[str, str]] = []
    for path in candidates:
        target = os.path.abspath(path)
        if target in seen:
            continue
        seen.add(target)
        real = os.path.realpath(target)
        if not (_DRIVER_LIB.match(os.path.basename(real)) and os.path.isfile(real)):
            continue  # a link to something that is not a driver library is never bound
        parent = os.path.realpath(os.path.dirname(target))
        if any(parent == top or parent.startswith(top + os.sep) for top in visible_anyway):
            continue
        binds.append((real, target))
    return binds


def discover_gpus() -> tuple[GpuDevice, ...]:
    """The devices experiments can lease (see :func:`gpu_report` for the unusable ones)."""
    return gpu_report().usable


def cpu_slots(cpus_per_slot: int | None = None) -> list[tuple[int, ...]]:
    """The CPU slots of this process's cores: disjoint groups of ``cpus_per_slot`` cores.

    Default size: ``REASEARCH_CPUS_PER_SLOT``, else every core in one slot (up to 8 cores per slot).
    """
    cores = sorted(os.sched_getaffinity(0))
    if cpus_per_slot is None:
        cpus_per_slot = _cpus_env() or min(len(cores), 8)
    if cpus_per_slot < 1:
        raise ConfigError(f"cpus_per_slot must be >= 1, not {cpus_per_slot}")
    size = min(cpus_per_slot, len(cores))
    return [tuple(cores[i:i + size]) for i in range(0, len(cores) - size + 1, size)]


def _cpus_env() -> int | None:
    raw = os.environ.get("REASEARCH_CPUS_PER_SLOT", "")
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"REASEARCH_CPUS_PER_SLOT must be a whole number >= 1, not {raw!r}")
    return int(raw)


def lease_dir() -> Path:
    """The lock folder: ``REASEARCH_LEASE_DIR``, else ``/var/tmp/reasearch-leases-<uid>``.

    It must be a real folder (no symlink) owned by this user and writable by nobody else; it is
    created 0700 when missing.
    """
    path = Path(os.environ.get("REASEARCH_LEASE_DIR") or f"/var/tmp/reasearch-leases-{os.geteuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise SandboxError(f"lease folder {path} is not a directory (a symlink?); remove it")
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise SandboxError(f"lease folder {path} must be owned by uid {os.geteuid()} and writable only by it "
                           f"(owner {st.st_uid}, mode {oct(st.st_mode & 0o777)}); remove it or set REASEARCH_LEASE_DIR")
    return path


@dataclass
class SlotLease:
    """An exclusive hold on one slot, released by :meth:`release` (or by the holder's death).

    Attributes:
        kind: ``"gpu"`` or ``"cpu"``.
        index: the slot's number (the GPU index, or the CPU slot's number).
        cpus: cores the experiment is pinned to (a GPU slot gets its share of the cores).
        device: the leased GPU (None for a CPU slot).
        fd: the open lock file (pass it to child processes to keep the lease while they live).
        acquired_s: seconds spent waiting for the lease.
    """

    kind: str
    index: int
    cpus: tuple[int, ...]
    device: GpuDevice | None
    fd: int
    path: Path
    acquired_s: float = 0.0
    _released: bool = field(default=False, repr=False)

    @property
    def gpu(self) -> bool:
        return self.kind == "gpu"

    def describe(self) -> str:
        if self.device is not None:
            return f"gpu{self.device.index} ({self.device.name}{', fake' if self.device.fake else ''})"
        return f"cpu slot {self.index} (cores {','.join(map(str, self.cpus))})"

    def env(self) -> dict[str, str]:
        """Environment of a process running on this slot."""
        n = str(max(1, len(self.cpus)))
        env = {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n,
               "REASEARCH_SLOT": self.describe()}
        if self.device is not None:
            # The UUID names the same device whatever order CUDA enumerates them in.
            env.update(CUDA_VISIBLE_DEVICES=str(self.device.index) if self.device.fake else self.device.uuid,
                       CUDA_DEVICE_ORDER="PCI_BUS_ID", REASEARCH_GPU_UUID=self.device.uuid)
        else:
            env["CUDA_VISIBLE_DEVICES"] = ""
        return env

    def device_nodes(self) -> list[str]:
        """Device nodes to bind into the jail: this GPU and the driver's control nodes (none if fake)."""
        if self.device is None or self.device.fake:
            return []
        return [self.device.node, *(p for p in _CONTROL_NODES if os.path.exists(p))]

    def jail_binds(self) -> tuple[list[str], list[tuple[str, str]]]:
        """What a jail on this slot needs of the host: (device nodes, bound read-write as devices are;
        driver libraries as ``(source, target)``, bound read-only). Both empty for a CPU slot or a fake GPU."""
        if self.device is None or self.device.fake:
            return [], []
        return self.device_nodes(), driver_libraries()

    def release(self) -> None:
        """Drops the lease (idempotent)."""
        if self._released:
            return
        self._released = True
        try:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)

    def __enter__(self) -> SlotLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, holder_record().encode(), 0)  # pid, since when, what for (a run id): what a waiter is told
    return fd


def _holders(paths: list[Path]) -> str:
    """Who holds each of ``paths`` now, for a waiter (read from the lock files; unknown: "another process")."""
    out = []
    for path in paths:
        try:
            with open(path, "rb") as f:
                record = f.read(512).decode("utf-8", "replace")
        except OSError:
            record = ""
        out.append(describe_holder(record))
    return "; ".join(out)


def _slot_path(folder: Path, index: int, cores: tuple[int, ...], dev: GpuDevice | None) -> Path:
    return folder / (f"gpu-{dev.uuid}.lock" if dev is not None else f"cpu-{index}-{len(cores)}.lock")


def _candidates(kind: str, cpus_per_slot: int | None) -> list[tuple[str, int, tuple[int, ...], GpuDevice | None]]:
    all_cores = tuple(sorted(os.sched_getaffinity(0)))
    gpus = discover_gpus() if kind in ("auto", "gpu") else ()
    if kind == "gpu" and not gpus:
        raise SandboxError("a GPU slot was asked for, but no usable GPU is here: " + (gpu_report().note or
                           "; ".join(f"gpu{d.index}: {why}" for d, why in gpu_report().unusable)))
    if gpus:
        # Each GPU gets its own share of the cores (data loading, the Python loop), never all of them.
        share = max(1, len(all_cores) // len(gpus))
        size = min(share, cpus_per_slot or _cpus_env() or share)
        return [("gpu", d.index, all_cores[(i * share) % len(all_cores):][:size] or all_cores[:size], d)
                for i, d in enumerate(gpus)]
    return [("cpu", i, cores, None) for i, cores in enumerate(cpu_slots(cpus_per_slot))]


def lease_slot(kind: str = "auto", *, wait_s: float = 3600.0, cpus_per_slot: int | None = None,
               poll_s: float = 0.05, notice_every_s: float = NOTICE_EVERY_S,
               clock: Callable[[], float] = time.monotonic) -> SlotLease:
    """Leases one slot exclusively across every process of this machine (and user's lock folder).

    Args:
        kind: ``"gpu"`` (fail without GPUs), ``"cpu"``, or ``"auto"`` (a GPU when there are any).
        wait_s: how long to wait for a free slot before raising :class:`SlotBusyError`.
        cpus_per_slot: size of a CPU slot (see :func:`cpu_slots`).
        poll_s: delay between attempts while every slot is taken.
        notice_every_s: while every slot is taken, a :class:`~reasearch.engine.waits.WaitNotice` (what is
            waited for, the holders' pids and runs, how long) is reported at once and then this often.
        clock: monotonic seconds for the wait and its notices (tests pass a controllable one).

    Raises:
        SlotBusyError: every slot stayed taken for ``wait_s``.
        SandboxError: ``kind="gpu"`` without a usable GPU, or a bad lock folder.
    """
    if kind not in ("auto", "gpu", "cpu"):
        raise ConfigError(f"slot kind must be 'auto', 'gpu' or 'cpu', not {kind!r}")
    folder = lease_dir()
    slots = _candidates(kind, cpus_per_slot)
    paths = [_slot_path(folder, index, cores, dev) for _, index, cores, dev in slots]
    t0 = clock()
    what = (f"a {slots[0][0]} slot ({'all ' + str(len(slots)) + ' slots are' if len(slots) > 1 else 'the only one is'} "
            f"leased machine-wide; `reasearch sandbox check --gpu` lists them)")
    ticker = WaitTicker(what, holder=lambda: _holders(paths), every_s=notice_every_s, clock=clock)
    while True:
        for (skind, index, cores, dev), path in zip(slots, paths, strict=True):
            fd = _try_lock(path)
            if fd is not None:
                return SlotLease(skind, index, cores, dev, fd, path, clock() - t0)
        ticker.tick()
        if clock() - t0 >= wait_s:
            raise SlotBusyError(f"no free {slots[0][0]} slot after {wait_s:g} s ({len(slots)} slot(s), all leased; "
                                f"`reasearch sandbox check --gpu` shows the holders)")
        time.sleep(poll_s)


def slot_status(kind: str = "auto", cpus_per_slot: int | None = None) -> list[dict[str, object]]:
    """Each slot and its holder's pid (None when free), for snapshots and ``sandbox check``."""
    folder = lease_dir()
    out: list[dict[str, object]] = []
    for skind, index, cores, dev in _candidates(kind, cpus_per_slot):
        path = _slot_path(folder, index, cores, dev)
        fd = _try_lock(path)
        holder: int | None = None
        if fd is None:
            try:
                holder = int(path.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                holder = -1
        else:
            os.ftruncate(fd, 0)
            os.close(fd)
        name = (
            f"gpu{dev.index} ({dev.name})"
            if dev is not None
            else f"cpu slot {index} (cores {','.join(map(str, cores))})"
        )
        out.append({"slot": name, "kind": skind, "holder_pid": holder, "free": fd is not None})
    return out
