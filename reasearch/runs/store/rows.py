"""Row writes that several parts of the SQL store make inside their own transactions: a ledger debit,
a run's activity stamp, and the signal that a step was recorded by someone else first.

Each takes the store's :class:`~.connection.SQLConnection` and runs inside a transaction its caller holds.
"""

from __future__ import annotations

import time

from reasearch.runs.ledger import LedgerEntry
from reasearch.runs.store.connection import SQLConnection

__all__ = ["AlreadyRecorded", "insert_debit", "touch"]


class AlreadyRecorded(Exception):
    """Aborts a transaction whose step was recorded by someone else first."""


def insert_debit(db: SQLConnection, e: LedgerEntry) -> bool:
    """Writes one ledger debit unless that ``(run, step, unit, note)`` is there; True when written."""
    cur = db.execute("INSERT INTO ledger (run_id, step, unit, note, amount, ts) VALUES (?, ?, ?, ?, ?, ?) "
                     "ON CONFLICT DO NOTHING", (e.run_id, e.step, e.unit.value, e.note, float(e.amount), e.ts))
    return bool(cur.rowcount == 1)


def touch(db: SQLConnection, run_id: str) -> None:
    """Records activity: ``updated_at`` tells a live run from one whose driver died."""
    db.execute("UPDATE runs SET updated_at = ? WHERE id = ?", (time.time(), run_id))
