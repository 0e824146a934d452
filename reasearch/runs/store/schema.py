"""The store's tables (portable DDL: ``{bigint}``, ``{float}``, ``{serial}`` are filled in per dialect)."""

from __future__ import annotations

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
    updated_at {float} NOT NULL,
    task_spec TEXT
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
    proc_start TEXT NOT NULL DEFAULT '',
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
    step INTEGER NOT NULL DEFAULT -1,
    what TEXT NOT NULL DEFAULT '',
    answer_kind TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (token, unit)
)
"""

# runs.task_spec (schema 3): the TaskSpec as JSON; NULL only for a run stored before schema 3 whose task
# could not be built when the store was migrated (it is then rebuilt from task_id, task_params, task_entry).
_RUN_COLS = ("id, task_id, task_params, task_entry, seed, config, budget, state, final_candidate, reason, "
             "created_at, updated_at, task_spec")
