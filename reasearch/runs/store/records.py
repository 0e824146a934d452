"""The store's records and plain-JSON encoding: what a run, candidate, evaluation, event, driver and
reservation look like once stored, and :func:`dumps`, the one JSON writer of every column.

Plain data only (frozen dataclasses, nothing pickled); no database code here.
"""

from __future__ import annotations

import enum
import json
import math
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasearch.errors import ConfigError, StoreError
from reasearch.evaluators.result import EvalResult
from reasearch.evaluators.spec import TaskSpec
from reasearch.runs.ledger import Unit

# 2: drivers (liveness heartbeats), reservations (budget held by in-flight evaluations, shared by
# every driver of a run) and fleets. Version 1 stores are migrated in place (new tables, nothing rewritten).
# 3: runs.task_spec, the task's TaskSpec (its one identity: a run's task is rebuilt with make(spec)). Older
# stores gain the column and every stored run's spec is filled from its task id and parameters (.migrations).
SCHEMA_VERSION = 3
MEMORY_URL = "memory://"
DEFAULT_RUN_DIR = Path("runs")
STORE_FILENAME = "store.sqlite"


class RunState(str, enum.Enum):
    """Where a run stands."""

    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    INTERRUPTED = "interrupted"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run as stored: what it optimizes, under which seed, config and budget, and how it ended.

    ``task_spec`` is the task's identity: :func:`reasearch.make` rebuilds the run's task from it alone.
    ``task_id``, ``task_params`` (the parameters the run was created with) and ``task_entry`` are the
    columns schema 2 identified the task by; they are still written (listing, search by id) and are
    what a run is rebuilt from when its spec is None (a run stored before schema 3 whose task could
    not be built when the store was migrated).
    """

    id: str
    task_id: str
    task_params: Mapping[str, Any]
    seed: int
    config: Mapping[str, Any]
    budget: Mapping[str, float]
    state: RunState
    created_at: float
    updated_at: float
    task_entry: str = ""  # "module:Class", used when task_id is not in the registry (test tasks)
    final_candidate: str | None = None
    reason: str = ""
    task_spec: TaskSpec | None = None

    def __post_init__(self) -> None:
        if self.task_spec is not None and self.task_spec.id != self.task_id:
            raise StoreError(f"run {self.id}: its task spec is for {self.task_spec.id!r}, not its task id "
                             f"{self.task_id!r}; build the record from one task (task_id=spec.id)")

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "task_id": self.task_id, "task_params": dict(self.task_params), "seed": self.seed,
            "config": dict(self.config), "budget": dict(self.budget), "state": self.state.value,
            "created_at": self.created_at, "updated_at": self.updated_at, "task_entry": self.task_entry,
            "final_candidate": self.final_candidate, "reason": self.reason,
            "task_spec": None if self.task_spec is None else self.task_spec.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class CandidateRecord:
    """A candidate program of a run; ``id`` is the SHA-256 of its source."""

    run_id: str
    id: str
    source: str
    parent: str | None = None
    note: str = ""
    created_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "id": self.id, "source": self.source, "parent": self.parent,
                "note": self.note, "created_at": self.created_at}


@dataclass(frozen=True, slots=True)
class EvaluationRecord:
    """The evaluation recorded for one step of a run (at most one per step)."""

    run_id: str
    step: int
    candidate_id: str
    seed: int | None
    result: EvalResult
    created_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "step": self.step, "candidate_id": self.candidate_id, "seed": self.seed,
                "result": self.result.to_dict(), "created_at": self.created_at}


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a run's append-only event log (model turn, tool call, result, lesson edit, ...)."""

    run_id: str
    step: int
    kind: str
    payload: Mapping[str, Any]
    ts: float

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "step": self.step, "kind": self.kind, "payload": dict(self.payload),
                "ts": self.ts}


@dataclass(frozen=True, slots=True)
class DriverRecord:
    """A process driving a run (agent, sweep, fleet worker), as last heard from.

    A run whose state is ``running`` but whose drivers have all stopped beating is shown as
    ``interrupted`` (its driver died: ``kill -9``, a lost node) until something resumes it.
    """

    run_id: str
    driver_id: str
    host: str
    pid: int
    started_at: float
    heartbeat_at: float
    stopped: bool = False
    proc_start: str = ""  # "<boot id>:<start time in clock ticks>" of the process (/proc/<pid>/stat); "" unknown

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "driver_id": self.driver_id, "host": self.host, "pid": self.pid,
                "started_at": self.started_at, "heartbeat_at": self.heartbeat_at, "stopped": self.stopped,
                "proc_start": self.proc_start}


@dataclass(frozen=True, slots=True)
class Reservation:
    """Budget held for an evaluation in flight; counts against the caps until recorded or expired."""

    token: str
    run_id: str
    driver_id: str
    amounts: Mapping[Unit, float]
    expires_at: float


class Refusal(tuple[Unit, float, float]):
    """Why a reservation was refused: ``(unit, used, cap)`` of the first cap it would break (unpacks as
    that triple); ``fleet_id`` names the fleet when the cap is a fleet-wide one (``used`` is then the
    fleet's: every member's debits and live reservations)."""

    fleet_id: str | None
    held_by_others: float  # of ``used``: what live reservations of other drivers of the run hold

    def __new__(cls, unit: Unit, used: float, cap: float, fleet_id: str | None = None,
                held_by_others: float = 0.0) -> Refusal:
        self = super().__new__(cls, (unit, used, cap))
        self.fleet_id = fleet_id
        self.held_by_others = float(held_by_others)
        return self


MAX_ID_LEN = 128
MAX_FLEET_ID_LEN = 120  # a member's run id is ``<fleet id>-m<index>``: it stays within MAX_ID_LEN
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def check_id(value: object, what: str = "run id", *, max_len: int = MAX_ID_LEN) -> str:
    """``value`` when it is a safe run or fleet id, else ConfigError.

    An id names folders (``<run dir>/<run id>``: workspace, git directory, transcripts), so it is one path
    component and nothing else: ASCII letters, digits, ``.``, ``_`` and ``-``, starting with a letter or
    digit, no ``..``, at most ``max_len`` characters; never a separator, an absolute path or a control
    character.
    """
    if not isinstance(value, str) or not value:
        raise ConfigError(f"a {what} must be a non-empty string, not {value!r}")
    if len(value) > max_len or not _SAFE_ID.fullmatch(value) or ".." in value:
        shown = value if len(value) <= 80 else value[:80] + "..."
        raise ConfigError(f"bad {what} {shown!r}: use 1-{max_len} of A-Z a-z 0-9 . _ - (starting with a letter or "
                          "digit, no '..', no '/')")
    return value


def new_run_id() -> str:
    """Sortable and unique: ``20261130-071502-3f9a1c2b``."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):  # NumPy arrays and scalars
        return obj.tolist()
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    raise TypeError(f"{type(obj).__name__} is not plain JSON data")


def _finite(obj: Any) -> Any:
    """Non-finite floats become None (plain JSON has no NaN)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def dumps(obj: Any) -> str:
    """Plain, canonical JSON (sorted keys, no NaN); what the store writes in every JSON column."""
    try:
        return json.dumps(_finite(json.loads(json.dumps(obj, default=_json_default))), sort_keys=True,
                          allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise StoreError(f"cannot store {type(obj).__name__} as JSON: {exc}; pass plain data "
                         "(dict, list, str, int, float, bool, None)") from None


def _redact(url: str) -> str:
    """The URL without its password."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)
