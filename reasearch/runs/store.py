"""The run store: runs, candidates, evaluations, ledger, event log and evaluation cache.

One abstract interface (:class:`Store`, in the manner of Optuna's ``BaseStorage``) and one SQL code
path behind it (:class:`SQLStore`) with two dialects: :class:`SQLiteStore`, the embedded default (a
``store.sqlite`` file in the run directory, WAL mode), and :class:`PostgresStore` (a
``postgresql://`` URL, so several machines write to one place). Everything JSON in the store is
plain JSON (``EvalResult.to_dict()``); nothing is pickled.

Crash safety (ARCHITECTURE invariant 5): each write is one transaction. Recording an evaluation
writes the candidate, the evaluation, its ledger debit and its cache entry together, so a ``kill -9``
leaves either all of them or none. Writes keyed by ``(run, step, ...)`` are idempotent: replaying a
step after a resume changes nothing.
"""

from __future__ import annotations

import contextlib
import enum
import json
import math
import re
import threading
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from reasearch.runs.ledger import Budget, LedgerEntry, Unit
from reasearch.errors import ConfigError, StoreError
from reasearch.evaluators.result import EvalResult, Status

__all__ = [
    "SCHEMA_VERSION", "DEFAULT_RUN_DIR", "RunState", "RunRecord", "CandidateRecord", "EvaluationRecord",
    "Event", "DriverRecord", "Reservation", "Store", "SQLStore", "SQLiteStore", "PostgresStore", "MemoryStore",
    "open_store", "open_existing_store", "new_run_id", "dumps", "MEMORY_URL",
]

# 2: drivers (liveness heartbeats), reservations (budget held by in-flight evaluations, shared by
# every driver of a run) and fleets. Version 1 stores are migrated in place (new tables, nothing rewritten).
SCHEMA_VERSION = 2
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
    """A run as stored: what it optimizes, under which seed, config and budget, and how it ended."""

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "task_id": self.task_id, "task_params": dict(self.task_params), "seed": self.seed,
            "config": dict(self.config), "budget": dict(self.budget), "state": self.state.value,
            "created_at": self.created_at, "updated_at": self.updated_at, "task_entry": self.task_entry,
            "final_candidate": self.final_candidate, "reason": self.reason,
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

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "driver_id": self.driver_id, "host": self.host, "pid": self.pid,
                "started_at": self.started_at, "heartbeat_at": self.heartbeat_at, "stopped": self.stopped}


@dataclass(frozen=True, slots=True)
class Reservation:
    """Budget held for an evaluation in flight; counts against the caps until recorded or expired."""

    token: str
    run_id: str
    driver_id: str
    amounts: Mapping[Unit, float]
    expires_at: float


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


class _AlreadyRecorded(Exception):
    """Aborts a transaction whose step was recorded by someone else first."""


class Store(ABC):
    """The storage interface every backend implements (and the shared test case runs against)."""

    url: str

    @property
    def display_url(self) -> str:
        """The URL without a password (for messages and tables)."""
        return _redact(self.url)

    # -- runs
    @abstractmethod
    def create_run(self, record: RunRecord) -> None:
        """Inserts a new run (its id must be new)."""

    @abstractmethod
    def get_run(self, run_id: str) -> RunRecord:
        """The run with this id, or with this unique id prefix; StoreError when there is none."""

    @abstractmethod
    def list_runs(self) -> list[RunRecord]:
        """Every run, oldest first."""

    @abstractmethod
    def set_run_state(self, run_id: str, state: RunState, *, final_candidate: str | None = None,
                      reason: str = "") -> None:
        """Updates a run's state (and final candidate and reason)."""

    # -- candidates
    @abstractmethod
    def add_candidate(self, record: CandidateRecord) -> bool:
        """Stores a candidate; False (and no change) when the run already has it."""

    @abstractmethod
    def get_candidate(self, run_id: str, candidate_id: str) -> CandidateRecord | None:
        """One candidate of a run, or None."""

    @abstractmethod
    def candidates(self, run_id: str) -> list[CandidateRecord]:
        """The run's candidates in the order they were first added."""

    # -- evaluations, ledger, cache
    @abstractmethod
    def record_evaluation(self, evaluation: EvaluationRecord, candidate: CandidateRecord,
                          debit: LedgerEntry | Sequence[LedgerEntry] | None = None,
                          cache_key: str | None = None, release: str | None = None) -> tuple[EvaluationRecord, bool]:
        """Writes candidate, evaluation, its debit(s) and cache entry in ONE transaction.

        ``release`` names a reservation (:meth:`reserve`) that this evaluation's debits replace: it is
        dropped in the same transaction, so the budget is never counted twice nor freed early.

        Returns:
            ``(record, True)`` when written; ``(existing, False)`` when the step was already recorded
            (then nothing is written: no second debit).
        """

    @abstractmethod
    def get_evaluation(self, run_id: str, step: int) -> EvaluationRecord | None:
        """The evaluation recorded at ``step``, or None."""

    @abstractmethod
    def evaluations(self, run_id: str) -> list[EvaluationRecord]:
        """Every evaluation of the run, by step."""

    @abstractmethod
    def debit(self, entry: LedgerEntry) -> bool:
        """Adds a ledger entry; False (and no change) when ``(run, step, unit, note)`` is already there."""

    @abstractmethod
    def ledger(self, run_id: str) -> list[LedgerEntry]:
        """The run's ledger entries in the order written."""

    @abstractmethod
    def usage(self, run_id: str) -> dict[Unit, float]:
        """Total debited per unit (units never debited are absent)."""

    @abstractmethod
    def cache_get(self, key: str) -> EvalResult | None:
        """A cached result for a cache key, or None."""

    # -- student-model calls (prompt tasks)
    @abstractmethod
    def student_call_get(self, key: str) -> dict[str, Any] | None:
        """The stored OK reply (plain JSON) of the student call ``key``, from any run, or None."""

    @abstractmethod
    def record_student_call(self, run_id: str, step: int, key: str, model: str, reply: Mapping[str, Any],
                            debits: Sequence[LedgerEntry] = (), release: str | None = None) -> tuple[dict[str, Any], bool]:
        """Stores one student call's reply and its debits in ONE transaction (which also drops the
        reservation ``release``).

        An ``OK`` reply is stored once per key (the cache); when another writer stored that key first,
        nothing is written (no debit) and its reply is returned with False. A failed call is recorded
        (status and error) but never served again.
        """

    @abstractmethod
    def student_call_paid(self, run_id: str, notes: Sequence[str]) -> bool:
        """True when the run has a ``student_calls`` debit under one of ``notes`` (it paid that call)."""

    @abstractmethod
    def debit_student_call(self, debits: Sequence[LedgerEntry], release: str | None = None) -> bool:
        """Writes the debits of a stored call used by this run for the first time (and drops the
        reservation ``release``) in one transaction; False when they were already written."""

    @abstractmethod
    def student_calls(self, run_id: str) -> list[tuple[int, str, str]]:
        """``(step, key, status)`` of every student call recorded for the run, in order."""

    # -- events
    @abstractmethod
    def log_event(self, run_id: str, step: int, kind: str, payload: Mapping[str, Any]) -> bool:
        """Appends an event; False (and no change) when ``(run, step, kind)`` is already logged."""

    @abstractmethod
    def events(self, run_id: str, *, kind: str | None = None) -> list[Event]:
        """The run's events in the order logged, optionally of one kind."""

    @abstractmethod
    def last_step(self, run_id: str) -> int:
        """The highest step with an event, evaluation or debit; -1 for a fresh run."""

    # -- budget reservations (shared by every driver of a run) and liveness
    @abstractmethod
    def reserve(self, run_id: str, token: str, amounts: Mapping[Unit, float], caps: Mapping[Unit, float], *,
                driver_id: str = "", ttl_s: float = 60.0) -> tuple[Unit, float, float] | None:
        """Holds ``amounts`` for an evaluation about to run, if they fit under ``caps``; atomic across drivers.

        What counts as used is the ledger plus every live (unexpired) reservation of the run, whoever
        holds it, so a cap holds whatever the number of drivers or executors on the run.

        Returns:
            None when reserved; otherwise ``(unit, used, cap)`` of the first cap it would break
            (nothing is held then).
        """

    @abstractmethod
    def release(self, token: str) -> None:
        """Drops a reservation (no-op when it is gone: recorded, released or expired)."""

    @abstractmethod
    def reserved(self, run_id: str) -> dict[Unit, float]:
        """The run's live reservations per unit."""

    @abstractmethod
    def heartbeat(self, run_id: str, driver_id: str, *, host: str = "", pid: int = 0, ttl_s: float = 60.0,
                  stopped: bool = False) -> None:
        """Records that ``driver_id`` is alive and driving ``run_id`` (and extends its reservations by ``ttl_s``)."""

    @abstractmethod
    def drivers(self, run_id: str) -> list[DriverRecord]:
        """The run's drivers, oldest first."""

    @abstractmethod
    def takeover(self, run_id: str, driver_id: str) -> int:
        """Marks every other driver of the run stopped and drops their reservations (they are known dead:
        a retried fleet task, an explicit resume); returns how many reservations were dropped."""

    # -- fleets
    @abstractmethod
    def create_fleet(self, fleet_id: str, spec: Mapping[str, Any]) -> bool:
        """Stores a fleet's spec; False (and no change) when the fleet exists."""

    @abstractmethod
    def get_fleet(self, fleet_id: str) -> dict[str, Any]:
        """A fleet's stored spec (``StoreError`` when there is none)."""

    @abstractmethod
    def list_fleets(self) -> list[tuple[str, float]]:
        """``(fleet id, created_at)`` of every fleet, oldest first."""

    @abstractmethod
    def add_fleet_member(self, fleet_id: str, member: int, run_id: str) -> str:
        """Records that member ``member`` of the fleet is run ``run_id``; returns the member's run id
        (the first one recorded stands)."""

    @abstractmethod
    def fleet_members(self, fleet_id: str) -> dict[int, str]:
        """Member index -> run id."""

    @abstractmethod
    def fleet_usage(self, fleet_id: str) -> dict[Unit, float]:
        """Total debited per unit over every run of the fleet."""

    def paid_for(self, run_id: str, candidate_id: str, seed: int | None) -> bool:
        """True when the run already recorded a reusable (``OK``/``INVALID``) evaluation of this candidate
        under this seed: a repeat within the run costs nothing; a first evaluation is always paid, even
        when its result comes from another run's cache entry."""
        return any(ev.candidate_id == candidate_id and ev.seed == seed
                   and ev.result.status in (Status.OK, Status.INVALID) for ev in self.evaluations(run_id))

    @abstractmethod
    def close(self) -> None:
        """Closes the connection."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_DDL = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    task_params TEXT NOT NULL,
    task_entry TEXT NOT NULL,
    seed {bigint} NOT NULL,
    config TEXT NOT NULL,
    budget TEXT NOT NULL,
    state TEXT NOT NULL,
    final_candidate TEXT,
    reason TEXT NOT NULL,
    created_at {float} NOT NULL,
    updated_at {float} NOT NULL
);
CREATE TABLE IF NOT EXISTS candidates (
    seq {serial},
    run_id TEXT NOT NULL REFERENCES runs(id),
    id TEXT NOT NULL,
    source TEXT NOT NULL,
    parent TEXT,
    note TEXT NOT NULL,
    created_at {float} NOT NULL,
    UNIQUE (run_id, id)
);
CREATE TABLE IF NOT EXISTS evaluations (
    run_id TEXT NOT NULL REFERENCES runs(id),
    step INTEGER NOT NULL,
    candidate_id TEXT NOT NULL,
    seed {bigint},
    status TEXT NOT NULL,
    score {float},
    cached INTEGER NOT NULL,
    result TEXT NOT NULL,
    created_at {float} NOT NULL,
    PRIMARY KEY (run_id, step)
);
CREATE TABLE IF NOT EXISTS ledger (
    seq {serial},
    run_id TEXT NOT NULL REFERENCES runs(id),
    step INTEGER NOT NULL,
    unit TEXT NOT NULL,
    note TEXT NOT NULL,
    amount {float} NOT NULL,
    ts {float} NOT NULL,
    UNIQUE (run_id, step, unit, note)
);
CREATE TABLE IF NOT EXISTS events (
    seq {serial},
    run_id TEXT NOT NULL REFERENCES runs(id),
    step INTEGER NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    ts {float} NOT NULL,
    UNIQUE (run_id, step, kind)
);
CREATE TABLE IF NOT EXISTS student_calls (
    seq {serial},
    key TEXT NOT NULL,
    run_id TEXT NOT NULL REFERENCES runs(id),
    step INTEGER NOT NULL,
    model TEXT NOT NULL,
    status TEXT NOT NULL,
    reply TEXT NOT NULL,
    created_at {float} NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS student_calls_ok ON student_calls (key) WHERE status = 'OK';
CREATE INDEX IF NOT EXISTS student_calls_run ON student_calls (run_id, step);
CREATE TABLE IF NOT EXISTS eval_cache (
    key TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    candidate_sha256 TEXT NOT NULL,
    seed {bigint},
    result TEXT NOT NULL,
    created_at {float} NOT NULL
);
CREATE TABLE IF NOT EXISTS drivers (
    run_id TEXT NOT NULL REFERENCES runs(id),
    driver_id TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_at {float} NOT NULL,
    heartbeat_at {float} NOT NULL,
    stopped INTEGER NOT NULL,
    PRIMARY KEY (run_id, driver_id)
);
CREATE TABLE IF NOT EXISTS fleets (
    id TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    created_at {float} NOT NULL
);
CREATE TABLE IF NOT EXISTS fleet_members (
    fleet_id TEXT NOT NULL REFERENCES fleets(id),
    member INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    PRIMARY KEY (fleet_id, member)
);
CREATE TABLE IF NOT EXISTS reservations (
    token TEXT NOT NULL,
    run_id TEXT NOT NULL REFERENCES runs(id),
    driver_id TEXT NOT NULL,
    unit TEXT NOT NULL,
    amount {float} NOT NULL,
    expires_at {float} NOT NULL,
    PRIMARY KEY (token, unit)
)
"""

_RUN_COLS = ("id, task_id, task_params, task_entry, seed, config, budget, state, final_candidate, reason, "
             "created_at, updated_at")


class SQLStore(Store):
    """The one SQL code path; subclasses supply a DB-API connection and a dialect.

    SQL is written with ``?`` placeholders and portable statements (``INSERT ... ON CONFLICT DO
    NOTHING`` works in both SQLite >= 3.24 and PostgreSQL). One connection per store object,
    serialized by a lock: the store is never the bottleneck next to a sandboxed evaluation.
    """

    _placeholder = "?"
    _types: Mapping[str, str] = {}

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.RLock()
        self._sql_cache: dict[str, str] = {}
        self._conn = self._connect()
        try:
            self._init_schema()
        except BaseException:
            self._conn.close()
            raise

    # -- dialect hooks
    @abstractmethod
    def _connect(self) -> Any:
        """A DB-API connection in autocommit mode (transactions are opened explicitly)."""

    @abstractmethod
    def _begin(self) -> contextlib.AbstractContextManager[None]:
        """A write transaction: commits on success, rolls back on any exception."""

    @abstractmethod
    def _table_exists(self, name: str) -> bool:
        """True when a table of that name exists."""

    def _sql(self, sql: str) -> str:
        out = self._sql_cache.get(sql)
        if out is None:
            out = sql if self._placeholder == "?" else sql.replace("?", self._placeholder)
            self._sql_cache[sql] = out
        return out

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._conn.execute(self._sql(sql), tuple(params))

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return list(self._exec(sql, params).fetchall())

    def _one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        with self._lock:
            return self._exec(sql, params).fetchone()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[None]:
        with self._lock, self._begin():
            yield

    # -- schema
    def _lock_schema(self) -> None:
        """Serializes schema creation between processes (SQLite: BEGIN IMMEDIATE already does)."""

    def _init_schema(self) -> None:
        with self._tx():
            self._lock_schema()
            if self._table_exists("meta"):
                row = self._exec("SELECT value FROM meta WHERE key = ?", ("schema_version",)).fetchone()
                found = int(row[0]) if row else None
                if found is not None and found > SCHEMA_VERSION:
                    raise StoreError(
                        f"the store at {self.display_url} has schema version {found}, newer than this reasearch "
                        f"understands ({SCHEMA_VERSION}); upgrade reasearch to open it (nothing was changed)")
            else:
                found = None
            for stmt in _DDL.format(**self._types).split(";"):
                if stmt.strip():
                    self._exec(stmt)
            if found is not None and found < SCHEMA_VERSION:
                # 1 -> 2 only added tables (created just above); existing rows are untouched.
                self._exec("UPDATE meta SET value = ? WHERE key = ?", (str(SCHEMA_VERSION), "schema_version"))
            self._exec("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT DO NOTHING",
                       ("schema_version", str(SCHEMA_VERSION)))

    def schema_version(self) -> int:
        row = self._one("SELECT value FROM meta WHERE key = ?", ("schema_version",))
        return int(row[0]) if row else 0

    # -- runs
    def create_run(self, record: RunRecord) -> None:
        with self._tx():
            if self._exec("SELECT 1 FROM runs WHERE id = ?", (record.id,)).fetchone():
                raise StoreError(f"a run with id {record.id!r} already exists in {self.display_url}")
            self._exec(
                f"INSERT INTO runs ({_RUN_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (record.id, record.task_id, dumps(record.task_params), record.task_entry, int(record.seed),
                 dumps(record.config), dumps(record.budget), record.state.value, record.final_candidate,
                 record.reason, record.created_at, record.updated_at))

    @staticmethod
    def _run(row: Sequence[Any]) -> RunRecord:
        return RunRecord(
            id=row[0], task_id=row[1], task_params=json.loads(row[2]), task_entry=row[3], seed=int(row[4]),
            config=json.loads(row[5]), budget=json.loads(row[6]), state=RunState(row[7]),
            final_candidate=row[8], reason=row[9], created_at=float(row[10]), updated_at=float(row[11]))

    def get_run(self, run_id: str) -> RunRecord:
        row = self._one(f"SELECT {_RUN_COLS} FROM runs WHERE id = ?", (run_id,))
        if row is not None:
            return self._run(row)
        # A unique prefix is enough (as with git commits); LIKE wildcards in the id are escaped.
        like = re.sub(r"([\\%_])", r"\\\1", run_id) + "%"
        rows = self._all(f"SELECT {_RUN_COLS} FROM runs WHERE id LIKE ? ESCAPE '\\' ORDER BY created_at", (like,))
        if len(rows) == 1:
            return self._run(rows[0])
        if rows:
            raise StoreError(f"run id prefix {run_id!r} is ambiguous ({len(rows)} runs); give more characters")
        raise StoreError(f"no run {run_id!r} in {self.display_url}; `reasearch runs` lists the runs there")

    def list_runs(self) -> list[RunRecord]:
        return [self._run(r) for r in self._all(f"SELECT {_RUN_COLS} FROM runs ORDER BY created_at, id")]

    def set_run_state(self, run_id: str, state: RunState, *, final_candidate: str | None = None,
                      reason: str = "") -> None:
        with self._tx():
            cur = self._exec("UPDATE runs SET state = ?, final_candidate = ?, reason = ?, updated_at = ? WHERE id = ?",
                             (RunState(state).value, final_candidate, reason, time.time(), run_id))
            if cur.rowcount == 0:
                raise StoreError(f"no run {run_id!r} in {self.display_url}")

    def _touch(self, run_id: str) -> None:
        """Records activity: ``updated_at`` tells a live run from one whose driver died."""
        self._exec("UPDATE runs SET updated_at = ? WHERE id = ?", (time.time(), run_id))

    # -- candidates
    def _insert_candidate(self, c: CandidateRecord) -> bool:
        cur = self._exec(
            "INSERT INTO candidates (run_id, id, source, parent, note, created_at) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING", (c.run_id, c.id, c.source, c.parent, c.note, c.created_at))
        return cur.rowcount == 1

    def add_candidate(self, record: CandidateRecord) -> bool:
        with self._tx():
            return self._insert_candidate(record)

    def get_candidate(self, run_id: str, candidate_id: str) -> CandidateRecord | None:
        row = self._one("SELECT run_id, id, source, parent, note, created_at FROM candidates WHERE run_id = ? AND id = ?",
                        (run_id, candidate_id))
        return CandidateRecord(row[0], row[1], row[2], row[3], row[4], float(row[5])) if row else None

    def candidates(self, run_id: str) -> list[CandidateRecord]:
        rows = self._all("SELECT run_id, id, source, parent, note, created_at FROM candidates WHERE run_id = ? "
                         "ORDER BY seq", (run_id,))
        return [CandidateRecord(r[0], r[1], r[2], r[3], r[4], float(r[5])) for r in rows]

    # -- evaluations
    def record_evaluation(self, evaluation: EvaluationRecord, candidate: CandidateRecord,
                          debit: LedgerEntry | Sequence[LedgerEntry] | None = None,
                          cache_key: str | None = None, release: str | None = None) -> tuple[EvaluationRecord, bool]:
        result = evaluation.result
        debits = [] if debit is None else [debit] if isinstance(debit, LedgerEntry) else list(debit)
        try:
            with self._tx():
                cur = self._exec(
                    "INSERT INTO evaluations (run_id, step, candidate_id, seed, status, score, cached, result, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (evaluation.run_id, evaluation.step, evaluation.candidate_id, evaluation.seed, result.status.value,
                     result.score if result.status is Status.OK else None, int(result.cached),
                     dumps(result.to_dict()), evaluation.created_at))
                if cur.rowcount != 1:
                    raise _AlreadyRecorded  # roll back: the step's first record stands, no second debit
                self._touch(evaluation.run_id)
                if release is not None:
                    self._exec("DELETE FROM reservations WHERE token = ?", (release,))
                self._insert_candidate(candidate)
                for entry in debits:
                    self._insert_debit(entry)
                if cache_key is not None:
                    prov = result.provenance
                    self._exec(
                        "INSERT INTO eval_cache (key, task_id, candidate_sha256, seed, result, created_at) "
                        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                        (cache_key, prov.task_id if prov else "", candidate.id, evaluation.seed,
                         dumps(result.with_(cached=False).to_dict()), evaluation.created_at))
        except _AlreadyRecorded:
            if release is not None:
                self.release(release)
            existing = self.get_evaluation(evaluation.run_id, evaluation.step)
            assert existing is not None
            return existing, False
        return evaluation, True

    _EVAL_COLS = "run_id, step, candidate_id, seed, result, created_at"

    @staticmethod
    def _evaluation(row: Sequence[Any]) -> EvaluationRecord:
        return EvaluationRecord(row[0], int(row[1]), row[2], None if row[3] is None else int(row[3]),
                                EvalResult.from_json(row[4]), float(row[5]))

    def get_evaluation(self, run_id: str, step: int) -> EvaluationRecord | None:
        row = self._one(f"SELECT {self._EVAL_COLS} FROM evaluations WHERE run_id = ? AND step = ?", (run_id, step))
        return self._evaluation(row) if row else None

    def evaluations(self, run_id: str) -> list[EvaluationRecord]:
        rows = self._all(f"SELECT {self._EVAL_COLS} FROM evaluations WHERE run_id = ? ORDER BY step", (run_id,))
        return [self._evaluation(r) for r in rows]

    # -- ledger
    def _insert_debit(self, e: LedgerEntry) -> bool:
        cur = self._exec("INSERT INTO ledger (run_id, step, unit, note, amount, ts) VALUES (?, ?, ?, ?, ?, ?) "
                         "ON CONFLICT DO NOTHING", (e.run_id, e.step, e.unit.value, e.note, float(e.amount), e.ts))
        return cur.rowcount == 1

    def debit(self, entry: LedgerEntry) -> bool:
        with self._tx():
            return self._insert_debit(entry)

    def ledger(self, run_id: str) -> list[LedgerEntry]:
        rows = self._all("SELECT run_id, step, unit, amount, note, ts FROM ledger WHERE run_id = ? ORDER BY seq",
                         (run_id,))
        return [LedgerEntry(r[0], int(r[1]), Unit(r[2]), float(r[3]), r[4], float(r[5])) for r in rows]

    def usage(self, run_id: str) -> dict[Unit, float]:
        rows = self._all("SELECT unit, SUM(amount) FROM ledger WHERE run_id = ? GROUP BY unit", (run_id,))
        return {Unit(u): float(total) for u, total in rows}

    def cache_get(self, key: str) -> EvalResult | None:
        row = self._one("SELECT result FROM eval_cache WHERE key = ?", (key,))
        return EvalResult.from_json(row[0]) if row else None

    # -- reservations and liveness
    def _lock_run(self, run_id: str) -> None:
        """Serializes budget checks of one run between connections (SQLite: BEGIN IMMEDIATE already does)."""

    def reserve(self, run_id: str, token: str, amounts: Mapping[Unit, float], caps: Mapping[Unit, float], *,
                driver_id: str = "", ttl_s: float = 60.0) -> tuple[Unit, float, float] | None:
        budget = Budget(dict(caps))
        now = time.time()
        with self._tx():
            self._lock_run(run_id)
            used: dict[str, float] = {u: float(t) for u, t in self._exec(
                "SELECT unit, SUM(amount) FROM ledger WHERE run_id = ? GROUP BY unit", (run_id,)).fetchall()}
            for u, t in self._exec("SELECT unit, SUM(amount) FROM reservations WHERE run_id = ? AND expires_at > ? "
                                   "GROUP BY unit", (run_id, now)).fetchall():
                used[u] = used.get(u, 0.0) + float(t)
            for unit, amount in amounts.items():
                unit = Unit(unit)
                if not budget.allows(unit, used.get(unit.value, 0.0), float(amount)):
                    cap = budget.cap(unit)
                    assert cap is not None
                    return unit, used.get(unit.value, 0.0), cap
            for unit, amount in amounts.items():
                self._exec("INSERT INTO reservations (token, run_id, driver_id, unit, amount, expires_at) "
                           "VALUES (?, ?, ?, ?, ?, ?)", (token, run_id, driver_id, Unit(unit).value, float(amount),
                                                         now + ttl_s))
        return None

    def release(self, token: str) -> None:
        with self._tx():
            self._exec("DELETE FROM reservations WHERE token = ?", (token,))

    def reserved(self, run_id: str) -> dict[Unit, float]:
        rows = self._all("SELECT unit, SUM(amount) FROM reservations WHERE run_id = ? AND expires_at > ? "
                         "GROUP BY unit", (run_id, time.time()))
        return {Unit(u): float(t) for u, t in rows}

    def heartbeat(self, run_id: str, driver_id: str, *, host: str = "", pid: int = 0, ttl_s: float = 60.0,
                  stopped: bool = False) -> None:
        now = time.time()
        with self._tx():
            cur = self._exec("UPDATE drivers SET heartbeat_at = ?, stopped = ? WHERE run_id = ? AND driver_id = ?",
                             (now, int(stopped), run_id, driver_id))
            if cur.rowcount == 0:
                self._exec("INSERT INTO drivers (run_id, driver_id, host, pid, started_at, heartbeat_at, stopped) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                           (run_id, driver_id, host, int(pid), now, now, int(stopped)))
            self._exec("UPDATE reservations SET expires_at = ? WHERE driver_id = ? AND run_id = ?",
                       (now + ttl_s, driver_id, run_id))

    def drivers(self, run_id: str) -> list[DriverRecord]:
        rows = self._all("SELECT run_id, driver_id, host, pid, started_at, heartbeat_at, stopped FROM drivers "
                         "WHERE run_id = ? ORDER BY started_at, driver_id", (run_id,))
        return [DriverRecord(r[0], r[1], r[2], int(r[3]), float(r[4]), float(r[5]), bool(r[6])) for r in rows]

    def takeover(self, run_id: str, driver_id: str) -> int:
        with self._tx():
            self._exec("UPDATE drivers SET stopped = 1 WHERE run_id = ? AND driver_id <> ?", (run_id, driver_id))
            cur = self._exec("DELETE FROM reservations WHERE run_id = ? AND driver_id <> ?", (run_id, driver_id))
            return max(cur.rowcount, 0)

    def create_fleet(self, fleet_id: str, spec: Mapping[str, Any]) -> bool:
        with self._tx():
            cur = self._exec("INSERT INTO fleets (id, spec, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                             (fleet_id, dumps(dict(spec)), time.time()))
            return cur.rowcount == 1

    def get_fleet(self, fleet_id: str) -> dict[str, Any]:
        row = self._one("SELECT spec FROM fleets WHERE id = ?", (fleet_id,))
        if row is None:
            raise StoreError(f"no fleet {fleet_id!r} in {self.display_url}; `reasearch fleet list` lists the fleets")
        return dict(json.loads(row[0]))

    def list_fleets(self) -> list[tuple[str, float]]:
        return [(r[0], float(r[1])) for r in self._all("SELECT id, created_at FROM fleets ORDER BY created_at, id")]

    def add_fleet_member(self, fleet_id: str, member: int, run_id: str) -> str:
        with self._tx():
            self._exec("INSERT INTO fleet_members (fleet_id, member, run_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                       (fleet_id, int(member), run_id))
            row = self._exec("SELECT run_id FROM fleet_members WHERE fleet_id = ? AND member = ?",
                             (fleet_id, int(member))).fetchone()
        return str(row[0])

    def fleet_members(self, fleet_id: str) -> dict[int, str]:
        rows = self._all("SELECT member, run_id FROM fleet_members WHERE fleet_id = ? ORDER BY member", (fleet_id,))
        return {int(m): str(r) for m, r in rows}

    def fleet_usage(self, fleet_id: str) -> dict[Unit, float]:
        rows = self._all("SELECT l.unit, SUM(l.amount) FROM ledger l JOIN fleet_members f ON f.run_id = l.run_id "
                         "WHERE f.fleet_id = ? GROUP BY l.unit", (fleet_id,))
        return {Unit(u): float(t) for u, t in rows}

    def paid_for(self, run_id: str, candidate_id: str, seed: int | None) -> bool:
        if seed is None:
            row = self._one("SELECT 1 FROM evaluations WHERE run_id = ? AND candidate_id = ? AND seed IS NULL "
                            "AND status IN ('OK', 'INVALID') LIMIT 1", (run_id, candidate_id))
        else:
            row = self._one("SELECT 1 FROM evaluations WHERE run_id = ? AND candidate_id = ? AND seed = ? "
                            "AND status IN ('OK', 'INVALID') LIMIT 1", (run_id, candidate_id, int(seed)))
        return row is not None

    # -- student calls
    def student_call_get(self, key: str) -> dict[str, Any] | None:
        row = self._one("SELECT reply FROM student_calls WHERE key = ? AND status = 'OK'", (key,))
        return json.loads(row[0]) if row else None

    def record_student_call(self, run_id: str, step: int, key: str, model: str, reply: Mapping[str, Any],
                            debits: Sequence[LedgerEntry] = (), release: str | None = None) -> tuple[dict[str, Any], bool]:
        status = str(reply["status"])
        text = dumps(dict(reply))
        try:
            with self._tx():
                if release is not None:
                    self._exec("DELETE FROM reservations WHERE token = ?", (release,))
                cur = self._exec("INSERT INTO student_calls (key, run_id, step, model, status, reply, created_at) "
                                 "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                                 (key, run_id, int(step), model, status, text, time.time()))
                if cur.rowcount != 1:
                    raise _AlreadyRecorded  # stored first by another writer: no second debit
                for entry in debits:
                    self._insert_debit(entry)
                self._touch(run_id)
        except _AlreadyRecorded:  # rolled back, the reservation too: drop it on its own
            if release is not None:
                self.release(release)
            existing = self.student_call_get(key)
            assert existing is not None
            return existing, False
        return json.loads(text), True

    def debit_student_call(self, debits: Sequence[LedgerEntry], release: str | None = None) -> bool:
        with self._tx():
            if release is not None:
                self._exec("DELETE FROM reservations WHERE token = ?", (release,))
            written = [self._insert_debit(entry) for entry in debits]
            for run_id in {entry.run_id for entry in debits}:
                self._touch(run_id)
        return any(written)

    def student_call_paid(self, run_id: str, notes: Sequence[str]) -> bool:
        notes = list(notes)
        if not notes:
            return False
        marks = ", ".join("?" for _ in notes)
        row = self._one(f"SELECT 1 FROM ledger WHERE run_id = ? AND unit = ? AND note IN ({marks}) LIMIT 1",
                        (run_id, Unit.STUDENT_CALLS.value, *notes))
        return row is not None

    def student_calls(self, run_id: str) -> list[tuple[int, str, str]]:
        rows = self._all("SELECT step, key, status FROM student_calls WHERE run_id = ? ORDER BY seq", (run_id,))
        return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]

    # -- events
    def log_event(self, run_id: str, step: int, kind: str, payload: Mapping[str, Any]) -> bool:
        text = dumps(dict(payload))
        with self._tx():
            cur = self._exec("INSERT INTO events (run_id, step, kind, payload, ts) VALUES (?, ?, ?, ?, ?) "
                             "ON CONFLICT DO NOTHING", (run_id, int(step), kind, text, time.time()))
            if cur.rowcount == 1:
                self._touch(run_id)
            return cur.rowcount == 1

    def events(self, run_id: str, *, kind: str | None = None) -> list[Event]:
        if kind is None:
            rows = self._all("SELECT run_id, step, kind, payload, ts FROM events WHERE run_id = ? ORDER BY seq", (run_id,))
        else:
            rows = self._all("SELECT run_id, step, kind, payload, ts FROM events WHERE run_id = ? AND kind = ? "
                             "ORDER BY seq", (run_id, kind))
        return [Event(r[0], int(r[1]), r[2], json.loads(r[3]), float(r[4])) for r in rows]

    def last_step(self, run_id: str) -> int:
        row = self._one(
            "SELECT MAX(s) FROM (SELECT MAX(step) AS s FROM events WHERE run_id = ? "
            "UNION ALL SELECT MAX(step) AS s FROM evaluations WHERE run_id = ? "
            "UNION ALL SELECT MAX(step) AS s FROM ledger WHERE run_id = ?) AS steps", (run_id, run_id, run_id))
        return -1 if row is None or row[0] is None else int(row[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.display_url!r})"


class SQLiteStore(SQLStore):
    """The embedded default: one SQLite file (WAL mode), safe for one writer process at a time and
    any number of readers (``reasearch runs`` while a run writes)."""

    _types = {"bigint": "INTEGER", "float": "REAL", "serial": "INTEGER PRIMARY KEY AUTOINCREMENT"}

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        super().__init__(f"sqlite:///{self.path.resolve()}")

    def _connect(self) -> Any:
        import sqlite3

        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
            conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a committed transaction survives a process crash (kill -9); only an OS
            # crash or power loss can drop the last commits, never corrupt the file.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open SQLite store {self.path}: {exc}") from None
        return conn

    @contextlib.contextmanager
    def _begin(self) -> Iterator[None]:
        # IMMEDIATE takes the write lock up front, so two writers never deadlock upgrading a read lock.
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        else:
            self._conn.execute("COMMIT")

    def _table_exists(self, name: str) -> bool:
        return self._conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                                  (name,)).fetchone() is not None


class PostgresStore(SQLStore):
    """PostgreSQL by URL (``postgresql://user@host:port/db``), for several machines writing to one place.

    Needs the ``postgres`` extra (psycopg 3). A ``?options=-csearch_path%3Dname`` URL parameter
    keeps several stores apart in one database (one schema each).
    """

    _placeholder = "%s"
    _types = {"bigint": "BIGINT", "float": "DOUBLE PRECISION", "serial": "BIGSERIAL PRIMARY KEY"}

    def _connect(self) -> Any:
        try:
            import psycopg
        except ImportError:
            raise StoreError("a PostgreSQL store needs psycopg 3: pip install 'reasearch[postgres]'") from None
        try:
            return psycopg.connect(self.url, autocommit=True)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL at {_redact(self.url)}: {exc}".strip()) from None

    def _begin(self) -> contextlib.AbstractContextManager[Any]:
        return self._conn.transaction()

    def _lock_schema(self) -> None:
        # Two processes opening a fresh database at once would race on CREATE TABLE IF NOT EXISTS.
        self._conn.execute("SELECT pg_advisory_xact_lock(7236451966013107001)")

    def _lock_run(self, run_id: str) -> None:
        # Row lock on the run: two drivers checking the same run's caps take turns (READ COMMITTED
        # alone would let both see the same usage and both reserve the last unit).
        self._exec("SELECT id FROM runs WHERE id = ? FOR UPDATE", (run_id,))

    def _table_exists(self, name: str) -> bool:
        row = self._conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()
        return row is not None and row[0] is not None


class MemoryStore(SQLiteStore):
    """A store that lives in memory (SQLite ``:memory:``), for tests and throw-away runs.

    The same SQL code path as the other backends, so the step, budget and cache rules are never
    implemented twice; gone when closed. One process only (``open_store("memory://")``).
    """

    def __init__(self) -> None:
        self.path = Path(":memory:")
        SQLStore.__init__(self, MEMORY_URL)

    def _connect(self) -> Any:
        import sqlite3

        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA foreign_keys=ON")
        return conn


def _redact(url: str) -> str:
    """The URL without its password."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def open_existing_store(url_or_path: str | Path, *, hint: str = "pass --run-dir DIR or --store URL") -> Store:
    """Opens a store that must already exist: a missing SQLite file is an error, never created.

    What readers and resumes use, so a mistyped directory never becomes a new, empty store.
    """
    text = str(url_or_path)
    if "://" not in text:
        path = Path(text)
        file = path if path.suffix in (".sqlite", ".db", ".sqlite3") else path / STORE_FILENAME
        if not file.is_file():
            raise StoreError(f"no run store at {file}; {hint}")
    elif text.startswith("sqlite:///") and not Path(text[len("sqlite:///"):]).is_file():
        raise StoreError(f"no run store at {text[len('sqlite:///'):]}; {hint}")
    return open_store(url_or_path)


def open_store(url_or_path: str | Path = DEFAULT_RUN_DIR) -> Store:
    """Opens (creating when needed) a run store.

    Args:
        url_or_path: ``postgresql://...`` for PostgreSQL; ``sqlite:///path``, a ``*.sqlite``/``*.db``
            file, or a run directory (which holds ``store.sqlite``) for SQLite; ``memory://`` for a
            store in memory (tests, throw-away runs). Default: ``./runs``.

    Raises:
        StoreError: the store cannot be opened, or was written by a newer reasearch.
    """
    text = str(url_or_path)
    if text in (MEMORY_URL, ":memory:"):
        return MemoryStore()
    if text.startswith(("postgresql://", "postgres://")):
        return PostgresStore(text)
    if text.startswith("sqlite:///"):
        # SQLAlchemy's convention: sqlite:///relative/path, sqlite:////absolute/path
        return SQLiteStore(Path(text[len("sqlite:///"):]))
    if "://" in text:
        raise ConfigError(f"unsupported store URL {text!r}: use postgresql://..., sqlite:///path, memory:// or a directory")
    path = Path(text)
    if path.suffix in (".sqlite", ".db", ".sqlite3"):
        return SQLiteStore(path)
    return SQLiteStore(path / STORE_FILENAME)
