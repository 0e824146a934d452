"""What a task asks of a sandbox, and what comes back.

Tasks build a :class:`RunRequest`; anything implementing :class:`SandboxRunner` (the engine's
``SandboxPool``, ``LocalExecutor``, a Ray worker's pool) runs it inside the sandbox and answers with a
:class:`RunOutcome`. These types live in the engine, the bottom layer: evaluators, runs and the agent import them from
here
(dependencies point down: agent -> runs -> evaluators -> engine).

Inside the sandbox the worker child:
  1. writes ``request.source`` to ``<scratch>/candidate.py`` and imports it as module ``candidate``;
  2. finds the first of ``request.entry`` defined in it (none: ``CRASH`` "no function named ...");
  3. imports the trusted harness ``request.harness`` (``"package.module:function"``; None means "call the
     entry point with ``**payload``") and calls ``harness(entry_fn, payload)``;
  4. sends the harness's return value back as plain data (JSON plus NumPy arrays as ``.npy`` with
     ``allow_pickle=False``; never pickle).
The parent measures wall and CPU time itself and decides the status from what it observed.

A *session* (``runner.session(request)``) keeps the child alive after step 3's import: each
``session.call(payload)`` sends one payload, the child answers ``harness(entry_fn, payload)``, and the
parent times the round trip (EPLB's ``t_alg``: the candidate never reports its own time).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["OUTER_WALL_FACTOR", "Status", "Limits", "RunRequest", "RunOutcome", "CallOutcome", "SandboxRunner",
           "SandboxSession"]


# How far past ``Limits.wall_s`` a candidate that waited for a CPU may run, whatever it waited: a
# backstop. Waits the candidate makes itself (its own threads or processes on the CPUs) are not
# counted at all (``Supervisor.pump_limited``), so this bounds only waits for other jobs. A candidate
# busy for its whole ``wall_s`` needs ``wall_s`` x (runnable processes per core) of wall time: it fits
# up to 4 per core (2 workers beside 6 burners on 2 cores, burners at 3x the cores; the load bench's
# 2x is 3 per core). The bench's honest candidate (30 ms of CPU under a 100 ms limit) fits up to ~13.
OUTER_WALL_FACTOR = 4.0


class Status(str, enum.Enum):
    """How an evaluation ended. Only ``OK`` carries a score (failures never earn fitness)."""

    OK = "OK"
    INVALID = "INVALID"  # the candidate ran, but its answer breaks a constraint
    TIMEOUT = "TIMEOUT"  # killed at the wall or CPU limit
    OOM = "OOM"  # ran out of its memory limit
    CRASH = "CRASH"  # exception, bad exit, signal, garbage result, missing entry point
    REFUSED = "REFUSED"  # never ran: budget spent or a bad request

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-evaluation limits, enforced by the sandbox (rlimits in the child, a wall clock in the parent).

    ``wall_s`` counts the time the candidate runs or sleeps, not the time its process waits in the run
    queue for a CPU (a busy machine: other jobs, other workers): the parent extends the deadline by that
    wait (``/proc/<pid>/schedstat``), less the CPU its own other threads and processes used meanwhile (a
    wait it made itself buys no time), up to :meth:`outer_wall_s`, a hard bound whatever it waited.
    """

    wall_s: float = 10.0
    cpu_s: float | None = None  # default: wall_s + 1
    memory_mb: int = 1024  # address-space limit (RLIMIT_AS)
    nproc: int = 32
    fsize_mb: int = 16
    nofile: int = 64
    output_bytes: int = 64 * 1024  # stdout and stderr are each truncated to this
    result_bytes: int = 64 * 1024 * 1024  # a larger result is refused (CRASH with a message)

    def effective_cpu_s(self) -> float:
        return self.cpu_s if self.cpu_s is not None else self.wall_s + 1.0

    def outer_wall_s(self) -> float:
        """The hard wall bound: :data:`OUTER_WALL_FACTOR` x ``wall_s``, run-queue waits included."""
        return self.wall_s * OUTER_WALL_FACTOR


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One candidate run: the source, which function to call, and the trusted harness around it."""

    source: str
    entry: Sequence[str] = ("run",)
    harness: str | None = None
    payload: Mapping[str, Any] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    files: Mapping[str, bytes] = field(default_factory=dict)  # extra files placed in the scratch dir
    # The warm image this request needs: modules its worker imports before forking (None: the pool's
    # ``SandboxConfig.preload``). A smaller image forks and exits faster; what a candidate imports
    # beyond it is imported in the child, on the candidate's clock.
    preload: Sequence[str] | None = None


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What the sandbox observed. ``value`` is set only when ``status`` is ``OK``."""

    status: Status  # OK, TIMEOUT, OOM or CRASH (never INVALID: that is the scorer's call)
    value: Any
    wall_s: float
    cpu_s: float
    stdout: str = ""
    stderr: str = ""
    error: str = ""  # traceback text or the parent's own description of what happened
    exit_code: int | None = None
    signal: int | None = None
    sandbox_mode: str = "process"
    # A closed session only (None elsewhere): the part of ``cpu_s`` used by processes the candidate's
    # process forked (the kernel's accounts: its whole tree's less its own clock at exit).
    descendants_cpu_s: float | None = None


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """One round trip of a session; ``wall_s`` is measured by the parent around request and response.

    ``cpu_s`` is the CPU time the candidate's process (all its threads, exited ones included; not
    processes it forked) spent from the moment its payload was handed over to the arrival of its
    answer, read by the worker from the kernel's clock of that process to the nanosecond: the child
    can raise it only by using CPU, never lower it. ``cpu_before_s`` is the same clock's advance
    since the previous call's answer (for the first call, since the session's request: the
    candidate's import). Each is None where the runner does not measure it or could not read it.
    """

    status: Status
    value: Any
    wall_s: float
    error: str = ""
    cpu_s: float | None = None
    cpu_before_s: float | None = None


@runtime_checkable
class SandboxSession(Protocol):
    def call(self, payload: Mapping[str, Any], *, timeout_s: float | None = None) -> CallOutcome: ...

    def close(self) -> RunOutcome: ...

    def __enter__(self) -> SandboxSession: ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class SandboxRunner(Protocol):
    """Anything that can run a :class:`RunRequest` in a sandbox (thread-safe)."""

    @property
    def mode(self) -> str: ...

    def run(self, request: RunRequest) -> RunOutcome: ...

    def session(self, request: RunRequest) -> SandboxSession: ...
