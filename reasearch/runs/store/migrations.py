"""Opening a store's schema (:func:`open_schema`: create what is missing, refuse a newer version) and
what opening an older store changes in it, inside the transaction that opens it (one step per schema
version). Everything goes through the public face of the store's :class:`~.connection.SQLConnection`.

- 1 -> 2 added tables only (drivers, reservations, fleets): created by the DDL, nothing rewritten.
- 2 -> 3 adds ``runs.task_spec`` and fills it, for every stored run, with the :class:`TaskSpec` of the
  task built from the run's stored id, parameters and class (:func:`fill_task_specs`).

Trust boundary: the rows are what reasearch's own drivers wrote (the trusted side; candidates never
write to the store). Filling a spec imports the task class a run names, as resuming that run would.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from reasearch.errors import StoreError
from reasearch.runs.store.records import SCHEMA_VERSION, dumps
from reasearch.runs.store.schema import _DDL

if TYPE_CHECKING:
    from reasearch.runs.store.connection import SQLConnection

log = logging.getLogger(__name__)


def open_schema(db: SQLConnection) -> None:
    """Creates the tables a fresh store lacks and brings an older one to :data:`SCHEMA_VERSION`, in one
    transaction; a store of a newer version is refused with nothing changed."""
    with db.transaction():
        db.lock_schema()
        if db.table_exists("meta"):
            row = db.execute("SELECT value FROM meta WHERE key = ?", ("schema_version",)).fetchone()
            found = int(row[0]) if row else None
            if found is not None and found > SCHEMA_VERSION:
                raise StoreError(
                    f"the store at {db.display_url} has schema version {found}, newer than this reasearch "
                    f"understands ({SCHEMA_VERSION}); upgrade reasearch to open it (nothing was changed)")
        else:
            found = None
        for stmt in _DDL.format(**db.types).split(";"):
            if stmt.strip():
                db.execute(stmt)
        if not db.column_exists("drivers", "proc_start"):
            # Added within version 2 (a column with a default: readers and writers of either age work):
            # the driver's process start, so a resume can tell a dead driver from a live one.
            db.execute("ALTER TABLE drivers ADD COLUMN proc_start TEXT NOT NULL DEFAULT ''")
        for column, ddl in (("step", "INTEGER NOT NULL DEFAULT -1"), ("what", "TEXT NOT NULL DEFAULT ''"),
                            ("answer_kind", "TEXT NOT NULL DEFAULT ''")):
            if not db.column_exists("reservations", column):
                # Added within version 3 (columns with defaults: readers and writers of either age work):
                # what a hold is for, so a resume can charge work a dead driver had in flight.
                db.execute(f"ALTER TABLE reservations ADD COLUMN {column} {ddl}")
        add_task_spec_column(db)
        if found is not None and found < SCHEMA_VERSION:
            # 1 -> 2 only added tables (created just above); 2 -> 3 fills every run's task spec.
            fill_task_specs(db)
            db.execute("UPDATE meta SET value = ? WHERE key = ?", (str(SCHEMA_VERSION), "schema_version"))
        db.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT DO NOTHING",
                   ("schema_version", str(SCHEMA_VERSION)))


def add_task_spec_column(db: SQLConnection) -> None:
    """Schema 3's column on a runs table made by an older version (NULL until filled)."""
    if not db.column_exists("runs", "task_spec"):
        db.execute("ALTER TABLE runs ADD COLUMN task_spec TEXT")


def fill_task_specs(db: SQLConnection) -> tuple[int, int]:
    """Fills ``runs.task_spec`` of every run that has none from its ``task_id``, ``task_params`` and
    ``task_entry`` (built once per distinct task). A run whose task cannot be built any more (its class
    or data is gone) keeps NULL and is rebuilt from those columns when opened, as before schema 3.

    Returns:
        ``(filled, left empty)`` run counts.
    """
    from reasearch.evaluators.registry import build_task

    rows = db.execute("SELECT id, task_id, task_params, task_entry FROM runs WHERE task_spec IS NULL").fetchall()
    specs: dict[tuple[str, str, str], str | None] = {}
    filled = left = 0
    for run_id, task_id, params_text, entry in rows:
        key = (str(task_id), str(params_text), str(entry or ""))
        if key not in specs:
            try:
                specs[key] = dumps(build_task(key[0], json.loads(key[1]), key[2]).spec.to_dict())
            except Exception as exc:  # whatever a stored task's constructor raises, the store still opens
                specs[key] = None
                log.warning("run %s: task %s (params %s%s) cannot be built (%s: %s); its spec stays empty and the "
                            "run is rebuilt from its id and parameters when opened", run_id, key[0], key[1],
                            f", class {key[2]}" if key[2] else "", type(exc).__name__, exc)
        text = specs[key]
        if text is None:
            left += 1
            continue
        db.execute("UPDATE runs SET task_spec = ? WHERE id = ?", (text, run_id))
        filled += 1
    if rows:
        log.info("store %s migrated to schema 3: task spec filled for %d runs, %d left empty",
                 db.display_url, filled, left)
    return filled, left
