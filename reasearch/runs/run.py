"""The Run API: one optimization run over a store, a budget and an executor.

A :class:`Run` is the only door through which a driver (the agent, a sweep, a user's own loop)
evaluates candidates and spends budget. Every method that writes is keyed by a ``step`` the caller
owns, and is idempotent on it, so a driver that was killed (``kill -9``) and reopened with
:meth:`Run.open` can replay its steps: a step already recorded returns its stored result without
running or debiting anything (docs/architecture.md, invariants 4 and 5).

Example::

    store = open_store("runs")
    run = Run.create(store, task_id="circle_packing/n26-v1", budget=Budget.from_dict({"evaluations": 50}))
    result = run.evaluate(run.task.seed_program(), step=0, note="seed")
    print(run.status())
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from reasearch.engine.waits import NOTICE_EVERY_S, WaitTicker
from reasearch.errors import ConfigError, StoreError
from reasearch.evaluators.base import Task, candidate_sha256
from reasearch.evaluators.kinds import ExperimentOptions
from reasearch.evaluators.registry import make
from reasearch.evaluators.result import EvalResult
from reasearch.evaluators.scores import best_index, ok_score, since_best
from reasearch.evaluators.spec import TaskSpec
from reasearch.runs.cache import EvalCache, cache_key
from reasearch.runs.executor import (
    EvalRequest,
    Executor,
    LocalExecutor,
    resolve_task,
    task_entry_of,
)
from reasearch.runs.ledger import Budget, LedgerEntry, Unit
from reasearch.runs.lineage import nearest_candidate
from reasearch.runs.liveness import (
    HEARTBEAT_S,
    RESERVATION_TTL_S,
    STALE_S,
    Heartbeat,
    active_seconds,
    active_seconds_of,
    driver_alive,
    driver_gone,
    effective_state,
    live_drivers,
    process_start,
)
from reasearch.runs.run_budget import (
    cost_units,
    fleet_caps,
    fleet_left,
    held_by_others_only,
    refusal_text,
    refused_result,
    refused_while_held,
)
from reasearch.runs.status import RunStatus, ScoreSpread, score_spreads
from reasearch.runs.store import (
    CandidateRecord,
    EvaluationRecord,
    Event,
    Refusal,
    RunRecord,
    RunState,
    Store,
    check_id,
    new_run_id,
)

__all__ = ["Run", "RunStatus", "RunState", "Event", "ScoreSpread", "active_seconds", "active_seconds_of",
           "effective_state", "refusal_text", "driver_gone", "process_start",
           # importable from here as before the cut (liveness: runs/liveness.py)
           "HEARTBEAT_S", "STALE_S", "RESERVATION_TTL_S", "OTHERS_WAIT_S", "driver_alive", "live_drivers"]

_EVALUATE_NOTE = "evaluate"  # ledger note of an evaluation's own debit
_SHARED_CACHE_NOTE = "evaluate (shared cache)"  # a first evaluation in this run, computed earlier by another

# How long an evaluation refused only because other drivers' reservations hold the budget waits for them
# (a dead driver's expire within the TTL; a dead one on this host is reclaimed at once).
OTHERS_WAIT_S = RESERVATION_TTL_S + HEARTBEAT_S
_OTHERS_POLL_S = 0.25
_NOTICE_AFTER_S = 2.0  # a hold that ends sooner (the usual case) is not reported
_NOTICE_EVERY_S = NOTICE_EVERY_S


class Run:
    """One optimization run: its task, seed, budget and everything recorded about it in a store.

    Build with :meth:`create` (a new run) or :meth:`open` (resume or inspect). Thread-safe: several
    threads may call :meth:`evaluate` at once (each with its own step); in-flight evaluations count
    against the budget, so concurrent callers cannot overspend a cap.
    """

    def __init__(self, store: Store, record: RunRecord, *, executor: Executor | None = None,
                 budget: Budget | None = None) -> None:
        self.store = store
        self._record = record
        self.id: str = record.id
        self.task_id: str = record.task_id
        self.task_params: dict[str, Any] = dict(record.task_params)
        self.seed: int = record.seed
        self.config: dict[str, Any] = dict(record.config)
        self.budget = budget if budget is not None else Budget.from_dict(record.budget)  # create passes its own
        self._executor = executor
        self._owns_executor = False
        self._task: Task | None = None
        self._lock = threading.Lock()
        self._heartbeat: Heartbeat | None = None
        self._cache = EvalCache(store)

    # ------------------------------------------------------------ construction
    @classmethod
    def create(
        cls,
        store: Store,
        *,
        task_id: str | None = None,
        task_params: Mapping[str, Any] | None = None,
        seed: int = 0,
        budget: Budget | Mapping[str, float],
        config: Mapping[str, Any] | None = None,
        executor: Executor | None = None,
        task: Task | None = None,
        run_id: str | None = None,
    ) -> Run:
        """Creates a run and stores it (state ``running``).

        Args:
            store: where the run is recorded.
            task_id: a registry id (e.g. ``circle_packing/n26-v1``).
            task_params: the task's constructor keyword arguments.
            seed: the run's seed (default seed of its evaluations).
            budget: caps per unit (a :class:`Budget` or a mapping such as ``{"evaluations": 50}``).
            config: the driver's configuration, stored as plain JSON.
            executor: where evaluations run (default: a ``LocalExecutor`` over the process-wide pool).
            task: a task instance instead of ``task_id``/``task_params`` (for tasks outside the
                registry; the run records its ``module:Class`` so :meth:`open` can rebuild it).
            run_id: an explicit id (default: a new sortable unique id).

        Raises:
            UnknownTaskError: ``task_id`` is not registered (and no ``task`` was given).
            ConfigError: bad budget or parameters, or a ``run_id`` that is not one safe path component
                (:func:`~reasearch.runs.store.check_id`); nothing is created.
        """
        if run_id is not None:
            check_id(run_id)
        if task is not None:
            if task_id is not None and task_id != task.spec.id:
                raise ConfigError(f"task_id {task_id!r} does not match the task instance's id {task.spec.id!r}")
            if task_params:
                raise ConfigError("pass task_params or a task instance (whose parameters are its own), not both")
            task_id, params, entry = task.spec.id, dict(task.get_params()), task_entry_of(task)
        else:
            if task_id is None:
                raise ConfigError("Run.create needs task_id (or a task instance)")
            params, entry = dict(task_params or {}), ""
            task = resolve_task(task_id, params)
            if task.spec.id != task_id:  # a task folder's path: stored by its id, folder and content hash
                task_id, params, entry = task.spec.id, dict(task.get_params()), task_entry_of(task)
        if not isinstance(budget, Budget):  # the one conversion of a mapping; a Budget was parsed by its caller
            budget = Budget.from_dict(budget)
        now = time.time()
        record = RunRecord(
            id=run_id or new_run_id(), task_id=task_id, task_params=params, task_entry=entry, seed=int(seed),
            config=dict(config or {}), budget=budget.to_dict(), state=RunState.RUNNING, created_at=now, updated_at=now,
            task_spec=task.spec)
        store.create_run(record)
        run = cls(store, store.get_run(record.id), executor=executor, budget=budget)
        run._task = task
        run._start_driving()
        return run

    @classmethod
    def open(cls, store: Store, run_id: str, *, executor: Executor | None = None, resume: bool = False,
             takeover: bool = False) -> Run:
        """Reopens a stored run; ``run_id`` may be a unique prefix.

        Args:
            store: the store holding the run.
            run_id: its id (or a unique prefix).
            executor: where new evaluations run.
            resume: mark the run ``running`` again (a driver is about to continue it); without it the
                run's state is left as stored (inspection, or a replay that only reads).
            takeover: with ``resume``, this process replaces every other driver of the run, which is known
                to be dead (a retried fleet task): their budget reservations are charged at their reserved
                amounts at once (the work in flight may have been done) instead of expiring, so the resumed
                driver can redo the step that was in flight.
        """
        run = cls(store, store.get_run(run_id), executor=executor)
        if resume:
            run.resume(takeover=takeover)
        return run

    def resume(self, *, takeover: bool = False) -> None:
        """Makes this process a driver of the run: marks it ``running`` (recording what it was) and starts
        the heartbeat. ``takeover`` also drops the reservations of every other driver (known dead).

        Raises:
            ConfigError: ``takeover`` while another process holds the run (:func:`driver_alive`: on this host its
                process is there, whatever its heartbeat's age); nothing is changed.
        """
        if takeover:
            self._refuse_live_others()
        was = self.store.get_run(self.id)
        shown = effective_state(self.store, was)
        if was.state is not RunState.RUNNING or shown is not RunState.RUNNING:
            self.store.set_run_state(self.id, RunState.RUNNING, final_candidate=None,
                                     reason=f"resumed; was {shown.value}" + (f": {was.reason}" if was.reason else ""))
        self._start_driving()
        if takeover:
            self.store.takeover(self.id, self.driver_id)
        else:
            self.reclaim_dead_drivers()

    def _refuse_live_others(self) -> None:
        """Raises ConfigError when a driver of another process still holds the run (a takeover would cut it)."""
        here, me = socket.gethostname(), os.getpid()
        for d in self.store.drivers(self.id):
            if (d.host, d.pid) != (here, me) and driver_alive(d):
                raise ConfigError(f"run {self.id} is driven by a live process (pid {d.pid} on {d.host}); "
                                  "stop it first")

    def reclaim_dead_drivers(self) -> int:
        """Ends the reservations of this run's drivers that ran on this host and whose process is gone
        (``kill -9``; a reused pid is told apart by its start time), so a resume at once does not wait
        :data:`RESERVATION_TTL_S` for them: each becomes a debit at its reserved amounts (the work in
        flight may have been done and paid for), once (see :meth:`Store.reclaim`). Returns how many
        reservation rows were dropped."""
        gone = [d.driver_id for d in self.store.drivers(self.id)
                if d.driver_id != self.driver_id and not d.stopped and driver_gone(d)]
        return self.store.reclaim(self.id, gone) if gone else 0

    def _start_driving(self) -> None:
        """Starts this process's heartbeat on the run (liveness, and the lease on its reservations)."""
        with self._lock:
            if self._heartbeat is None:
                self._heartbeat = Heartbeat(self.store, self.id)

    @property
    def driver_id(self) -> str:
        """This process's driver id on the run (starts driving when needed)."""
        self._start_driving()
        assert self._heartbeat is not None
        return self._heartbeat.driver_id

    # ------------------------------------------------------------ parts
    @property
    def task(self) -> Task:
        """The run's task, built once: ``make(spec)`` of its stored spec (a run stored before schema 3
        whose spec could not be filled: from its id, parameters and class)."""
        if self._task is None:
            spec = self._record.task_spec
            self._task = make(spec) if spec is not None else resolve_task(
                self.task_id, self.task_params, self._record.task_entry)
        return self._task

    @property
    def task_spec(self) -> TaskSpec:
        """The run's task spec (its identity): the stored one, read without building the task."""
        spec = self._record.task_spec
        return spec if spec is not None else self.task.spec

    @property
    def executor(self) -> Executor:
        """Where evaluations run; default: a ``LocalExecutor`` over the process-wide sandbox pool."""
        if self._executor is None:
            import reasearch.engine as engine

            self._executor = LocalExecutor(pool=engine.default_pool())
            self._owns_executor = True
        return self._executor

    @property
    def state(self) -> RunState:
        """The stored state, shown as ``interrupted`` when the run's drivers all died (see :func:`effective_state`)."""
        return effective_state(self.store, self.store.get_run(self.id))

    def evaluation_estimate(self) -> dict[Unit, float]:
        """What one evaluation of this task is expected to cost, checked against the caps before it runs.

        A task declares it with ``budget_estimate() -> {unit: amount}`` (e.g. a prompt task:
        ``{"student_calls": 500}``); default ``{"evaluations": 1}``.
        """
        return cost_units(self.task.budget_estimate())

    @property
    def eval_unit(self) -> Unit:
        """The unit an evaluation of this task mainly spends (the first of its estimate): the agent
        stops when it is spent (``student_calls`` for a prompt task)."""
        return next(iter(self.evaluation_estimate()), Unit.EVALUATIONS)

    def reserve(self, costs: Mapping[Unit | str, float], *, wait: bool = False, step: int = -1, what: str = "",
                answer_kind: str = "", capped: bool = True) -> tuple[str, Refusal | None]:
        """Reserves ``costs`` in the store for work about to run (every driver of the run sees it, and
        every member of its fleet, against the fleet-wide caps).

        Args:
            costs: what the work may cost at most, per unit.
            wait: when the only obstacle is what other drivers (or fleet members) hold in flight, wait for
                them (at most :data:`OTHERS_WAIT_S`) instead of refusing at once: their work may cost
                less than it holds, or end without paying.
            step: the step the work belongs to; what: what it is (``"model call"``); answer_kind: the
                event kind that, logged at ``step``, holds its answer. Should this driver die with the
                hold, a resume debits it at ``step`` at the reserved amounts (the work may have been done
                and paid for), unless that answer event was logged (the replay debits it then).
            capped: False holds ``costs`` without checking any cap (never refused): work the caps do not
                govern (the trusted side's sealed test pass) that must still be paid should its driver die.

        Returns ``(token, None)`` when reserved: settle it with :meth:`settle` or release it with
        :meth:`release` (or in the store write that records the debits); else ``(token, refusal)``
        with the first cap it does not fit under (:func:`refusal_text` words it), with nothing held.
        """
        token = uuid.uuid4().hex
        amounts = cost_units(costs)
        if wait and capped:
            return token, self._reserve_waiting(token, amounts, step=int(step), what=what, answer_kind=answer_kind)
        refusal = self.store.reserve(self.id, token, amounts, self.budget.units() if capped else {},
                                     driver_id=self.driver_id, ttl_s=RESERVATION_TTL_S,
                                     fleet=fleet_caps(self.config) if capped else None, step=int(step),
                                     what=what, answer_kind=answer_kind)
        return token, refusal

    def release(self, token: str) -> None:
        """Ends a reservation made by :meth:`reserve` (no-op when it is already gone)."""
        self.store.release(token)

    def settle(self, token: str | None, costs: Mapping[Unit | str, float], *, step: int, note: str) -> None:
        """Debits what reserved work actually cost and drops its reservation, in one store write (the
        unused part returns to the caps). Replaying the same ``(step, note)`` debits nothing twice."""
        if note in (_EVALUATE_NOTE, _SHARED_CACHE_NOTE):
            raise ConfigError(f"the note {note!r} is reserved for evaluations' own debits")
        now = time.time()
        debits = [LedgerEntry(self.id, int(step), unit, float(amount), note, now)
                  for unit, amount in cost_units(costs).items() if amount or unit is Unit.MODEL_CALLS]
        for entry in debits:
            if not entry.amount >= 0 or entry.amount == float("inf"):
                raise ConfigError(f"a debit must be a finite amount >= 0, not {entry.amount!r}")
        self.store.settle(token, debits)

    def evaluation_costs(self, result: EvalResult, estimate: Mapping[Unit, float]) -> dict[Unit, float]:
        """What one finished evaluation cost, debited atomically with its result.

        A task declares it with ``evaluation_costs(result) -> {unit: amount}`` from what the trusted
        side measured (e.g. a training task: ``{"experiments": 1, "gpu_seconds": ...}``); default: the
        estimate.
        """
        return cost_units(self.task.evaluation_costs(result))

    # ------------------------------------------------------------ candidates and evaluations
    def add_candidate(self, source: str, *, parent: str | None = None, note: str = "") -> str:
        """Stores a candidate (once: the same source gives the same id) and returns its id (SHA-256 of the source)."""
        if not isinstance(source, str):
            raise TypeError(f"source must be str, not {type(source).__name__}")
        cid = candidate_sha256(source)
        self.store.add_candidate(CandidateRecord(self.id, cid, source, parent, note, time.time()))
        return cid

    def lineage_parent(self, source: str) -> str | None:
        """The stored candidate ``source`` was most likely derived from (the most similar), or None (a root)."""
        return nearest_candidate(source, self.store.candidates(self.id), exclude=candidate_sha256(source))

    def evaluate(self, source: str, *, step: int, parent: str | None = None, note: str = "",
                 seed: int | None = None, repeat: bool = False,
                 options: ExperimentOptions | None = None) -> EvalResult:
        """Evaluates a candidate as step ``step`` of this run, at most once per step.

        In order: a step already recorded returns its stored result (resume never re-spends); a cache
        hit returns the cached result (``cached=True``, no debit); when the evaluation's expected cost
        (:meth:`evaluation_estimate`, default one ``evaluations`` unit) does not fit under a cap the
        result is ``REFUSED`` and nothing runs; otherwise the executor runs it, and candidate,
        evaluation and its debits (:meth:`evaluation_costs`) are stored in one transaction.

        Args:
            source: the candidate's source text.
            step: the driver's step number (unique per evaluation of this run).
            parent: the id of the candidate this one was derived from.
            note: what produced it (stored with the candidate).
            seed: evaluation seed (default: the run's seed).
            repeat: a fresh evaluation even when the cache holds this candidate's result (to measure
                the variance of clock-dependent programs): charged like any evaluation, recorded with
                ``metrics["repeat"] = True``, never read from nor written to the cache. See
                :meth:`score_spread`.
            options: a training task's experiment options (where its by-products go: ``experiment_dir``);
                never part of the cache key.

        Raises:
            ConfigError: ``step`` was already used for another candidate (the driver diverged on replay).
            SandboxError: the engine itself failed (nothing is recorded or debited then).
        """
        if not isinstance(source, str):
            raise TypeError(f"source must be str, not {type(source).__name__}")
        step = int(step)
        cid = candidate_sha256(source)
        existing = self.store.get_evaluation(self.id, step)
        if existing is not None:
            return self._replayed(existing, cid, step)
        seed = self.seed if seed is None else int(seed)
        candidate = CandidateRecord(self.id, cid, source, parent, note, time.time())
        task = self.task
        key = None if repeat else cache_key(task, cid, seed)
        hit = self._cache.get(key)
        if hit is not None and self.store.paid_for(self.id, cid, seed):
            # A repeat within this run: free, and marked as served from the cache.
            return self._record_result(step, candidate, seed, hit, debits=(), key=None)
        estimate = self.evaluation_estimate()
        token = uuid.uuid4().hex
        refusal = self._reserve_waiting(token, estimate, step=step, what="evaluation")
        if refusal is not None:
            not_run = task.provenance(source, seed=seed, sandbox_mode="not run")
            if held_by_others_only(refusal, estimate):
                # Not the budget's end: other drivers' evaluations in flight hold it. Not recorded, so the
                # step can be run again (by this driver later, or by a resume) once they end.
                return refused_while_held(refusal, step=step, waited_s=OTHERS_WAIT_S, provenance=not_run)
            return self._record_result(step, candidate, seed, refused_result(refusal, estimate, provenance=not_run),
                                       debits=(), key=None)
        try:
            if hit is not None:
                # This run's first evaluation of the candidate: the shared cache saves the compute, but the
                # run pays as if it had run it (equal budgets per run, whatever other runs did before).
                result = hit.with_(cached=False)
                now = time.time()
                debits = [LedgerEntry(self.id, step, unit, amount, _SHARED_CACHE_NOTE, now)
                          for unit, amount in self.evaluation_costs(result, estimate).items()]
                return self._record_result(step, candidate, seed, result, debits=debits, key=None, release=token)
            request = EvalRequest(self.task_spec, source, seed, options.to_dict() if options is not None else {})
            result = self.executor.submit(request).result()
            if repeat:
                result = result.with_(metrics={**dict(result.metrics), "repeat": True})
            now = time.time()
            debits = [LedgerEntry(self.id, step, unit, amount, _EVALUATE_NOTE, now)
                      for unit, amount in self.evaluation_costs(result, estimate).items()]
            return self._record_result(step, candidate, seed, result, debits=debits,
                                       key=key if EvalCache.storable(result) else None, release=token)
        finally:
            self.store.release(token)

    def _reserve_waiting(self, token: str, estimate: Mapping[Unit, float], *, step: int = -1, what: str = "",
                         answer_kind: str = "") -> Refusal | None:
        """``store.reserve``; a refusal caused only by other drivers' reservations waits for them (at most
        :data:`OTHERS_WAIT_S`; dead drivers of this run on this host are reclaimed, and charged, at once)."""
        deadline = time.monotonic() + OTHERS_WAIT_S
        ticker: WaitTicker | None = None
        while True:
            refusal = self.store.reserve(self.id, token, estimate, self.budget.units(), driver_id=self.driver_id,
                                         ttl_s=RESERVATION_TTL_S, fleet=fleet_caps(self.config), step=step,
                                         what=what, answer_kind=answer_kind)
            if refusal is None or not held_by_others_only(refusal, estimate):
                return refusal
            if self.reclaim_dead_drivers():
                continue
            if time.monotonic() >= deadline:
                return refusal
            if ticker is None:  # said while it lasts: other drivers' evaluations in flight hold the budget
                unit, used, cap = refusal
                ticker = WaitTicker(f"the {unit} budget of run {self.id} ({used:g} of {cap:g} spent or held; "
                                    f"at most {OTHERS_WAIT_S:g} s)", holder=self._other_drivers,
                                    after_s=_NOTICE_AFTER_S, every_s=_NOTICE_EVERY_S)
            ticker.tick()
            time.sleep(_OTHERS_POLL_S)

    def _other_drivers(self) -> str:
        """The live drivers of this run but this one, for a person waiting on their holds."""
        others = [d for d in self.store.drivers(self.id) if d.driver_id != self.driver_id and not d.stopped]
        return "; ".join(f"driver pid {d.pid} on {d.host}" for d in others) or "another driver"


    def _record_result(self, step: int, candidate: CandidateRecord, seed: int, result: EvalResult,
                       *, debits: Sequence[LedgerEntry], key: str | None, release: str | None = None) -> EvalResult:
        record = EvaluationRecord(self.id, step, candidate.id, seed, result, time.time())
        stored, _ = self.store.record_evaluation(record, candidate, debit=debits, cache_key=key, release=release)
        if stored.candidate_id != candidate.id:  # another process recorded this step first, with another candidate
            raise ConfigError(f"step {step} of run {self.id} was recorded for candidate {stored.candidate_id[:12]}, "
                              f"not {candidate.id[:12]}: each evaluation needs its own step")
        return stored.result

    def _replayed(self, existing: EvaluationRecord, cid: str, step: int) -> EvalResult:
        if existing.candidate_id != cid:
            raise ConfigError(
                f"step {step} of run {self.id} already evaluated candidate {existing.candidate_id[:12]}, not "
                f"{cid[:12]}: a resumed driver must replay the same candidates at the same steps")
        return existing.result

    # ------------------------------------------------------------ ledger and events
    def debit(self, unit: Unit | str, amount: float, *, step: int, note: str = "") -> None:
        """Debits ``amount`` of ``unit`` (tokens, dollars, ...) at ``step``; replaying the same
        ``(step, unit, note)`` does not debit twice."""
        unit = Unit(unit)
        amount = float(amount)
        if not amount >= 0 or amount == float("inf"):
            raise ConfigError(f"a debit must be a finite amount >= 0, not {amount!r}")
        if note == _EVALUATE_NOTE:
            raise ConfigError(f"the note {_EVALUATE_NOTE!r} is reserved for evaluations' own debits")
        self.store.debit(LedgerEntry(self.id, int(step), unit, amount, note, time.time()))

    def log_event(self, step: int, kind: str, payload: Mapping[str, Any]) -> None:
        """Appends an event; idempotent per ``(step, kind)``. Write it BEFORE acting on it."""
        if not kind:
            raise ConfigError("an event needs a kind")
        self.store.log_event(self.id, int(step), kind, payload)

    def events(self, *, kind: str | None = None) -> list[Event]:
        """The run's events in the order logged (optionally of one kind)."""
        return self.store.events(self.id, kind=kind)

    def last_step(self) -> int:
        """The highest step written (event, evaluation or debit); -1 for a fresh run."""
        return self.store.last_step(self.id)

    def used(self) -> dict[Unit, float]:
        """Budget spent per unit (every unit listed)."""
        usage = self.store.usage(self.id)
        return {u: usage.get(u, 0.0) for u in Unit}

    def remaining(self) -> dict[Unit, float | None]:
        """Budget left per unit; None for an uncapped unit. A fleet member also sees the fleet-wide caps."""
        usage = self.store.usage(self.id)
        return fleet_left(self.store, self.config, {u: self.budget.left(u, usage.get(u, 0.0)) for u in Unit})

    # ------------------------------------------------------------ summaries
    def _best_of(self, evaluations: list[EvaluationRecord]) -> tuple[EvaluationRecord | None, int]:
        """The best OK evaluation (first to reach the best score) and how many came after it."""
        scores = [ok_score(ev.result.status, ev.result.score) for ev in evaluations]
        i = best_index(scores, self.task_spec.direction)
        return (None if i is None else evaluations[i]), since_best(scores, self.task_spec.direction)

    def best(self) -> tuple[str, EvalResult] | None:
        """``(candidate id, result)`` of the best ``OK`` evaluation so far, or None."""
        best, _ = self._best_of(self.store.evaluations(self.id))
        return None if best is None else (best.candidate_id, best.result)

    def evaluations(self) -> list[EvaluationRecord]:
        """Every recorded evaluation, by step."""
        return self.store.evaluations(self.id)

    def score_spread(self, candidate_id: str | None = None) -> dict[str, ScoreSpread]:
        """Score spread (min/max/mean/std) of each candidate evaluated afresh more than once.

        Fresh evaluations are the ones not served from the cache (repeats, or any evaluation of a
        non-deterministic task). Args: ``candidate_id`` restricts the answer to one candidate.
        """
        return score_spreads(self.store.evaluations(self.id), candidate_id)

    def status(self) -> RunStatus:
        """Budget used and left per unit, best score and candidate, evaluations by status, stagnation."""
        evaluations = self.store.evaluations(self.id)
        best, since = self._best_of(evaluations)
        usage = self.store.usage(self.id)
        return RunStatus(
            run_id=self.id, task_id=self.task_id, state=self.state,
            used={u: usage.get(u, 0.0) for u in Unit},
            left=fleet_left(self.store, self.config, {u: self.budget.left(u, usage.get(u, 0.0)) for u in Unit}),
            caps=self.budget.units(),
            best_score=None if best is None else best.result.score,
            best_candidate=None if best is None else best.candidate_id,
            best_step=None if best is None else best.step,
            evaluations=len(evaluations),
            by_status=dict(Counter(ev.result.status.value for ev in evaluations)),
            cached=sum(1 for ev in evaluations if ev.result.cached),
            since_improvement=since,
            last_step=self.store.last_step(self.id),
        )

    def candidate_source(self, candidate_id: str) -> str:
        """The source of one of this run's candidates."""
        rec = self.store.get_candidate(self.id, candidate_id)
        if rec is None:
            raise StoreError(f"run {self.id} has no candidate {candidate_id!r}")
        return rec.source

    def finish(self, *, state: RunState | str = RunState.FINISHED, final_candidate: str | None = None,
               reason: str = "") -> None:
        """Marks the run finished (or failed / interrupted) and releases an executor it started."""
        state = RunState(state)
        if state is RunState.RUNNING:
            raise ConfigError("finish() needs an end state: finished, failed or interrupted")
        if final_candidate is not None and self.store.get_candidate(self.id, final_candidate) is None:
            raise StoreError(f"final candidate {final_candidate!r} is not a candidate of run {self.id}")
        self.store.set_run_state(self.id, state, final_candidate=final_candidate, reason=reason)
        self.close()

    def close(self) -> None:
        """Stops driving the run (heartbeat) and releases the executor it started (the caller owns the store)."""
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None
        if self._owns_executor and self._executor is not None:
            self._executor.close()
            self._executor = None
            self._owns_executor = False

    def __repr__(self) -> str:
        return f"Run(id={self.id!r}, task_id={self.task_id!r}, store={self.store!r})"
