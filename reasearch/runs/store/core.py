"""The core of the one SQL code path: connection, dialect hooks, schema, and the rows every run has
(runs, candidates, evaluations, ledger, evaluation cache, events).

The budget reservations and driver liveness (:mod:`.reservations`), fleets (:mod:`.fleets`) and
metered student calls (:mod:`.metered`) are mixins over this core, joined in :class:`~.sql.SQLStore`.
Every write is one transaction (docs/architecture.md, invariant 5).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from reasearch.errors import StoreError
from reasearch.evaluators.result import EvalResult, Status
from reasearch.evaluators.spec import TaskSpec
from reasearch.runs.ledger import LedgerEntry, Unit
from reasearch.runs.store.base import Store
from reasearch.runs.store.migrations import add_task_spec_column, fill_task_specs
from reasearch.runs.store.records import (
    SCHEMA_VERSION,
    CandidateRecord,
    EvaluationRecord,
    Event,
    RunRecord,
    RunState,
    check_id,
    dumps,
)
from reasearch.runs.store.schema import _DDL, _RUN_COLS


def _task_spec(run_id: str, text: str | None) -> TaskSpec | None:
    """A stored ``runs.task_spec``; one that does not parse is a corrupt store (a clear error)."""
    if text is None:
        return None
    try:
        return TaskSpec.from_dict(json.loads(text))
    except (ValueError, TypeError) as exc:
        raise StoreError(f"run {run_id}: its stored task spec cannot be read ({exc}); the store was written by "
                         "another reasearch version or edited by hand") from None


class _AlreadyRecorded(Exception):
    """Aborts a transaction whose step was recorded by someone else first."""


class SQLCore(Store):
    """The SQL core every dialect shares; subclasses supply a DB-API connection and a dialect.

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
        self._in_tx = False  # inside _tx: a failure there is translated by the outermost level only
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

    @abstractmethod
    def _column_exists(self, table: str, column: str) -> bool:
        """True when ``table`` has a column named ``column``."""

    def _sql(self, sql: str) -> str:
        out = self._sql_cache.get(sql)
        if out is None:
            out = sql if self._placeholder == "?" else sql.replace("?", self._placeholder)
            self._sql_cache[sql] = out
        return out

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._conn.execute(self._sql(sql), tuple(params))

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock, self._translated():
            try:
                return list(self._exec(sql, params).fetchall())
            except Exception as exc:
                # A read outside a transaction is safe to repeat on a fresh connection.
                if self._in_tx or not self._reconnected(exc):
                    raise
                return list(self._exec(sql, params).fetchall())

    def _one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        with self._lock, self._translated():
            try:
                return self._exec(sql, params).fetchone()
            except Exception as exc:
                if self._in_tx or not self._reconnected(exc):
                    raise
                return self._exec(sql, params).fetchone()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[None]:
        with self._lock, self._translated(), contextlib.ExitStack() as stack:
            try:
                stack.enter_context(self._begin())
            except Exception as exc:
                # Lost before the transaction began (nothing written): one fresh connection, once. A
                # failure after BEGIN is never retried here: its commit may have happened.
                if self._in_tx or not self._reconnected(exc):
                    raise
                stack.enter_context(self._begin())
            outer, self._in_tx = self._in_tx, True
            try:
                yield
            finally:
                self._in_tx = outer

    # -- failures of the database itself, as StoreError with what to do
    @contextlib.contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except StoreError:
            raise
        except Exception as exc:
            error = None if self._in_tx else self._store_error(exc)
            if error is None:
                raise
            raise error from exc

    def _store_error(self, exc: BaseException) -> StoreError | None:
        """The dialect's :class:`StoreError` for a failure of the database (disk full, connection lost), or None."""
        return None

    def _reconnected(self, exc: BaseException) -> bool:
        """True when ``exc`` is a dropped connection and a fresh one replaced it (the dialect says)."""
        return False

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
            if not self._column_exists("drivers", "proc_start"):
                # Added within version 2 (a column with a default: readers and writers of either age work):
                # the driver's process start, so a resume can tell a dead driver from a live one.
                self._exec("ALTER TABLE drivers ADD COLUMN proc_start TEXT NOT NULL DEFAULT ''")
            for column, ddl in (("step", "INTEGER NOT NULL DEFAULT -1"), ("what", "TEXT NOT NULL DEFAULT ''"),
                                ("answer_kind", "TEXT NOT NULL DEFAULT ''")):
                if not self._column_exists("reservations", column):
                    # Added within version 3 (columns with defaults: readers and writers of either age work):
                    # what a hold is for, so a resume can charge work a dead driver had in flight.
                    self._exec(f"ALTER TABLE reservations ADD COLUMN {column} {ddl}")
            add_task_spec_column(self)
            if found is not None and found < SCHEMA_VERSION:
                # 1 -> 2 only added tables (created just above); 2 -> 3 fills every run's task spec.
                fill_task_specs(self)
                self._exec("UPDATE meta SET value = ? WHERE key = ?", (str(SCHEMA_VERSION), "schema_version"))
            self._exec("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT DO NOTHING",
                       ("schema_version", str(SCHEMA_VERSION)))

    def schema_version(self) -> int:
        row = self._one("SELECT value FROM meta WHERE key = ?", ("schema_version",))
        return int(row[0]) if row else 0

    # -- runs
    def create_run(self, record: RunRecord) -> None:
        check_id(record.id)  # it names folders: one safe path component
        with self._tx():
            if self._exec("SELECT 1 FROM runs WHERE id = ?", (record.id,)).fetchone():
                raise StoreError(f"a run with id {record.id!r} already exists in {self.display_url}")
            self._exec(
                f"INSERT INTO runs ({_RUN_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (record.id, record.task_id, dumps(record.task_params), record.task_entry, int(record.seed),
                 dumps(record.config), dumps(record.budget), record.state.value, record.final_candidate,
                 record.reason, record.created_at, record.updated_at,
                 None if record.task_spec is None else dumps(record.task_spec.to_dict())))

    @staticmethod
    def _run(row: Sequence[Any]) -> RunRecord:
        return RunRecord(
            id=row[0], task_id=row[1], task_params=json.loads(row[2]), task_entry=row[3], seed=int(row[4]),
            config=json.loads(row[5]), budget=json.loads(row[6]), state=RunState(row[7]),
            final_candidate=row[8], reason=row[9], created_at=float(row[10]), updated_at=float(row[11]),
            task_spec=_task_spec(row[0], row[12]))

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

    def delete_run(self, run_id: str) -> None:
        with self._tx():
            for table in ("candidates", "evaluations", "ledger", "events", "student_calls", "drivers", "reservations",
                          "fleet_members", "runs"):
                self._exec(f"DELETE FROM {table} WHERE {'id' if table == 'runs' else 'run_id'} = ?", (run_id,))

    def set_run_state(self, run_id: str, state: RunState, *, final_candidate: str | None = None,
                      reason: str = "") -> None:
        with self._tx():
            cur = self._exec("UPDATE runs SET state = ?, final_candidate = ?, reason = ?, updated_at = ? WHERE id = ?",
                             (RunState(state).value, final_candidate, reason, time.time(), run_id))
            if cur.rowcount == 0:
                raise StoreError(f"no run {run_id!r} in {self.display_url}")

    def set_run_budget(self, run_id: str, budget: Mapping[str, float]) -> None:
        with self._tx():
            cur = self._exec("UPDATE runs SET budget = ?, updated_at = ? WHERE id = ?",
                             (dumps(dict(budget)), time.time(), run_id))
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
        row = self._one(
            "SELECT run_id, id, source, parent, note, created_at FROM candidates WHERE run_id = ? AND id = ?",
            (run_id, candidate_id),
        )
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
                    "INSERT INTO evaluations (run_id, step, candidate_id, seed, status, score, cached, result, "
                    "created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (
                        evaluation.run_id,
                        evaluation.step,
                        evaluation.candidate_id,
                        evaluation.seed,
                        result.status.value,
                        result.score if result.status is Status.OK else None,
                        int(result.cached),
                        dumps(result.to_dict()),
                        evaluation.created_at,
                    ),
                )
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

    def paid_for(self, run_id: str, candidate_id: str, seed: int | None) -> bool:
        if seed is None:
            row = self._one("SELECT 1 FROM evaluations WHERE run_id = ? AND candidate_id = ? AND seed IS NULL "
                            "AND status IN ('OK', 'INVALID') LIMIT 1", (run_id, candidate_id))
        else:
            row = self._one("SELECT 1 FROM evaluations WHERE run_id = ? AND candidate_id = ? AND seed = ? "
                            "AND status IN ('OK', 'INVALID') LIMIT 1", (run_id, candidate_id, int(seed)))
        return row is not None

    # -- events
    def log_event(self, run_id: str, step: int, kind: str, payload: Mapping[str, Any]) -> bool:
        text = dumps(dict(payload))
        with self._tx():
            cur = self._exec("INSERT INTO events (run_id, step, kind, payload, ts) VALUES (?, ?, ?, ?, ?) "
                             "ON CONFLICT DO NOTHING", (run_id, int(step), str(kind), text, time.time()))
            if cur.rowcount == 1:
                self._touch(run_id)
            return cur.rowcount == 1

    def events(self, run_id: str, *, kind: str | None = None) -> list[Event]:
        if kind is None:
            rows = self._all(
                "SELECT run_id, step, kind, payload, ts FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
            )
        else:
            rows = self._all("SELECT run_id, step, kind, payload, ts FROM events WHERE run_id = ? AND kind = ? "
                             "ORDER BY seq", (run_id, str(kind)))
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
