"""Is a driver's process still there? What a resume on the same host uses to reclaim a dead driver's budget.

A driver records its host, pid and process start (:func:`process_start`: the boot id and the start
time in clock ticks from ``/proc/<pid>/stat``), so a pid reused by another process after the driver
died is not mistaken for it. Linux only; elsewhere nothing is known to be gone and reservations of
dead drivers simply expire. Reads ``/proc`` only; trusts nothing a candidate writes.
"""

from __future__ import annotations

import os
import socket

from reasearch.runs.store import DriverRecord

__all__ = ["process_start", "driver_gone"]


def process_start(pid: int) -> str:
    """``"<boot id>:<start time in clock ticks>"`` of a process (``/proc/<pid>/stat``, field 22), or "" where
    unknown. Two processes that had the same pid (a reused one) have different values."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            boot = f.read().decode("ascii", "replace").strip()
    except OSError:
        return ""
    fields = stat[stat.rfind(")") + 2:].split()  # the command name (in parentheses) may hold spaces
    return f"{boot}:{fields[19]}" if len(fields) > 19 else ""


def driver_gone(driver: DriverRecord) -> bool:
    """True when ``driver`` ran on this host and its process is gone (or its pid now names another process).

    Drivers of other hosts, and records without a start time where the pid is in use, are not known to
    be gone: their reservations expire instead, a TTL (``run.RESERVATION_TTL_S``) after their last beat.
    """
    if driver.stopped or driver.host != socket.gethostname() or driver.pid <= 0:
        return driver.stopped
    if not os.path.isdir("/proc/self"):
        return False  # no /proc: no evidence either way
    now = process_start(driver.pid)
    if not now:
        return True  # no such process
    return bool(driver.proc_start) and now != driver.proc_start
