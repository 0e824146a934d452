"""The core of the one SQL code path: the rows every run has (runs, candidates, evaluations, ledger,
evaluation cache, events), written through the store's :class:`~.connection.SQLConnection` (which holds
the connection, its lock and its dialect; the schema is opened by :func:`~.migrations.open_schema`).

The budget reservations and driver liveness (:mod:`.reservations`), fleets (:mod:`.fleets`) and
metered student calls (:mod:`.metered`) are parts :class:`~.sql.SQLStore` holds beside this core.
Every write is one transaction (docs/architecture.md, invariant 5).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from reasearch.errors import AmbiguousIdError, RunNotFoundError, StoreError
from reasearch.evaluators.result import EvalResult, Status
from reasearch.evaluators.spec import TaskSpec
from reasearch.runs.ledger import LedgerEntry, Unit
from reasearch.runs.store.base import Store
from reasearch.runs.store.connection import SQLConnection
from reasearch.runs.store.migrations import open_schema
from reasearch.runs.store.records import (
    CandidateRecord,
    EvaluationRecord,
    Event,
    RunRecord,
    RunState,
    check_id,
    dumps,
)
from reasearch.runs.store.rows import AlreadyRecorded, insert_debit, touch
from reasearch.runs.store.schema import _RUN_COLS


def _task_spec(run_id: str, text: str | None) -> TaskSpec | None:
    """A stored ``runs.task_spec``; one that does not parse is a corrupt store (a clear error)."""
    if text is None:
        return None
    try:
        return TaskSpec.from_dict(json.loads(text))
    except (ValueError, TypeError) as exc:
        raise StoreError(f"run {run_id}: its stored task spec cannot be read ({exc}); the store was written by "
                         "another reasearch version or edited by hand") from None


class SQLCore(Store):
    """The SQL core every dialect shares, over the :class:`SQLConnection` it is given (and closes).

    One connection per store object, serialized by its lock: the store is never the bottleneck next
    to a sandboxed evaluation.
    """

    def __init__(self, db: SQLConnection) -> None:
        self.db = db
        self.url = db.url
        try:
            open_schema(db)
        except BaseException:
            db.close()
            raise

    def schema_version(self) -> int:
        row = self.db.one("SELECT value FROM meta WHERE key = ?", ("schema_version",))
        return int(row[0]) if row else 0

    # -- runs
    def create_run(self, record: RunRecord) -> None:
        check_id(record.id)  # it names folders: one safe path component
        with self.db.transaction():
            if self.db.execute("SELECT 1 FROM runs WHERE id = ?", (record.id,)).fetchone():
                raise StoreError(f"a run with id {record.id!r} already exists in {self.display_url}")
            self.db.execute(
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

    def get_run(self, run_id: str, *, exact: bool = False) -> RunRecord:
        row = self.db.one(f"SELECT {_RUN_COLS} FROM runs WHERE id = ?", (run_id,))
        if row is not None:
            return self._run(row)
        if exact:
            raise RunNotFoundError(f"no run {run_id!r} in {self.display_url}")
        # A unique prefix is enough (as with git commits); LIKE wildcards in the id are escaped.
        like = re.sub(r"([\\%_])", r"\\\1", run_id) + "%"
        rows = self.db.all(f"SELECT {_RUN_COLS} FROM runs WHERE id LIKE ? ESCAPE '\\' ORDER BY created_at", (like,))
        if len(rows) == 1:
            return self._run(rows[0])
        if rows:
            raise AmbiguousIdError(f"run id prefix {run_id!r} is ambiguous ({len(rows)} runs); give more characters")
        raise RunNotFoundError(f"no run {run_id!r} in {self.display_url}; `reasearch runs` lists the runs there")

    def list_runs(self) -> list[RunRecord]:
        return [self._run(r) for r in self.db.all(f"SELECT {_RUN_COLS} FROM runs ORDER BY created_at, id")]

    def delete_run(self, run_id: str) -> None:
        with self.db.transaction():
            for table in ("candidates", "evaluations", "ledger", "events", "student_calls", "drivers", "reservations",
                          "fleet_members", "runs"):
                self.db.execute(f"DELETE FROM {table} WHERE {'id' if table == 'runs' else 'run_id'} = ?", (run_id,))

    def set_run_state(self, run_id: str, state: RunState, *, final_candidate: str | None = None,
                      reason: str = "") -> None:
        with self.db.transaction():
            cur = self.db.execute(
                "UPDATE runs SET state = ?, final_candidate = ?, reason = ?, updated_at = ? WHERE id = ?",
                (RunState(state).value, final_candidate, reason, time.time(), run_id))
            if cur.rowcount == 0:
                raise RunNotFoundError(f"no run {run_id!r} in {self.display_url}")

    def set_run_budget(self, run_id: str, budget: Mapping[str, float]) -> None:
        with self.db.transaction():
            cur = self.db.execute("UPDATE runs SET budget = ?, updated_at = ? WHERE id = ?",
                                  (dumps(dict(budget)), time.time(), run_id))
            if cur.rowcount == 0:
                raise RunNotFoundError(f"no run {run_id!r} in {self.display_url}")

    # -- candidates
    def _insert_candidate(self, c: CandidateRecord) -> bool:
        cur = self.db.execute(
            "INSERT INTO candidates (run_id, id, source, parent, note, created_at) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING", (c.run_id, c.id, c.source, c.parent, c.note, c.created_at))
        return cur.rowcount == 1

    def add_candidate(self, record: CandidateRecord) -> bool:
        with self.db.transaction():
            return self._insert_candidate(record)

    def get_candidate(self, run_id: str, candidate_id: str) -> CandidateRecord | None:
        row = self.db.one(
            "SELECT run_id, id, source, parent, note, created_at FROM candidates WHERE run_id = ? AND id = ?",
            (run_id, candidate_id),
        )
        return CandidateRecord(row[0], row[1], row[2], row[3], row[4], float(row[5])) if row else None

    def candidates(self, run_id: str) -> list[CandidateRecord]:
        rows = self.db.all("SELECT run_id, id, source, parent, note, created_at FROM candidates WHERE run_id = ? "
                         "ORDER BY seq", (run_id,))
        return [CandidateRecord(r[0], r[1], r[2], r[3], r[4], float(r[5])) for r in rows]

    # -- evaluations
    def record_evaluation(self, evaluation: EvaluationRecord, candidate: CandidateRecord,
                          debit: LedgerEntry | Sequence[LedgerEntry] | None = None,
                          cache_key: str | None = None, release: str | None = None) -> tuple[EvaluationRecord, bool]:
        result = evaluation.result
        debits = [] if debit is None else [debit] if isinstance(debit, LedgerEntry) else list(debit)
        try:
            with self.db.transaction():
                cur = self.db.execute(
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
                    raise AlreadyRecorded  # roll back: the step's first record stands, no second debit
                touch(self.db, evaluation.run_id)
                if release is not None:
                    self.db.execute("DELETE FROM reservations WHERE token = ?", (release,))
                self._insert_candidate(candidate)
                for entry in debits:
                    insert_debit(self.db, entry)
                if cache_key is not None:
                    prov = result.provenance
                    self.db.execute(
                        "INSERT INTO eval_cache (key, task_id, candidate_sha256, seed, result, created_at) "
                        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                        (cache_key, prov.task_id if prov else "", candidate.id, evaluation.seed,
                         dumps(result.with_(cached=False).to_dict()), evaluation.created_at))
        except AlreadyRecorded:
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
        row = self.db.one(f"SELECT {self._EVAL_COLS} FROM evaluations WHERE run_id = ? AND step = ?", (run_id, step))
        return self._evaluation(row) if row else None

    def evaluations(self, run_id: str) -> list[EvaluationRecord]:
        rows = self.db.all(f"SELECT {self._EVAL_COLS} FROM evaluations WHERE run_id = ? ORDER BY step", (run_id,))
        return [self._evaluation(r) for r in rows]

    # -- ledger
    def debit(self, entry: LedgerEntry) -> bool:
        with self.db.transaction():
            return insert_debit(self.db, entry)

    def ledger(self, run_id: str) -> list[LedgerEntry]:
        rows = self.db.all("SELECT run_id, step, unit, amount, note, ts FROM ledger WHERE run_id = ? ORDER BY seq",
                         (run_id,))
        return [LedgerEntry(r[0], int(r[1]), Unit(r[2]), float(r[3]), r[4], float(r[5])) for r in rows]

    def usage(self, run_id: str) -> dict[Unit, float]:
        rows = self.db.all("SELECT unit, SUM(amount) FROM ledger WHERE run_id = ? GROUP BY unit", (run_id,))
        return {Unit(u): float(total) for u, total in rows}

    def cache_get(self, key: str) -> EvalResult | None:
        row = self.db.one("SELECT result FROM eval_cache WHERE key = ?", (key,))
        return EvalResult.from_json(row[0]) if row else None

    def paid_for(self, run_id: str, candidate_id: str, seed: int | None) -> bool:
        if seed is None:
            row = self.db.one("SELECT 1 FROM evaluations WHERE run_id = ? AND candidate_id = ? AND seed IS NULL "
                            "AND status IN ('OK', 'INVALID') LIMIT 1", (run_id, candidate_id))
        else:
            row = self.db.one("SELECT 1 FROM evaluations WHERE run_id = ? AND candidate_id = ? AND seed = ? "
                            "AND status IN ('OK', 'INVALID') LIMIT 1", (run_id, candidate_id, int(seed)))
        return row is not None

    # -- events
    def log_event(self, run_id: str, step: int, kind: str, payload: Mapping[str, Any]) -> bool:
        text = dumps(dict(payload))
        with self.db.transaction():
            cur = self.db.execute("INSERT INTO events (run_id, step, kind, payload, ts) VALUES (?, ?, ?, ?, ?) "
                             "ON CONFLICT DO NOTHING", (run_id, int(step), str(kind), text, time.time()))
            if cur.rowcount == 1:
                touch(self.db, run_id)
            return cur.rowcount == 1

    def events(self, run_id: str, *, kind: str | None = None) -> list[Event]:
        if kind is None:
            rows = self.db.all(
                "SELECT run_id, step, kind, payload, ts FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
            )
        else:
            rows = self.db.all("SELECT run_id, step, kind, payload, ts FROM events WHERE run_id = ? AND kind = ? "
                             "ORDER BY seq", (run_id, str(kind)))
        return [Event(r[0], int(r[1]), r[2], json.loads(r[3]), float(r[4])) for r in rows]

    def last_step(self, run_id: str) -> int:
        row = self.db.one(
            "SELECT MAX(s) FROM (SELECT MAX(step) AS s FROM events WHERE run_id = ? "
            "UNION ALL SELECT MAX(step) AS s FROM evaluations WHERE run_id = ? "
            "UNION ALL SELECT MAX(step) AS s FROM ledger WHERE run_id = ?) AS steps", (run_id, run_id, run_id))
        return -1 if row is None or row[0] is None else int(row[0])

    def close(self) -> None:
        self.db.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.display_url!r})"
