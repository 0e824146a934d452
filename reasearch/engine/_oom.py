"""Whether the kernel's out-of-memory killer acted: the host's ``oom_kill`` count in ``/proc/vmstat``.

A job that died of a SIGKILL the engine did not send was killed by the OOM killer or by some other process
(an operator, a chaos kill). The count is the one sign the parent can read in both sandbox modes (the
training jobs use rlimits, not a memory cgroup of their own): it rose while the job ran, or it did not.
It counts the whole host, so a rise is "the OOM killer acted during the job", the best evidence at hand.
Trust boundary: reads a kernel file only; no candidate input.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["KILLED_UNASKED", "OOM_KILLED", "oom_kills", "rose"]

VMSTAT = Path("/proc/vmstat")
KILLED_UNASKED = "killed by signal 9 (out of memory, or killed from outside)"
OOM_KILLED = "killed by the kernel's out-of-memory killer (signal 9; the host's oom_kill count rose during the job)"


def oom_kills(vmstat: Path = VMSTAT) -> int | None:
    """The host's OOM-killer count so far; None where the kernel does not say (no ``oom_kill`` line)."""
    try:
        text = vmstat.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


def rose(before: int | None, after: int | None) -> bool:
    """Whether the OOM-killer count went up between two :func:`oom_kills` readings (False where either is missing)."""
    return before is not None and after is not None and after > before
