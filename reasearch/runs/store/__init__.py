"""The run store: runs, candidates, evaluations, ledger, event log and evaluation cache.

One abstract interface (:class:`Store`, in the manner of Optuna's ``BaseStorage``) and one SQL code
path behind it (:class:`SQLStore`) with two dialects: :class:`SQLiteStore`, the embedded default (a
``store.sqlite`` file in the run directory, WAL mode), and :class:`PostgresStore` (a
``postgresql://`` URL, so several machines write to one place). Everything JSON in the store is
plain JSON (``EvalResult.to_dict()``); nothing is pickled.

Crash safety (docs/architecture.md, invariant 5): each write is one transaction. Recording an evaluation
writes the candidate, the evaluation, its ledger debit and its cache entry together, so a ``kill -9``
leaves either all of them or none. Writes keyed by ``(run, step, ...)`` are idempotent: replaying a
step after a resume changes nothing.

The package is cut by concern: :mod:`.records` (records, plain JSON), :mod:`.base` (the interface),
:mod:`.schema` (tables), :mod:`.connection` (the connection, its lock and its dialect: the one object
the store and :mod:`.migrations` share), :mod:`.core` (the SQL code path), :mod:`.rows` (row writes
its parts share), and the parts the SQL store holds: :mod:`.reservations` (budget held in flight,
driver liveness), :mod:`.fleets`, :mod:`.metered` (student calls); :mod:`.sql` (the SQL store with its
parts), :mod:`.sqlite`, :mod:`.postgres` and :mod:`.opening` (``open_store``).
"""

from __future__ import annotations

from reasearch.runs.store.base import Store
from reasearch.runs.store.connection import MemoryConnection, PostgresConnection, SQLConnection, SQLiteConnection
from reasearch.runs.store.core import SQLCore  # noqa: F401 (importable as before)
from reasearch.runs.store.opening import open_existing_store, open_store
from reasearch.runs.store.postgres import PostgresStore
from reasearch.runs.store.records import (
    DEFAULT_RUN_DIR,
    MAX_FLEET_ID_LEN,
    MAX_ID_LEN,
    MEMORY_URL,
    SCHEMA_VERSION,
    CandidateRecord,
    DriverRecord,
    EvaluationRecord,
    Event,
    Refusal,
    Reservation,
    RunRecord,
    RunState,
    check_id,
    dumps,
    new_run_id,
)
from reasearch.runs.store.records import STORE_FILENAME as STORE_FILENAME  # importable from here as before
from reasearch.runs.store.records import _redact as _redact  # importable from here as before
from reasearch.runs.store.reservations import charged_mark, reservation_mark
from reasearch.runs.store.sql import SQLStore
from reasearch.runs.store.sqlite import MemoryStore, SQLiteStore

__all__ = [
    "SCHEMA_VERSION",
    "DEFAULT_RUN_DIR",
    "RunState",
    "RunRecord",
    "CandidateRecord",
    "EvaluationRecord",
    "Event",
    "DriverRecord",
    "Refusal",
    "Reservation",
    "Store",
    "SQLStore",
    "SQLConnection",
    "SQLiteConnection",
    "MemoryConnection",
    "PostgresConnection",
    "SQLiteStore",
    "PostgresStore",
    "MemoryStore",
    "open_store",
    "open_existing_store",
    "new_run_id",
    "check_id",
    "MAX_ID_LEN",
    "MAX_FLEET_ID_LEN",
    "dumps",
    "MEMORY_URL",
    "reservation_mark",
    "charged_mark",
]
