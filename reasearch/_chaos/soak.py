"""The soak: many method runs at once against the chaos endpoint, faults at seeded points, resumes, checks.

:func:`make_schedule` (:mod:`reasearch._chaos.schedule`) draws every fault and its moment from
``random.Random(seed)``: per run its method, its budget, and the request numbers (of that run's calls to the
endpoint) at which each fault strikes. The same seed gives the same schedule (:meth:`Schedule.describe` prints
it); what a fault hits at its moment (a model call, an evaluation, a journal write) depends on the machine's
timing, which is the point.

Faults: ``kill_driver`` (kill -9 of the driver while the endpoint holds its request, or a few
milliseconds after a reply was sent: mid-evaluation, mid-write), ``kill_worker`` (kill -9 of a sandbox
worker under the driver), the endpoint's ``http_500``, ``hang``, ``garbage``, ``cut`` and ``slow``,
``sqlite_lock`` (another process holds the store's write lock for a while), ``store_restart`` (a
PostgreSQL store's server restarted, when a restart command is given), ``disk_full`` (the driver's file
size limit drops: its next store write fails), ``clock_jump`` (the liveness code asked with its clock an
hour ahead while the driver lives) and, for a training run (:mod:`reasearch._chaos.training`), ``kill_job``
(kill -9 of its training job a moment after it started, the driver alive); a training run's ``kill_driver``
strikes a moment into an experiment's training. After every death the harness
starts the driver again (``takeover``), until the run finishes. At the end every invariant of
:mod:`reasearch._chaos.invariants` is checked.

Trust boundary: the harness's own drivers and endpoint; candidates run only in the drivers' sandboxes.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reasearch._chaos.endpoint import ENDPOINT_FAULTS, ChaosEndpoint
from reasearch._chaos.invariants import SoakRecord, Violation, Wait, check_all
from reasearch._chaos.schedule import (
    DRIVERS,
    FAULTS,
    GROUPS,
    HARNESS_ONLY,
    METHODS,
    PROMPT_TASK,
    PROMPT_TEST,
    TASK,
    TRAINING_ONLY,
    Fault,
    RunPlan,
    Schedule,
    make_schedule,
)
from reasearch._chaos.training import TRAINER_WAIT_S, is_trainer, job_of, running, training_env
from reasearch.errors import ConfigError
from reasearch.runs import RunState, Unit, open_store
from reasearch.runs.liveness import effective_state, process_start

__all__ = ["DRIVERS", "FAULTS", "GROUPS", "METHODS", "Fault", "RunPlan", "Schedule", "SoakReport", "make_schedule",
           "soak"]

DISK_FULL_BYTES = 64 << 10  # a driver's file size limit under disk_full: any write past it fails (EFBIG)


@dataclass
class SoakReport:
    """A soak's figures and its violations."""

    seed: int
    runs: int = 0
    finished: int = 0
    evaluations: int = 0
    model_calls: float = 0.0
    faults: Counter[str] = field(default_factory=Counter)
    resumes: int = 0
    wall_s: float = 0.0
    by_driver: Counter[str] = field(default_factory=Counter)  # evaluations (not cached) per driver
    violations: list[Violation] = field(default_factory=list)
    record: SoakRecord | None = None

    def summary(self) -> str:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) or "none"
        return (f"chaos soak seed {self.seed}: {self.runs} runs ({self.finished} finished), {self.evaluations} "
                f"evaluations, {self.model_calls:g} model calls, faults {sum(self.faults.values())} ({faults}), "
                f"{self.resumes} resumes, {len(self.violations)} violations, {self.wall_s:.1f} s")


class _RunDriver:
    """Drives one run through its sessions, striking its faults; one thread per run."""

    def __init__(self, soak: _Soak, plan: RunPlan) -> None:
        self.soak, self.plan = soak, plan
        # (monotonic time due, fault, the training job's pid it waits on: 0 none yet, -1 none needed), struck by
        # the poll loop; a fault on a training job strikes ``seconds`` after the job was first seen
        self.pending: list[tuple[float, Fault, int]] = []
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None

    def answered(self, n: int) -> None:  # the endpoint's thread: schedule what strikes after reply n
        for f in self.plan.faults:
            if f.request == n and not f.hold and f.kind in ("kill_driver", *HARNESS_ONLY):
                with self.lock:
                    if self._needs_trainer(f):
                        self.pending.append((time.monotonic(), f, 0))
                    else:
                        self.pending.append((time.monotonic() + (0.0 if f.kind == "sqlite_lock" else f.seconds), f,
                                             -1))

    def run(self) -> None:
        soak, plan = self.soak, self.plan
        spec = {"store": soak.store_url, "run_id": plan.run_id, "method": plan.method, "task": TASK,
                "url": soak.endpoint.url, "attempts": soak.attempts, "client_timeout_s": soak.client_timeout_s,
                "mode": soak.mode, "budget": plan.caps(), "seed": 0, "root": soak.root,
                "config": {"num_islands": 2} if plan.method == "evolve" else None}
        if plan.method == "prompt":
            spec.update(task=PROMPT_TASK, task_params=soak.student_params(plan.run_id))
        if plan.method == "training":
            spec.update(task="toy/repo-training-v1")
        for session in range(soak.max_sessions):
            if session:
                soak.count("resumes")
            log = open(Path(soak.root) / f"{plan.run_id}.log", "ab")  # noqa: SIM115 (closed below)
            try:
                self.proc = subprocess.Popen([sys.executable, "-m", "reasearch._chaos.driver", json.dumps(spec)],
                                             stdout=log, stderr=log, env=soak.env, start_new_session=True)
                rc = self._watch(self.proc)
            finally:
                log.close()
            if rc == 0:
                soak.progress(f"{plan.run_id} finished after {session + 1} driver sessions")
                return
            soak.died(plan.run_id)
        soak.progress(f"{plan.run_id} NOT finished after {soak.max_sessions} driver sessions")

    def _watch(self, proc: subprocess.Popen[bytes]) -> int | None:
        soak, t0 = self.soak, time.monotonic()
        while True:
            rc = proc.poll()
            if rc is not None:
                soak.waited(f"{self.plan.run_id} driver session", time.monotonic() - t0)
                return rc
            if time.monotonic() - t0 > soak.session_timeout_s:  # a hang: the check reports it
                soak.waited(f"{self.plan.run_id} driver session (killed: hung)", time.monotonic() - t0)
                self._kill(proc)
                return None
            if self.plan.run_id in soak.endpoint.held:  # a held request: kill -9 with the call in flight
                soak.count("kill_driver")
                self._kill(proc)
                soak.endpoint.release(self.plan.run_id)
                return None
            now = time.monotonic()
            with self.lock:
                due = [(t, f, job) for t, f, job in self.pending if t <= now]
                self.pending = [(t, f, job) for t, f, job in self.pending if t > now]
            for t, f, job in due:
                if job == 0:  # waits for the run's training job: then strikes f.seconds later
                    seen = self._trainer(proc)
                    if seen is None and now - t < TRAINER_WAIT_S and proc.poll() is None:
                        with self.lock:
                            self.pending.append((t, f, 0))
                        continue
                    if seen is not None:
                        with self.lock:
                            self.pending.append((now + f.seconds, f, seen))
                        continue
                    soak.count(f"{f.kind}_missed")  # no training job ran in time (a kill_driver strikes anyway)
                if f.kind == "kill_driver":
                    soak.count("kill_driver")
                    if job > 0 and (self._trainer(proc) is not None or running(job)):  # resume meets its folder,
                        soak.count("kill_driver_mid_experiment")  # lock and slot lease
                    self._kill(proc)
                    return None
                if f.kind == "kill_job":
                    trainer = self._trainer(proc) if job > 0 else None  # under nsjail, first seen: the nsjail
                    trainer = trainer or (job if job > 0 and running(job) else None)  # mid-exec: no command line
                    if trainer is not None:
                        self._kill_job(trainer)
                    elif job > 0:
                        soak.count("kill_job_missed")  # the job ended first
                    continue
                self._strike(f, proc)
            time.sleep(0.01)

    def _needs_trainer(self, f: Fault) -> bool:
        """A fault that strikes mid-experiment: ``kill_job``, and a training run's (non-hold) ``kill_driver``."""
        return f.kind == "kill_job" or (f.kind == "kill_driver" and self.plan.method == "training")

    @staticmethod
    def _trainer(proc: subprocess.Popen[bytes]) -> int | None:
        """The training job running under the driver (:func:`reasearch._chaos.training.job_of`), or None."""
        return job_of([pid for pid in _descendants(proc.pid) if is_trainer(pid)])

    def _kill_job(self, pid: int) -> None:
        """kill -9 of the run's training job while its driver lives: the experiment must end as a failure."""
        self.soak.seen(pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        self.soak.count("kill_job")
        with self.soak._lock:  # noqa: SLF001 (the harness's own record)
            self.soak.record.job_kills[self.plan.run_id] = self.soak.record.job_kills.get(self.plan.run_id, 0) + 1

    def _kill(self, proc: subprocess.Popen[bytes]) -> None:
        under = _descendants(proc.pid)
        for pid in under:  # what a kill -9 orphans: checked to be gone at the end
            self.soak.seen(pid)
        t0 = time.monotonic()
        servers = [pid for pid in under if _is_mcp_server(pid)] if self.plan.method == "mcp" else []
        for pid in servers or [proc.pid]:  # an MCP session: its server dies, and its client sees it and ends
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=5.0 if servers else None)
        except subprocess.TimeoutExpired:  # a client that did not notice its server's death: ended here
            self.soak.count("mcp_client_killed")
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        self.soak.waited(f"{self.plan.run_id} kill -9 of its driver", time.monotonic() - t0, timeout_s=10.0)

    def _strike(self, f: Fault, proc: subprocess.Popen[bytes]) -> None:
        soak = self.soak
        if f.kind == "kill_worker":
            workers = _descendants(proc.pid)
            if workers:
                soak.count("kill_worker")
                victim = workers[-1]
                soak.seen(victim)
                try:
                    os.kill(victim, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        elif f.kind == "store_restart":
            soak.count("store_restart")
            threading.Thread(target=soak.restart_store, daemon=True).start()
        elif f.kind == "sqlite_lock":
            soak.count("sqlite_lock")
            threading.Thread(target=soak.lock_store, args=(f.seconds,), daemon=True).start()
        elif f.kind == "disk_full":  # the driver's disk fills: every write past DISK_FULL_BYTES fails (EFBIG)
            try:
                resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (DISK_FULL_BYTES, DISK_FULL_BYTES))
                soak.count("disk_full")
            except (ProcessLookupError, PermissionError, OSError):
                pass
        elif f.kind == "clock_jump":
            soak.count("clock_jump")
            store = open_store(soak.store_url)
            try:
                record = store.get_run(self.plan.run_id)
                # Judged only once the live process is a recorded driver of the run (a session just started
                # may not have beaten yet: then no live driver is known, and "interrupted" is right).
                recorded = any(d.pid == proc.pid and not d.stopped for d in store.drivers(self.plan.run_id))
                alive = proc.poll() is None
                state = effective_state(store, record, now=time.time() + 3600.0)
                if recorded and alive and proc.poll() is None and record.state is RunState.RUNNING \
                        and state is RunState.INTERRUPTED:
                    soak.misjudged(f"run {self.plan.run_id}: driver pid {proc.pid} alive, judged "
                                   f"{state.value} with the clock an hour ahead")
            except Exception:  # noqa: S110 (the run may not be created yet: nothing to judge)
                pass
            finally:
                store.close()


def _record_caps(plan: RunPlan) -> dict[str, float]:
    caps = plan.caps()
    if plan.method == "prompt":  # the sealed test pass is the trusted side's, beyond the optimizer's cap
        caps["student_calls"] += PROMPT_TEST
    return caps


def _student_class() -> Any:
    from reasearch.evaluators.prompt.testing import FakeStudentServer

    class Student(FakeStudentServer):
        """The fake student, counting the requests it answered per student model name (a run's id)."""

        def __init__(self, answers: dict[str, str]) -> None:
            super().__init__(answers)
            self.answered: Counter[str] = Counter()

        def _answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            status, doc = super()._answer(path, body)
            if status == 200:
                with self._lock:
                    self.answered[str(body.get("model", ""))] += 1
            return status, doc

    return Student


def _Student(answers: dict[str, str]) -> Any:  # noqa: N802 (a class made on first use: the prompt package is heavy)
    return _student_class()(answers)


def _is_mcp_server(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return b"reasearch.cli" in argv and b"mcp" in argv


def _descendants(pid: int) -> list[int]:
    """Pids of the processes under ``pid`` (from ``/proc``), parents before children."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[-1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(children.get(p, []))
    return out


class _Soak:
    def __init__(self, schedule: Schedule, root: str, *, parallel: int, mode: str, client_timeout_s: float,
                 session_timeout_s: float, max_sessions: int, attempts: int,
                 echo: Callable[[str], None] | None = None, store_url: str | None = None,
                 restart_store: Sequence[str] = ()) -> None:
        self.echo, self.done = echo, 0
        self.schedule, self.root, self.parallel, self.mode = schedule, root, parallel, mode
        self.client_timeout_s, self.session_timeout_s = client_timeout_s, session_timeout_s
        self.max_sessions, self.attempts = max_sessions, attempts
        self.store_dir = Path(root) / "store"
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.store_url = store_url or str(self.store_dir)
        self.restart_command = list(restart_store)
        self.env = {**os.environ, "REASEARCH_CHAOS_ROOT": root}
        here = str(Path(__file__).resolve().parents[2])
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.record = SoakRecord(root=root, store_url=self.store_url, accounts={},
                                 caps={m: _record_caps(r) for r in schedule.runs for m in r.members()},
                                 groups={r.run_id: list(r.members()) for r in schedule.runs if r.method in GROUPS})
        if any(r.method == "training" for r in schedule.runs):
            extra, self.record.experiments, self.record.leases = training_env(root)
            self.env.update(extra)
        self.drivers = {r.run_id: _RunDriver(self, r) for r in schedule.runs}
        faults = {(r.run_id, f.request): f for r in schedule.runs for f in r.faults}

        def fault_at(run_id: str, n: int) -> str | None:
            f = faults.get((run_id, n))
            if f is None:
                return None
            if f.kind == "kill_driver" and f.hold:
                return "hold"
            return f.kind if f.kind in ENDPOINT_FAULTS else None

        def on_answer(run_id: str, n: int) -> None:
            driver = self.drivers.get(run_id)
            if driver is not None:
                driver.answered(n)

        from reasearch.evaluators import make

        self.student: Any = None  # the fake student (a prompt run in the schedule)
        self.gsm8k = Path(root) / "gsm8k"
        if any(r.method == "prompt" for r in schedule.runs):
            from reasearch.evaluators.prompt.testing import gsm8k_answer_key, write_synthetic_gsm8k

            write_synthetic_gsm8k(self.gsm8k, n_train=40, n_test=20)
            self.student = _Student(gsm8k_answer_key(self.gsm8k))
        self.endpoint = ChaosEndpoint(fault_at, client_timeout_s=client_timeout_s, on_answer=on_answer,
                                      seed_program=make(TASK).seed_program())

    def student_params(self, run_id: str) -> dict[str, Any]:
        """A prompt run's task parameters: synthetic GSM8K, its student (named by the run) the soak's fake."""
        assert self.student is not None
        return {"student": f"openai/{run_id}", "base_url": self.student.url, "n_train": 20, "n_validation": 10,
                "n_test": PROMPT_TEST, "data_dir": str(self.gsm8k)}

    def count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    def seen(self, pid: int) -> None:
        start = process_start(pid)
        with self._lock:
            self.record.seen_processes[pid] = start

    def progress(self, line: str) -> None:
        with self._lock:
            self.done += 1
            done = self.done
        if self.echo is not None:
            self.echo(f"chaos: {line} ({done}/{len(self.schedule.runs)} runs)")

    def died(self, run_id: str) -> None:
        with self._lock:
            self.record.deaths[run_id] = self.record.deaths.get(run_id, 0) + 1

    def misjudged(self, line: str) -> None:
        with self._lock:
            self.record.clock_misjudged.append(line)

    def waited(self, what: str, seconds: float, *, timeout_s: float | None = None) -> None:
        with self._lock:
            self.record.waits.append(Wait(what, seconds, self.session_timeout_s if timeout_s is None else timeout_s))

    def restart_store(self) -> None:
        """Runs the store server's restart command (a PostgreSQL store: its drivers' connections drop)."""
        t0 = time.monotonic()
        subprocess.run(self.restart_command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120,
                       check=False)
        self.waited("store server restart", time.monotonic() - t0, timeout_s=120.0)

    def lock_store(self, seconds: float) -> None:
        """Holds the SQLite store's write lock for ``seconds`` (what another process's long write does)."""
        conn = sqlite3.connect(self.store_dir / "store.sqlite", timeout=30.0, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            time.sleep(seconds)
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        finally:
            conn.close()

    def run(self) -> SoakReport:
        t0 = time.monotonic()
        with self.endpoint, contextlib.ExitStack() as stack, ThreadPoolExecutor(self.parallel) as threads:
            if self.student is not None:
                stack.enter_context(self.student)
            for fut in [threads.submit(d.run) for d in self.drivers.values()]:
                fut.result()
            if self.student is not None:
                self.record.student = dict(self.student.answered)
            self.record.accounts = dict(self.endpoint.accounts)
            for acct in self.record.accounts.values():
                for kind, n in acct.faults.items():
                    if kind in ENDPOINT_FAULTS:
                        self.counts[kind] += n
        _settle(self.root, self.record.seen_processes, timeout_s=10.0)
        driver_of = {m: plan.method for plan in self.schedule.runs for m in plan.members()}
        for plan in self.schedule.runs:  # an MCP session's run is named by its server: found in ROOT/PLAN.run
            named = Path(self.root) / f"{plan.run_id}.run"
            if plan.method == "mcp" and named.is_file():
                run_id = named.read_text().strip()
                self.record.caps[run_id] = self.record.caps.pop(plan.run_id)
                driver_of[run_id] = plan.method
                self.record.groups[plan.run_id] = [run_id]
                # the client's proposals are its own (an MCP run's model is its client): in no ledger of the project
                self.record.accounts.pop(plan.run_id, None)
        report = SoakReport(self.schedule.seed, runs=len(self.record.caps), faults=Counter(
            {k: v for k, v in self.counts.items() if k != "resumes"}), resumes=self.counts["resumes"])
        store = open_store(self.store_url)
        try:
            for run_id in self.record.caps:
                try:
                    rec = store.get_run(run_id)
                except Exception:  # noqa: S112 (never created: the runs_finished check names it)
                    continue
                report.finished += rec.state is RunState.FINISHED
                n = sum(1 for ev in store.evaluations(run_id) if not ev.result.cached)
                report.evaluations += n
                report.by_driver[driver_of.get(run_id, "?")] += n
                report.model_calls += store.usage(run_id).get(Unit.MODEL_CALLS, 0.0)
        finally:
            store.close()
        report.wall_s = time.monotonic() - t0
        report.record = self.record
        report.violations = check_all(self.record)
        if self.record.experiments and not report.violations:  # clean: the experiments root goes (else kept to see)
            shutil.rmtree(Path(self.record.experiments).parent, ignore_errors=True)
        return report


def _settle(root: str, seen: dict[int, str], *, timeout_s: float) -> None:
    """Waits (up to ``timeout_s``) for the processes of killed drivers to exit, as a kill's aftermath: those
    carrying the soak's marker and those seen under a driver when it was killed (pid and start time)."""
    from reasearch._chaos.invariants import soak_processes, still_running

    def left() -> bool:
        for pid in seen:  # orphans this process adopted (a subreaper) and that exited: collected, not left
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        return bool(soak_processes(root)) or any(still_running(pid, start) for pid, start in seen.items())

    deadline = time.monotonic() + timeout_s
    while left() and time.monotonic() < deadline:
        time.sleep(0.1)


def soak(seed: int, *, runs: int = 4, evaluations: int = 12, kills: int = 2, faults: int = 3,
         kinds: Sequence[str] | None = None, parallel: int = 2, store_url: str | None = None,
         restart_store: Sequence[str] = (), methods: Sequence[str] = METHODS,
         mode: str = "process", root: str | None = None, client_timeout_s: float = 2.0,
         session_timeout_s: float = 600.0, max_sessions: int = 50, attempts: int = 6,
         echo: Callable[[str], None] | None = print) -> SoakReport:
    """Runs a soak and returns its report (figures and violations).

    Args:
        seed: draws the schedule (printed through ``echo`` first).
        runs, evaluations: how many method runs, and each one's evaluation cap.
        kills, faults: per run, driver kills and other faults (drawn from ``kinds``).
        parallel: runs driven at once.
        mode: the drivers' sandbox mode (``process`` or ``nsjail``).
        kinds: the fault kinds to draw from (default: every kind that applies to the store).
        store_url: the store (default: SQLite under ``root``); a PostgreSQL URL's schema must be empty.
        restart_store: a command line that restarts the PostgreSQL server (the ``store_restart`` fault).
        root: the scratch root (default: a fresh temporary folder, kept for inspection).
    """
    if parallel < 1 or mode not in ("process", "nsjail"):
        raise ConfigError(f"a soak needs parallel >= 1 and mode process or nsjail, not {parallel} and {mode!r}")
    postgres = bool(store_url) and str(store_url).startswith("postgresql")
    if restart_store and not postgres:
        raise ConfigError("a store restart command needs a PostgreSQL store URL (--store postgresql://...)")
    if kinds is None:  # the kinds that apply to this store
        kinds = [k for k in FAULTS if not (k == "sqlite_lock" and postgres) and not (k == "store_restart"
                                                                                       and not restart_store)
                 and (k not in TRAINING_ONLY or "training" in methods)]
    if (postgres and "sqlite_lock" in kinds) or ("store_restart" in kinds and not restart_store):
        raise ConfigError("sqlite_lock needs the SQLite store; store_restart needs a PostgreSQL store and "
                          "a restart command")
    schedule = make_schedule(seed, runs=runs, evaluations=evaluations, kills=kills, faults=faults, kinds=kinds,
                             methods=methods)
    if echo is not None:
        echo(schedule.describe())
    root = root or tempfile.mkdtemp(prefix=f"reasearch-chaos-{seed}-")
    report = _Soak(schedule, os.path.abspath(root), parallel=parallel, mode=mode, client_timeout_s=client_timeout_s,
                   session_timeout_s=session_timeout_s, max_sessions=max_sessions, attempts=attempts,
                   echo=echo, store_url=store_url, restart_store=restart_store).run()
    if echo is not None:
        echo(report.summary())
        for v in report.violations:
            echo(str(v))
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m reasearch._chaos``: options, one soak; 0 clean, 1 on a violation, 2 on bad options."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m reasearch._chaos")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--evaluations", type=int, default=12)
    p.add_argument("--kills", type=int, default=2)
    p.add_argument("--faults", type=int, default=3)
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--mode", default="process", choices=("process", "nsjail"))
    p.add_argument("--kinds", default="", help="the fault kinds to draw from, comma-separated (default: every "
                   "kind that applies): " + ",".join(FAULTS))
    p.add_argument("--methods", default=",".join(METHODS), help="the drivers to draw from (comma-separated; also "
                   "compare, fleet, mcp, prompt, training): " + ",".join(DRIVERS))
    p.add_argument("--store", default=None, help="store URL (default: SQLite under the root); postgresql://...")
    p.add_argument("--restart-store", default="", help="a shell command that restarts the PostgreSQL server")
    p.add_argument("--root", default=None, help="scratch root (default: a new temporary folder, kept)")
    args: Any = p.parse_args(argv)
    try:
        report = soak(args.seed, runs=args.runs, evaluations=args.evaluations, kills=args.kills, faults=args.faults,
                      kinds=[k for k in args.kinds.split(",") if k] or None, parallel=args.parallel,
                      mode=args.mode, root=args.root, store_url=args.store,
                      restart_store=["sh", "-c", args.restart_store] if args.restart_store else (),
                      methods=[m for m in args.methods.split(",") if m])
    except ConfigError as exc:
        print(f"reasearch chaos: {exc}", file=sys.stderr)
        return 2
    return 1 if report.violations else 0

