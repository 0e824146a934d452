"""Privilege and namespace set-up of the in-jail worker and its children: prctl, capabilities, uid
drop, and (process mode as root) a private IPC namespace with no room for SysV objects or queues."""

from __future__ import annotations

import ctypes
import os
import signal

TYPE_CHECKING = False  # as typing's, without importing typing into the worker's image (see _pump.Child)
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "PDEATH_KILL_ARGS", "PR_SET_CHILD_SUBREAPER", "PR_SET_DUMPABLE", "PR_SET_PDEATHSIG", "drop_bounding_set",
    "drop_to_uid", "libc_prctl", "plain_uid_drop", "prctl", "private_ipc",
]

PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
PR_SET_PDEATHSIG = 1
_PR_SET_SECUREBITS = 28
_PR_GET_SECUREBITS = 27
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_SECBIT_KEEP_CAPS = 1 << 4
_SECBIT_NOROOT = 1 << 0
_CAP_DAC_READ_SEARCH = 2
_CAP_VERSION_3 = 0x20080522
_CLONE_NEWIPC = 0x08000000
# Per-IPC-namespace limits that leave no room for any SysV object or POSIX message queue.
_IPC_ZERO = {"/proc/sys/kernel/shmmni": "0", "/proc/sys/kernel/msgmni": "0",
             "/proc/sys/kernel/sem": "0 0 0 0", "/proc/sys/fs/mqueue/queues_max": "0"}

_libc = ctypes.CDLL(None, use_errno=True)


def prctl(option: int, arg: int) -> None:
    """``prctl(option, arg)``; raises :class:`OSError` on failure."""
    if _libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}) failed: {os.strerror(err)}")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _caps_args(mask: int) -> tuple[Any, Any]:
    """``capset`` arguments that set effective = permitted = ``mask``, inheritable empty."""
    head = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    data[0].effective = data[0].permitted = mask
    return head, data


# Built once in the worker, before any fork: building ctypes objects in each child (its first use
# of ctypes after the fork) cost ~0.2 ms of copy-on-write faults per child. Never mutated.
_CAPS_ARGS = {mask: _caps_args(mask) for mask in (0, 1 << _CAP_DAC_READ_SEARCH)}
_AMBIENT_ARGS = (_PR_CAP_AMBIENT, ctypes.c_ulong(_PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0)
PDEATH_KILL_ARGS = (
    PR_SET_PDEATHSIG,
    ctypes.c_ulong(signal.SIGKILL),
    0,
    0,
    0,
)  # prctl(PR_SET_PDEATHSIG, SIGKILL), prebuilt
libc_prctl = _libc.prctl  # the bare function: returns -1 and sets errno on failure


def _set_caps(mask: int) -> None:
    """Sets effective = permitted = ``mask`` (capabilities 0..31), inheritable empty."""
    head, data = _CAPS_ARGS.get(mask) or _caps_args(mask)
    if _libc.capset(ctypes.byref(head), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset failed: {os.strerror(err)}")


def drop_bounding_set(keep_read_search: bool) -> None:
    """Drops every capability but (with ``keep_read_search``) CAP_DAC_READ_SEARCH from the bounding
    set, so that no exec can ever regain one.

    The worker calls it once at start: the bounding set is inherited at fork and can only shrink,
    so each child starts without the ~40 ``prctl`` calls. It limits only what an exec can gain: the
    worker keeps the capabilities it holds (it still hands scratch files to the child's uid).
    """
    global _UID_CHANGE_CLEARS_ALL
    keep = 1 << _CAP_DAC_READ_SEARCH if keep_read_search else 0
    if not keep_read_search:
        # With no inheritable or ambient capability left and no securebit set, a root process that
        # switches every uid to non-zero loses all its capabilities in that very call (capabilities(7),
        # "Effect of user ID changes on capabilities"), so each child skips two ctypes calls.
        _UID_CHANGE_CLEARS_ALL = _clear_inheritable_and_ambient()
    for cap in range(64):
        if not keep >> cap & 1 and _libc.prctl(_PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0) != 0:
            break  # EINVAL: past the last capability this kernel knows


# Set by :func:`drop_bounding_set` in the worker (inherited by its children): a child may switch
# uid with the plain ``setres*id`` calls alone (see :func:`drop_to_uid`).
_UID_CHANGE_CLEARS_ALL = False


def _clear_inheritable_and_ambient() -> bool:
    """Empties this process's inheritable and ambient sets, keeping its effective and permitted
    ones; True when done and no securebit changes what a uid change does to capabilities."""
    head = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    if _libc.capget(ctypes.byref(head), data) != 0:
        return False
    data[0].inheritable = data[1].inheritable = 0
    if _libc.capset(ctypes.byref(head), data) != 0:
        return False
    if _libc.prctl(*_AMBIENT_ARGS) != 0:
        return False
    return _libc.prctl(_PR_GET_SECUREBITS, 0, 0, 0, 0) == 0


def drop_to_uid(uid: int, keep_read_search: bool, bounding_dropped: bool = False) -> None:
    """Switches the child to ``uid`` so it can neither signal nor trace the worker.

    In process mode as root the child keeps only CAP_DAC_READ_SEARCH (it may read the interpreter
    under a 0700 home, as before, but not write outside its scratch dir, kill the worker or exceed
    RLIMIT_NPROC, which root would ignore). ``bounding_dropped``: the worker already called
    :func:`drop_bounding_set` with the same ``keep_read_search`` (the child inherited it).
    """
    keep = 1 << _CAP_DAC_READ_SEARCH if keep_read_search else 0
    if not bounding_dropped:
        drop_bounding_set(keep_read_search)
    if plain_uid_drop(uid, keep_read_search):
        # Inheritable and ambient are empty, no securebit is set (checked by drop_bounding_set):
        # the uid change clears permitted and effective itself.
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        return
    if keep_read_search:
        prctl(_PR_SET_SECUREBITS, _SECBIT_KEEP_CAPS | _SECBIT_NOROOT)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    _set_caps(keep)  # effective = permitted = keep; inheritable emptied
    _libc.prctl(*_AMBIENT_ARGS)


def plain_uid_drop(uid: int, keep_read_search: bool) -> bool:
    """Whether switching to ``uid`` is the three plain calls (``setgroups([])``, ``setresgid``,
    ``setresuid``) and nothing more: root keeping no capability, once :func:`drop_bounding_set`
    emptied the inheritable and ambient sets with no securebit set (the zygote then makes them in C)."""
    return not keep_read_search and _UID_CHANGE_CLEARS_ALL and os.geteuid() == 0 and uid != 0


def private_ipc() -> bool:
    """Process mode as root: moves the worker (and so its children) into an IPC namespace of its own
    in which no SysV segment, queue or semaphore set, and no POSIX message queue, can be created
    (inside a jail seccomp denies those calls instead).

    Returns False where that is not possible (no CAP_SYS_ADMIN, a read-only ``/proc/sys``, as in
    containers that also rule out nsjail): process mode isolates nothing there, and says so.
    """
    if _libc.unshare(_CLONE_NEWIPC) != 0:
        return False
    try:
        for path, value in _IPC_ZERO.items():
            with open(path, "w") as fh:
                fh.write(value)
    except OSError:
        return False
    return True
