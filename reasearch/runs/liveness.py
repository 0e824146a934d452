"""Driver liveness: heartbeats, what counts as a live driver, a run's shown state and its active time.

A process that drives a run beats every :data:`HEARTBEAT_S` seconds (:class:`Heartbeat`, a daemon
thread that also extends the lease on its budget reservations); a running run none of whose drivers
beat for :data:`STALE_S` seconds is shown as interrupted (:func:`effective_state`), and its active wall
time is the union of its drivers' lifetimes (:func:`active_seconds`).

A heartbeat's age alone is not evidence of death: a driver whose process is busy (a long parse holding the
GIL, a paused VM) beats late. So a driver recorded on this host is alive exactly while its process is
(:func:`driver_alive`), whatever its heartbeat's age; only a driver of another host is judged by its
heartbeat. A delete, a prune and a takeover ask :func:`driver_alive` before they act.

Is a driver's process still there? What a resume on the same host uses to reclaim a dead driver's budget:
a driver records its host, pid and process start (:func:`process_start`: the boot id and the start
time in clock ticks from ``/proc/<pid>/stat``), so a pid reused by another process after the driver
died is not mistaken for it. Linux only; elsewhere nothing is known to be gone and reservations of
dead drivers simply expire. Reads ``/proc`` only; trusts nothing a candidate writes.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence

from reasearch.runs.store import DriverRecord, RunRecord, RunState, Store

__all__ = ["HEARTBEAT_S", "RESERVATION_TTL_S", "STALE_S", "Heartbeat", "active_seconds", "active_seconds_of",
           "driver_alive", "driver_gone", "effective_state", "live_drivers", "process_start"]

HEARTBEAT_S = 10.0  # how often a driving Run says it is alive (and extends its reservations)
STALE_S = 45.0  # a running run none of whose drivers beat for this long is shown as interrupted
RESERVATION_TTL_S = 60.0  # a reservation of a driver that stopped beating expires after this


def process_start(pid: int) -> str:
    """``"<boot id>:<start time in clock ticks>"`` of a process (``/proc/<pid>/stat``, field 22), or "" where
    unknown or the process has exited (a zombie its parent has not reaped yet: a dead Ray node's worker stays
    one below a child subreaper, and it drives nothing). Two processes that had the same pid (a reused one)
    have different values."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            boot = f.read().decode("ascii", "replace").strip()
    except OSError:
        return ""
    fields = stat[stat.rfind(")") + 2:].split()  # the command name (in parentheses) may hold spaces
    if len(fields) <= 19 or fields[0] in ("Z", "X"):
        return ""
    return f"{boot}:{fields[19]}"


def driver_gone(driver: DriverRecord) -> bool:
    """True when ``driver`` ran on this host and its process is gone (or its pid now names another process),
    or it is a driver of this process that stopped (its last heartbeat may not have reached the store).

    Drivers of other hosts, and records without a start time where the pid is in use, are not known to
    be gone: their reservations expire instead, a TTL (:data:`RESERVATION_TTL_S`) after their last beat.
    """
    if driver.driver_id in _STOPPED_HERE:
        return True
    if driver.stopped or driver.host != socket.gethostname() or driver.pid <= 0:
        return driver.stopped
    if not os.path.isdir("/proc/self"):
        return False  # no /proc: no evidence either way
    now = process_start(driver.pid)
    if not now:
        return True  # no such process
    return bool(driver.proc_start) and now != driver.proc_start


def _local_process(driver: DriverRecord) -> bool | None:
    """Whether the process of a driver recorded on this host is still there (None: not this host's, or no
    ``/proc`` to tell). A pid now used by another process (its start time differs) is not the driver."""
    if driver.host != socket.gethostname() or driver.pid <= 0 or not os.path.isdir("/proc/self"):
        return None
    start = process_start(driver.pid)
    if not start:
        return False
    return not driver.proc_start or start == driver.proc_start


def driver_alive(driver: DriverRecord, *, now: float | None = None) -> bool:
    """True while ``driver`` holds its run: on this host, while its process exists (the same process: the
    recorded start time is compared), however old its last heartbeat; on another host, while it beat
    within :data:`STALE_S` seconds. A driver that stopped is never alive, even when the store never heard it
    stop (a full disk: this process, a fleet's, lives on and would otherwise hold the run for good)."""
    if driver.stopped or driver.driver_id in _STOPPED_HERE:
        return False
    local = _local_process(driver)
    if local is not None:
        return local
    now = time.time() if now is None else now
    return now - driver.heartbeat_at < STALE_S


def live_drivers(store: Store, run_id: str, *, now: float | None = None) -> list[DriverRecord]:
    """The drivers of a run that hold it (:func:`driver_alive`): processes a delete or takeover must not cut."""
    return [d for d in store.drivers(run_id) if driver_alive(d, now=now)]


def effective_state(store: Store, record: RunRecord, *, now: float | None = None) -> RunState:
    """The state a person should see: ``interrupted`` for a ``running`` run whose drivers all died.

    A driver beats every :data:`HEARTBEAT_S` seconds; a run still marked ``running`` whose drivers
    all stopped beating :data:`STALE_S` seconds ago (``kill -9``, a lost node) is reported as
    ``interrupted`` until a driver resumes it. Nothing is written: only a resume changes the state.
    """
    if record.state is not RunState.RUNNING:
        return record.state
    drivers = store.drivers(record.id)
    if not drivers:  # recorded before liveness existed: no evidence either way
        return record.state
    return RunState.RUNNING if live_drivers(store, record.id, now=now) else RunState.INTERRUPTED


def active_seconds_of(record: RunRecord, drivers: Sequence[DriverRecord], *, now: float) -> float:
    """A run's active wall time: the union of its drivers' lifetimes, so time it sat interrupted is not counted.

    A driver's lifetime runs from its ``started_at`` to its last heartbeat, or to ``now`` while it still
    beats (a driver killed without a word loses at most :data:`HEARTBEAT_S` of its last stretch). A run
    recorded without drivers counts from its creation to its last write (to ``now`` while it runs). This is
    the one definition: the end-of-run summary, ``reasearch runs`` and the report all call it.
    """
    if not drivers:
        end = now if record.state is RunState.RUNNING else record.updated_at
        return max(0.0, end - record.created_at)
    spans = []
    for d in drivers:
        alive = driver_alive(d, now=now)
        end = now if alive else d.heartbeat_at
        if end > d.started_at:
            spans.append((d.started_at, end))
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):  # overlapping lifetimes (two drivers at once) count once
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def active_seconds(store: Store, record: RunRecord, *, now: float | None = None) -> float:
    """:func:`active_seconds_of` the run's drivers as the store has them."""
    return active_seconds_of(record, store.drivers(record.id), now=time.time() if now is None else now)


_OWN_START = process_start(os.getpid())
_STOPPED_HERE: set[str] = set()  # driver ids of this process's heartbeats that stopped (each a few dozen bytes)


class Heartbeat:
    """A daemon thread that records, every :data:`HEARTBEAT_S` seconds, that this process drives a run."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.driver_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._beat()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{run_id}", daemon=True)
        self._thread.start()

    def _beat(self, *, stopped: bool = False) -> None:
        self.store.heartbeat(self.run_id, self.driver_id, host=socket.gethostname(), pid=os.getpid(),
                             ttl_s=RESERVATION_TTL_S, stopped=stopped, proc_start=_OWN_START)

    def _loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._beat()
            except Exception:  # the store was closed under us: the run is over for this process
                return

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        _STOPPED_HERE.add(self.driver_id)  # known here even when the store cannot be told (a full disk)
        try:
            self._beat(stopped=True)
        except Exception:  # store already closed: staleness tells the same story a little later
            pass
