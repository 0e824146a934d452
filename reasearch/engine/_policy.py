"""The jail's fixed policy: uids, the seccomp filter, and the environment every worker gets.

A leaf module (it imports nothing of the engine), so that the launchers and the one-off command
runner share one definition without importing each other.
"""

from __future__ import annotations

__all__ = ["CHILD_UID_IN_JAIL", "JAIL_UID", "SCORING_SECCOMP_POLICY", "SECCOMP_POLICY", "THREAD_ENV"]

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
# A scoring jail loads no native code of the candidate's: its folders, /tmp and /dev/shm are noexec, and
# an anonymous file (memfd_create, then dlopen of /proc/self/fd/N) would be the way around that.
SCORING_SECCOMP_POLICY = SECCOMP_POLICY.replace("shmget, msgget,", "memfd_create, shmget, msgget,")
assert SCORING_SECCOMP_POLICY != SECCOMP_POLICY
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "NUMBA_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
