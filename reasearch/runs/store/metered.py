"""Metered student-model calls in the SQL stores: each call's reply (an ``OK`` one is the cache, served
to any run by its key) written with its ledger debits and the release of its reservation in one
transaction, so a call is paid once per run and a crash leaves the reply and its debit or neither.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from reasearch.runs.ledger import LedgerEntry, Unit
from reasearch.runs.store.connection import SQLConnection
from reasearch.runs.store.records import dumps
from reasearch.runs.store.reservations import Reservations
from reasearch.runs.store.rows import AlreadyRecorded, insert_debit, touch


class MeteredCalls:
    """The student-call methods of :class:`~reasearch.runs.store.base.Store` over the store's connection;
    a call recorded first by another writer drops its own hold through ``reservations``."""

    def __init__(self, db: SQLConnection, reservations: Reservations) -> None:
        self.db = db
        self.reservations = reservations

    def student_call_get(self, key: str) -> dict[str, Any] | None:
        row = self.db.one("SELECT reply FROM student_calls WHERE key = ? AND status = 'OK'", (key,))
        return json.loads(row[0]) if row else None

    def record_student_call(
        self,
        run_id: str,
        step: int,
        key: str,
        model: str,
        reply: Mapping[str, Any],
        debits: Sequence[LedgerEntry] = (),
        release: str | None = None,
    ) -> tuple[dict[str, Any], bool]:
        status = str(reply["status"])
        text = dumps(dict(reply))
        try:
            with self.db.transaction():
                if release is not None:
                    self.db.execute("DELETE FROM reservations WHERE token = ?", (release,))
                cur = self.db.execute("INSERT INTO student_calls (key, run_id, step, model, status, reply, created_at) "
                                 "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                                 (key, run_id, int(step), model, status, text, time.time()))
                if cur.rowcount != 1:
                    raise AlreadyRecorded  # stored first by another writer: no second debit
                for entry in debits:
                    insert_debit(self.db, entry)
                touch(self.db, run_id)
        except AlreadyRecorded:  # rolled back, the reservation too: drop it on its own
            if release is not None:
                self.reservations.release(release)
            existing = self.student_call_get(key)
            assert existing is not None
            return existing, False
        return json.loads(text), True

    def debit_student_call(self, debits: Sequence[LedgerEntry], release: str | None = None) -> bool:
        with self.db.transaction():
            if release is not None:
                self.db.execute("DELETE FROM reservations WHERE token = ?", (release,))
            written = [insert_debit(self.db, entry) for entry in debits]
            for run_id in {entry.run_id for entry in debits}:
                touch(self.db, run_id)
        return any(written)

    def student_call_paid(self, run_id: str, notes: Sequence[str]) -> bool:
        notes = list(notes)
        if not notes:
            return False
        marks = ", ".join("?" for _ in notes)
        row = self.db.one(f"SELECT 1 FROM ledger WHERE run_id = ? AND unit = ? AND note IN ({marks}) LIMIT 1",
                        (run_id, Unit.STUDENT_CALLS.value, *notes))
        return row is not None

    def student_calls(self, run_id: str) -> list[tuple[int, str, str]]:
        rows = self.db.all("SELECT step, key, status FROM student_calls WHERE run_id = ? ORDER BY seq", (run_id,))
        return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]
