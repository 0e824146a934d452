"""The shared store test case (Optuna's pattern): every test runs against every backend.

SQLite always; PostgreSQL when ``REASEARCH_TEST_POSTGRES_URL`` is set (``.ci/postgres.sh`` starts
one). Under ``CI=true`` a missing URL is a failure, never a silent SQLite-only run.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import reasearch.runs.store.core as store_core
from reasearch.errors import ConfigError, StoreError
from reasearch.evaluators.result import Status
from reasearch.runs.ledger import LedgerEntry, Unit
from reasearch.runs.store import (
    SCHEMA_VERSION,
    EvaluationRecord,
    PostgresStore,
    RunState,
    SQLiteStore,
    Store,
    open_store,
)
from reasearch.runs.testing import StoreTestCase, make_candidate, make_result, make_run_record

_run, _result, _cand = make_run_record, make_result, make_candidate

PG_URL = os.environ.get("REASEARCH_TEST_POSTGRES_URL", "")
IN_CI = os.environ.get("CI", "").lower() == "true"
BACKENDS = ["sqlite"] + (["postgres"] if PG_URL or IN_CI else [])


def _pg_schema_url(schema: str) -> str:
    sep = "&" if "?" in PG_URL else "?"
    return f"{PG_URL}{sep}options=-csearch_path%3D{schema}"


@pytest.fixture
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty store URL of the requested backend (a new schema per test on PostgreSQL)."""
    backend = request.param
    if backend == "memory":
        yield "memory://"
        return
    if backend == "sqlite":
        yield str(tmp_path / "run-dir")
        return
    if not PG_URL:
        pytest.fail("CI=true but REASEARCH_TEST_POSTGRES_URL is not set: run .ci/postgres.sh and export its URL")
    import psycopg

    schema = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield _pg_schema_url(schema)
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    try:
        yield s
    finally:
        s.close()


backends = pytest.mark.parametrize("store_url", BACKENDS, indirect=True)


@pytest.mark.parametrize("store_url", ["memory", *BACKENDS], indirect=True)
class TestEveryBackend(StoreTestCase):
    """The shipped backend test case (reasearch.runs.testing), on in-memory, SQLite and PostgreSQL."""




@backends
def test_failed_transaction_leaves_nothing(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash between writing the evaluation and its debit records neither."""
    store.create_run(_run())
    assert isinstance(store, (SQLiteStore, PostgresStore))

    def crash(db: object, entry: LedgerEntry) -> bool:
        raise RuntimeError("crash inside the transaction")

    monkeypatch.setattr(store_core, "insert_debit", crash)  # the debit the evaluation's transaction writes
    with pytest.raises(RuntimeError):
        store.record_evaluation(EvaluationRecord("r1", 0, "c1", 7, _result(1.0), 1.0), _cand("c1"),
                                debit=LedgerEntry("r1", 0, Unit.EVALUATIONS, 1.0, "evaluate", 1.0), cache_key="k")
    monkeypatch.undo()
    assert store.get_evaluation("r1", 0) is None
    assert store.candidates("r1") == []
    assert store.usage("r1") == {}
    assert store.cache_get("k") is None
    # and the store still works afterwards
    _, new = store.record_evaluation(EvaluationRecord("r1", 0, "c1", 7, _result(1.0), 1.0), _cand("c1"))
    assert new








@backends
def test_schema_version_newer_is_a_clear_error(store_url: str) -> None:
    s = open_store(store_url)
    assert isinstance(s, (SQLiteStore, PostgresStore)) and s.schema_version() == SCHEMA_VERSION
    s.create_run(_run())
    with s.db.transaction():
        s.db.execute("UPDATE meta SET value = ? WHERE key = ?", (str(SCHEMA_VERSION + 1), "schema_version"))
    s.close()
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}, newer"):
        open_store(store_url)
    # nothing was overwritten: the run and the newer version are still there
    with _RawReader(store_url) as check:
        assert check.count_runs() == 1
        assert check.version() == SCHEMA_VERSION + 1


def test_a_store_whose_reservations_predate_their_purpose_columns_opens_and_charges_them(tmp_path: Path) -> None:
    """A store written before reservations said what they hold (step, what, answer kind): opening it adds
    the columns in place, and a dead driver's old hold is charged (at step -1, as work) rather than lost."""
    import sqlite3

    s = open_store(tmp_path)
    s.create_run(_run())
    s.close()
    with sqlite3.connect(tmp_path / "store.sqlite") as conn:  # the table as the previous release made it
        conn.execute("DROP TABLE reservations")
        conn.execute("CREATE TABLE reservations (token TEXT NOT NULL, run_id TEXT NOT NULL REFERENCES runs(id), "
                     "driver_id TEXT NOT NULL, unit TEXT NOT NULL, amount REAL NOT NULL, expires_at REAL NOT NULL, "
                     "PRIMARY KEY (token, unit))")
        conn.execute("INSERT INTO reservations VALUES ('old', 'r1', 'dead', 'evaluations', 1.0, 1e18)")
    s = open_store(tmp_path)
    try:
        assert s.reserved("r1") == {Unit.EVALUATIONS: 1.0}
        assert s.takeover("r1", "new") == 1
        [(step, unit, amount, note)] = [(e.step, e.unit, e.amount, e.note) for e in s.ledger("r1")]
        assert (step, unit, amount) == (-1, Unit.EVALUATIONS, 1.0) and "the work was in flight" in note
        assert s.reserve("r1", "t", {Unit.EVALUATIONS: 1.0}, {}, driver_id="d", step=3, what="evaluation") is None
    finally:
        s.close()


class _RawReader:
    """Reads a store without going through its version check."""

    def __init__(self, url: str) -> None:
        if url.startswith("postgres"):
            import psycopg

            self.conn = psycopg.connect(url, autocommit=True)
        else:
            import sqlite3

            self.conn = sqlite3.connect(Path(url) / "store.sqlite")

    def count_runs(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0])

    def version(self) -> int:
        return int(self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])

    def __enter__(self) -> _RawReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


@backends
def test_concurrent_writers_never_duplicate_a_step(store_url: str) -> None:
    """Two connections race to record the same steps: each step is recorded (and debited) exactly once."""
    a, b = open_store(store_url), open_store(store_url)
    a.create_run(_run())
    wins: list[int] = []
    lock = threading.Lock()

    def writer(s: Store, score: float) -> None:
        for step in range(25):
            _, new = s.record_evaluation(EvaluationRecord("r1", step, "c", 0, _result(score), 1.0), _cand("c"),
                                         debit=LedgerEntry("r1", step, Unit.EVALUATIONS, 1.0, "evaluate", 1.0))
            if new:
                with lock:
                    wins.append(step)

    threads = [threading.Thread(target=writer, args=(s, x)) for s, x in ((a, 1.0), (b, 2.0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins) == list(range(25))
    assert a.usage("r1") == {Unit.EVALUATIONS: 25.0}
    assert len(a.evaluations("r1")) == 25
    a.close()
    b.close()


def test_open_store_resolves_urls(tmp_path: Path) -> None:
    s = open_store(tmp_path / "runs")
    assert isinstance(s, SQLiteStore) and s.path == tmp_path / "runs" / "store.sqlite"
    s.close()
    s = open_store(tmp_path / "x.sqlite")
    assert isinstance(s, SQLiteStore) and s.path == tmp_path / "x.sqlite"
    s.close()
    s = open_store(f"sqlite:///{tmp_path}/y.db")
    assert isinstance(s, SQLiteStore) and s.path == tmp_path / "y.db"
    assert s.url == f"sqlite:///{tmp_path}/y.db"
    s.close()
    with pytest.raises(ConfigError, match="unsupported store URL"):
        open_store("mysql://x")
    with pytest.raises(StoreError, match="cannot connect"):
        open_store("postgresql://nobody:secret@127.0.0.1:1/none")


def test_sqlite_store_is_wal_and_plain_json(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    assert isinstance(s, SQLiteStore)
    assert s.db.one("PRAGMA journal_mode")[0] == "wal"  # type: ignore[index]
    s.create_run(_run())
    s.record_evaluation(EvaluationRecord("r1", 0, "c", 0, _result(3.0), 1.0), _cand("c"))
    raw = s.db.one("SELECT result FROM evaluations")[0]  # type: ignore[index]
    assert json.loads(raw)["score"] == 3.0 and json.loads(raw)["provenance"]["sandbox_mode"] == "nsjail"
    s.close()


def test_password_is_redacted_in_errors() -> None:
    with pytest.raises(StoreError) as info:
        open_store("postgresql://user:hunter2@127.0.0.1:1/db")
    assert "hunter2" not in str(info.value)


# ---------------------------------------------------------------- the Run API on every backend
@pytest.fixture(scope="module")
def executor() -> Iterator[object]:
    from reasearch.engine import SandboxConfig, SandboxPool
    from reasearch.runs.executor import LocalExecutor

    with SandboxPool(SandboxConfig(workers=2)) as pool, LocalExecutor(2, pool=pool) as ex:
        yield ex


@backends
def test_run_api_end_to_end(store: Store, executor: object) -> None:
    from reasearch.evaluators.testing import ToyTask, toy_candidate
    from reasearch.runs.run import Run

    run = Run.create(store, task=ToyTask(), seed=4, budget={"evaluations": 4, "tokens": 500},
                     config={"model": "scripted"}, executor=executor)  # type: ignore[arg-type]
    assert run.last_step() == -1 and run.best() is None
    assert run.status().since_improvement == 0 and run.status().best_score is None
    seed = run.task.seed_program()
    run.log_event(0, "model_turn", {"text": "start"})
    scores = [run.evaluate(seed, step=0, note="seed").score]
    cid = run.add_candidate(toy_candidate([2.0] * 4), parent=None, note="by hand")
    assert cid == run.add_candidate(toy_candidate([2.0] * 4), note="again")  # dedup by content
    scores.append(run.evaluate(toy_candidate([2.0] * 4), step=1, parent=cid).score)
    scores.append(run.evaluate(toy_candidate([1.0] * 4), step=2).score)  # worse
    scores.append(run.evaluate("def run():\n    return 'x'\n", step=3).score)  # INVALID
    refused = run.evaluate(toy_candidate([3.0] * 4), step=4)
    run.debit("tokens", 120, step=4, note="turn")
    assert scores == [-36.0, -4.0, -16.0, None] and refused.status is Status.REFUSED

    st = run.status()
    assert (st.best_score, st.best_candidate, st.best_step) == (-4.0, cid, 1)
    assert st.evaluations == 5 and st.by_status == {"OK": 3, "INVALID": 1, "REFUSED": 1}
    assert st.since_improvement == 3 and st.last_step == 4
    assert st.used[Unit.EVALUATIONS] == 4.0 and st.left[Unit.EVALUATIONS] == 0.0
    assert st.used[Unit.TOKENS] == 120.0 and st.left[Unit.TOKENS] == 380.0 and st.left[Unit.DOLLARS] is None
    assert json.loads(json.dumps(st.to_dict()))["caps"] == {"evaluations": 4.0, "tokens": 500.0}
    assert run.best() is not None and run.best()[0] == cid  # type: ignore[index]
    assert run.candidate_source(cid) == toy_candidate([2.0] * 4)
    assert store.get_candidate(run.id, cid).note == "by hand"  # type: ignore[union-attr]
    with pytest.raises(StoreError, match="no candidate"):
        run.candidate_source("0" * 64)

    run.finish(final_candidate=cid, reason="budget spent")
    again = Run.open(store, run.id[:20], executor=executor)  # type: ignore[arg-type]
    assert again.id == run.id and again.seed == 4 and again.config == {"model": "scripted"}
    assert again.state is RunState.FINISHED and again.task.spec.id == "toy/quadratic-d4-v1"
    assert again.status().to_dict() == {**st.to_dict(), "state": "finished"}
    assert [e.kind for e in again.events()] == ["model_turn"]
    with pytest.raises(ConfigError, match="end state"):
        again.finish(state="running")


def test_run_builds_registered_tasks_by_id(tmp_path: Path, executor: object) -> None:
    from reasearch.errors import UnknownTaskError
    from reasearch.evaluators.registry import register, unregister
    from reasearch.evaluators.testing import ToyTask
    from reasearch.runs.run import Run

    with open_store(tmp_path) as store:
        with pytest.raises(UnknownTaskError, match="unknown task id"):
            Run.create(store, task_id="toy/quadratic-d3-v1", task_params={"dim": 3}, budget={})
        with pytest.raises(ConfigError, match="does not match"):
            Run.create(store, task_id="toy/quadratic-d3-v1", task=ToyTask(), budget={})
        register("toy/quadratic-d3-v1", "reasearch.evaluators.testing:ToyTask", kwargs={"dim": 3})
        try:
            run = Run.create(store, task_id="toy/quadratic-d3-v1", budget={"evaluations": 1},
                             executor=executor)  # type: ignore[arg-type]
            assert store.get_run(run.id).task_entry == ""  # rebuilt through the registry
            assert run.evaluate(run.task.seed_program(), step=0).score == -27.0
            reopened = Run.open(store, run.id, executor=executor)  # type: ignore[arg-type]
            assert reopened.task.spec.id == "toy/quadratic-d3-v1" and reopened.task is not run.task
            assert reopened.status().best_score == -27.0
        finally:
            unregister("toy/quadratic-d3-v1")


@backends
def test_many_processes_open_a_fresh_store_at_once(store_url: str) -> None:
    """Schema creation is serialized: concurrent first opens all succeed, one schema version row."""
    import subprocess
    import sys

    code = ("import sys; from reasearch.runs.store import open_store; s = open_store(sys.argv[1]); "
            "print(s.schema_version()); s.close()")
    procs = [subprocess.Popen([sys.executable, "-c", code, store_url], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [e.decode()[-500:] for _, e in outs]
    assert [o.decode().strip() for o, _ in outs] == [str(SCHEMA_VERSION)] * 4
    with open_store(store_url) as s:
        assert s.db.one("SELECT COUNT(*) FROM meta")[0] == 1  # type: ignore[attr-defined,index]


def test_urls_in_messages_never_show_a_password(tmp_path: Path) -> None:
    from reasearch.runs.store import _redact

    assert _redact("postgresql://me:s3cret@db.example:5432/runs") == "postgresql://me:***@db.example:5432/runs"
    assert _redact("postgresql://me@db:5432/runs") == "postgresql://me@db:5432/runs"
    s = open_store(tmp_path)
    assert s.display_url == s.url and repr(s).startswith("SQLiteStore('sqlite:///")
    s.close()


# ---------------------------------------------------------------- where a store may live (issue 26, item 12)
def test_a_symlinked_store_file_is_refused_and_its_target_never_created(tmp_path: Path) -> None:
    """Attack: ``<run-dir>/store.sqlite`` is a symlink to a file of the attacker's choosing (here one that
    does not exist yet); root would create a database there. The store refuses, nothing is created."""
    run_dir = tmp_path / "runs"
    run_dir.mkdir()
    target = tmp_path / "elsewhere" / "victim.db"
    target.parent.mkdir()
    (run_dir / "store.sqlite").symlink_to(target)
    with pytest.raises(StoreError, match=r"store\.sqlite is a symlink.*remove the link"):
        open_store(run_dir)
    assert not target.exists() and list(target.parent.iterdir()) == []
    (run_dir / "store.sqlite").unlink()  # a planted -wal link is refused the same way
    (run_dir / "store.sqlite-wal").symlink_to(target)
    with pytest.raises(StoreError, match="store.sqlite-wal is a symlink"):
        open_store(run_dir)
    assert not target.exists() and not (run_dir / "store.sqlite").exists()


def test_a_symlinked_run_dir_is_refused(tmp_path: Path) -> None:
    """Attack: the run directory itself is a link to a folder the attacker chose."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(StoreError, match="run directory .*link is a symlink.*pass the real folder"):
        open_store(tmp_path / "link")
    with pytest.raises(StoreError, match="is a symlink"):
        open_store(f"sqlite:///{tmp_path / 'link' / 'x.sqlite'}")
    assert list(real.iterdir()) == []
    open_store(real).close()  # the real folder is fine


@pytest.mark.parametrize("where", ["run dir", "parent", "grandparent of a new run dir"])
def test_a_run_dir_in_a_folder_writable_by_others_is_refused(tmp_path: Path, where: str) -> None:
    """Attack: a run directory in (or under) a world-writable, non-sticky folder: another user can
    rename it away and put a folder of links in its place between our check and our write."""
    shared = tmp_path / "shared"
    shared.mkdir()
    run_dir = shared / "runs" if where != "grandparent of a new run dir" else shared / "a" / "runs"
    if where == "run dir":
        run_dir.mkdir()
        run_dir.chmod(0o777)
    else:
        shared.chmod(0o777)
    with pytest.raises(StoreError, match=r"writable by group/others.*chmod go-w"):
        open_store(run_dir)
    assert not (run_dir / "store.sqlite").exists()
    if where == "grandparent of a new run dir":
        assert not (shared / "a").exists()  # refused before anything was created


def test_a_run_dir_under_a_sticky_world_writable_folder_is_ours_and_allowed(tmp_path: Path) -> None:
    """``/tmp/mine/runs`` is fine: the sticky bit stops others renaming our folder; a folder planted
    there by another user would be refused (it would not be ours)."""
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    with open_store(sticky / "mine" / "runs") as store:
        assert store.list_runs() == []
    assert (sticky / "mine" / "runs").stat().st_mode & 0o022 == 0
