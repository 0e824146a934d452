"""What opening an older store changes in it, inside the transaction that opens it (one step per
schema version; the version checks live in :meth:`~.core.SQLCore._init_schema`).

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

from reasearch.runs.store.records import dumps

if TYPE_CHECKING:
    from reasearch.runs.store.core import SQLCore

log = logging.getLogger(__name__)


def add_task_spec_column(store: SQLCore) -> None:
    """Schema 3's column on a runs table made by an older version (NULL until filled)."""
    if not store._column_exists("runs", "task_spec"):
        store._exec("ALTER TABLE runs ADD COLUMN task_spec TEXT")


def fill_task_specs(store: SQLCore) -> tuple[int, int]:
    """Fills ``runs.task_spec`` of every run that has none from its ``task_id``, ``task_params`` and
    ``task_entry`` (built once per distinct task). A run whose task cannot be built any more (its class
    or data is gone) keeps NULL and is rebuilt from those columns when opened, as before schema 3.

    Returns:
        ``(filled, left empty)`` run counts.
    """
    from reasearch.evaluators.registry import build_task

    rows = store._exec("SELECT id, task_id, task_params, task_entry FROM runs WHERE task_spec IS NULL").fetchall()
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
        store._exec("UPDATE runs SET task_spec = ? WHERE id = ?", (text, run_id))
        filled += 1
    if rows:
        log.info("store %s migrated to schema 3: task spec filled for %d runs, %d left empty",
                 store.display_url, filled, left)
    return filled, left
