"""Schema 3: a run stores its task's ``TaskSpec``. A version-2 store (built here with the version-2 DDL and
rows as version-2 code wrote them) opens migrated: every run's spec is filled from its stored task id and
parameters, and its runs list, resume and report. On SQLite and, when configured, PostgreSQL.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import reasearch
from reasearch.cli import main
from reasearch.errors import ConfigError, StoreError
from reasearch.evaluators.base import candidate_sha256
from reasearch.evaluators.testing import ToyTask, toy_candidate
from reasearch.runs.executor import LocalExecutor
from reasearch.runs.ledger import Unit
from reasearch.runs.run import Run
from reasearch.runs.store import SCHEMA_VERSION, PostgresConnection, SQLiteConnection, open_store
from tests.pg_helpers import BACKENDS, store_location

V2_DDL = (Path(__file__).parent / "data" / "store_schema_v2.sql").read_text()
TOY = "20261101-120000-aaaaaaaa"  # ToyTask(dim=3): not registered, stored with its class (task_entry)
CIRCLES = "20261101-120100-bbbbbbbb"  # a registered id, stored with no parameters
GONE = "20261101-120200-cccccccc"  # a class that no longer exists: its spec cannot be filled
SEED_SRC, BEST_SRC = toy_candidate([0.0, 0.0, 0.0]), toy_candidate([3.0, 3.0, 2.0])


class _Raw:
    """A DB-API connection to the store's database that bypasses reasearch (writes what version 2 wrote)."""

    def __init__(self, backend: str, url: str) -> None:
        self.pg = backend == "postgres"
        if self.pg:
            import psycopg

            self.conn: Any = psycopg.connect(url, autocommit=True)
        else:
            import sqlite3

            Path(url).mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(Path(url) / "store.sqlite", isolation_level=None)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.conn.execute(sql.replace("?", "%s") if self.pg else sql, tuple(params))

    def close(self) -> None:
        self.conn.close()


def _write_v2_store(backend: str, url: str) -> None:
    raw = _Raw(backend, url)
    types = (PostgresConnection if raw.pg else SQLiteConnection).types
    try:
        for stmt in V2_DDL.format(**types).split(";"):
            if stmt.strip():
                raw.execute(stmt)
        raw.execute("INSERT INTO meta (key, value) VALUES (?, ?)", ("schema_version", "2"))
        run_sql = ("INSERT INTO runs (id, task_id, task_params, task_entry, seed, config, budget, state, "
                   "final_candidate, reason, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
        t0 = time.time() - 60
        raw.execute(run_sql, (TOY, "toy/quadratic-d3-v1", '{"dim":3}', "reasearch.evaluators.testing:ToyTask", 5,
                              '{"driver":"sweep"}', '{"evaluations":3.0}', "interrupted", None, "killed", t0, t0 + 1))
        raw.execute(run_sql, (CIRCLES, "circle_packing/n26-v1", "{}", "", 0, "{}", '{"evaluations":10.0}',
                              "finished", None, "", t0 + 2, t0 + 3))
        raw.execute(run_sql, (GONE, "toy/quadratic-d2-v1", '{"dim":2}', "tests.runs.nowhere:GoneTask", 0, "{}",
                              "{}", "finished", None, "", t0 + 4, t0 + 5))
        task = ToyTask(dim=3)
        cid = candidate_sha256(SEED_SRC)
        result = task.score_solution([0.0, 0.0, 0.0], seed=5).with_(
            provenance=task.provenance(SEED_SRC, seed=5, sandbox_mode="process"))
        raw.execute("INSERT INTO candidates (run_id, id, source, parent, note, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (TOY, cid, SEED_SRC, None, "seed", t0))
        raw.execute("INSERT INTO evaluations (run_id, step, candidate_id, seed, status, score, cached, result, "
                    "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (TOY, 0, cid, 5, "OK", -27.0, 0, json.dumps(result.to_dict()), t0))
        raw.execute("INSERT INTO ledger (run_id, step, unit, note, amount, ts) VALUES (?, ?, ?, ?, ?, ?)",
                    (TOY, 0, "evaluations", "evaluate", 1.0, t0))
        raw.execute("INSERT INTO events (run_id, step, kind, payload, ts) VALUES (?, ?, ?, ?, ?)",
                    (TOY, 0, "model_turn", '{"text":"seed first"}', t0))
    finally:
        raw.close()


@pytest.fixture(params=BACKENDS)
def v2_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of a version-2 store holding three runs (see the module's constants)."""
    for url in store_location(request.param, tmp_path, "v2"):
        _write_v2_store(request.param, url)
        yield url


def test_a_version_2_store_opens_migrated(v2_store: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="reasearch.runs.store.migrations"):
        store = open_store(v2_store)
    try:
        assert store.schema_version() == SCHEMA_VERSION == 3
        assert store.get_run(TOY).task_spec == ToyTask(dim=3).spec
        assert store.get_run(CIRCLES).task_spec == reasearch.spec("circle_packing/n26-v1")
        gone = store.get_run(GONE)
        assert gone.task_spec is None and gone.task_entry == "tests.runs.nowhere:GoneTask"  # old fields kept
        assert f"run {GONE}" in caplog.text and "cannot be built" in caplog.text
        assert store.get_run(TOY).task_params == {"dim": 3}  # the parameters the run was created with
    finally:
        store.close()
    with open_store(v2_store) as again:  # migrated once: opening it again changes nothing
        assert again.schema_version() == 3 and again.get_run(GONE).task_spec is None


def test_a_migrated_store_lists_resumes_and_reports(v2_store: str, tmp_path: Path, executor: LocalExecutor,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--store", v2_store, "--json"]) == 0
    listed = capsys.readouterr()
    rows = {r["id"]: r for r in json.loads(listed.out)}
    assert set(rows) == {TOY, CIRCLES, GONE}
    assert rows[GONE]["best_score"] is None and f"run {GONE}: no best score" in listed.err  # listed all the same
    assert (rows[TOY]["best_score"], rows[TOY]["evaluations"], rows[TOY]["used"]) == (-27.0, 1, {"evaluations": 1.0})
    assert main(["export", TOY, "--store", v2_store, "--json"]) == 0
    exported = json.loads(capsys.readouterr().out)["run"]
    assert exported["task_spec"] == ToyTask(dim=3).spec.to_dict() and exported["task_entry"]  # old fields kept
    out = tmp_path / "report.html"
    assert main(["report", TOY[:18], "--store", v2_store, "-o", str(out)]) == 0
    assert TOY in out.read_text(encoding="utf-8")
    with open_store(v2_store) as store:
        run = Run.open(store, TOY, executor=executor, resume=True)
        assert run.evaluate(SEED_SRC, step=0).score == -27.0  # the stored step: replayed, not re-run
        r = run.evaluate(BEST_SRC, step=1)
        assert (r.status.value, r.score) == ("OK", -1.0)  # evaluated by the task rebuilt from the filled spec
        assert run.status().used[Unit.EVALUATIONS] == 2.0 and run.status().best_score == -1.0
        run.finish(reason="resumed after the migration")
        with pytest.raises(ConfigError, match="cannot load task class"):  # as before schema 3: a clear error
            _ = Run.open(store, GONE).task


def test_a_run_is_rebuilt_from_its_spec_alone(tmp_path: Path, executor: LocalExecutor) -> None:
    """Once stored with a spec, the columns schema 2 rebuilt a task from are not needed any more."""
    with open_store(tmp_path) as store:
        run = Run.create(store, task=ToyTask(dim=3, target=1.0), budget={"evaluations": 2}, executor=executor)
        run.close()
    import sqlite3

    with sqlite3.connect(Path(tmp_path) / "store.sqlite") as conn:  # no usable old-style identity left
        conn.execute("UPDATE runs SET task_params = '{}', task_entry = ''")
    with open_store(tmp_path) as store:
        again = Run.open(store, run.id, executor=executor, resume=True)
        assert again.task.get_params() == ToyTask(dim=3, target=1.0).get_params()
        assert again.evaluate(toy_candidate([1.0, 1.0, 1.0]), step=0).score == 0.0
        again.close()


def test_a_tampered_spec_runs_nothing_and_says_what_is_wrong(tmp_path: Path) -> None:
    """A stored spec naming something that is not a Task class, or another task than the run's, is refused
    with a one-line error before anything is built or evaluated."""
    import sqlite3

    with open_store(tmp_path) as store:
        run_id = Run.create(store, task=ToyTask(dim=2), budget={"evaluations": 1}).id
        Run.open(store, run_id).close()
    db = Path(tmp_path) / "store.sqlite"

    def tamper(**changes: Any) -> None:
        with sqlite3.connect(db) as conn:
            spec = {**ToyTask(dim=2).spec.to_dict(), **changes}
            conn.execute("UPDATE runs SET task_spec = ?", (json.dumps(spec),))

    tamper(task_class="os:system")
    with open_store(tmp_path) as store, pytest.raises(ConfigError, match="not a Task subclass"):
        _ = Run.open(store, run_id).task
    tamper(id="toy/quadratic-d9-v1")
    with open_store(tmp_path) as store, pytest.raises(StoreError, match="its task spec is for 'toy/quadratic-d9-v1'"):
        store.get_run(run_id)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET task_spec = '{\"id\": 1}'")
    with open_store(tmp_path) as store, pytest.raises(StoreError, match="stored task spec cannot be read"):
        store.get_run(run_id)


def test_processes_opening_a_version_2_store_at_once_all_open_it(v2_store: str) -> None:
    """The migration runs under the schema lock: concurrent openers of a version-2 store all succeed (no
    column added twice) and find every spec filled."""
    import subprocess
    import sys

    code = ("import sys; from reasearch.runs.store import open_store; s = open_store(sys.argv[1]); "
            "print(s.schema_version(), s.get_run(sys.argv[2]).task_spec.id); s.close()")
    procs = [subprocess.Popen([sys.executable, "-c", code, v2_store, TOY], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 3, [e.decode()[-500:] for _, e in outs]
    assert [o.decode().strip() for o, _ in outs] == ["3 toy/quadratic-d3-v1"] * 3
    with open_store(v2_store) as store:
        assert store.get_run(CIRCLES).task_spec == reasearch.spec("circle_packing/n26-v1")
