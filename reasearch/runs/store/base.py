"""The storage interface every backend implements (in the manner of Optuna's ``BaseStorage``).

:class:`Store` states what a backend must do (runs, candidates, evaluations, ledger, cache, metered
student calls, events, budget reservations and liveness, fleets); the SQL backends implement it once
(:mod:`reasearch.runs.store.sql`) and :class:`~reasearch.runs.testing.StoreTestCase` checks it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from reasearch.evaluators.result import EvalResult, Status
from reasearch.runs.ledger import LedgerEntry, Unit
from reasearch.runs.store.records import (
    CandidateRecord,
    DriverRecord,
    EvaluationRecord,
    Event,
    Refusal,
    RunRecord,
    RunState,
    _redact,
)


class Store(ABC):
    """The storage interface every backend implements (and the shared test case runs against)."""

    url: str

    @property
    def display_url(self) -> str:
        """The URL without a password (for messages and tables)."""
        return _redact(self.url)

    # -- runs
    @abstractmethod
    def create_run(self, record: RunRecord) -> None:
        """Inserts a new run (its id must be new)."""

    @abstractmethod
    def get_run(self, run_id: str, *, exact: bool = False) -> RunRecord:
        """The run with this id, or (unless ``exact``) with this unique id prefix; :class:`RunNotFoundError`
        when there is none. Code that names a run it made itself (a fleet member's ``F-m100``) asks ``exact``:
        a prefix would find ``F-m1000``."""

    @abstractmethod
    def list_runs(self) -> list[RunRecord]:
        """Every run, oldest first."""

    @abstractmethod
    def delete_run(self, run_id: str) -> None:
        """Removes a run and everything recorded under it (the shared evaluation cache stays)."""

    @abstractmethod
    def set_run_state(self, run_id: str, state: RunState, *, final_candidate: str | None = None,
                      reason: str = "") -> None:
        """Updates a run's state (and final candidate and reason)."""

    @abstractmethod
    def set_run_budget(self, run_id: str, budget: Mapping[str, float]) -> None:
        """Replaces a run's stored caps (a person's ``cap`` intervention, applied by its driver)."""

    # -- candidates
    @abstractmethod
    def add_candidate(self, record: CandidateRecord) -> bool:
        """Stores a candidate; False (and no change) when the run already has it."""

    @abstractmethod
    def get_candidate(self, run_id: str, candidate_id: str) -> CandidateRecord | None:
        """One candidate of a run, or None."""

    @abstractmethod
    def candidates(self, run_id: str) -> list[CandidateRecord]:
        """The run's candidates in the order they were first added."""

    # -- evaluations, ledger, cache
    @abstractmethod
    def record_evaluation(self, evaluation: EvaluationRecord, candidate: CandidateRecord,
                          debit: LedgerEntry | Sequence[LedgerEntry] | None = None,
                          cache_key: str | None = None, release: str | None = None) -> tuple[EvaluationRecord, bool]:
        """Writes candidate, evaluation, its debit(s) and cache entry in ONE transaction.

        ``release`` names a reservation (:meth:`reserve`) that this evaluation's debits replace: it is
        dropped in the same transaction, so the budget is never counted twice nor freed early.

        Returns:
            ``(record, True)`` when written; ``(existing, False)`` when the step was already recorded
            (then nothing is written: no second debit).
        """

    @abstractmethod
    def get_evaluation(self, run_id: str, step: int) -> EvaluationRecord | None:
        """The evaluation recorded at ``step``, or None."""

    @abstractmethod
    def evaluations(self, run_id: str) -> list[EvaluationRecord]:
        """Every evaluation of the run, by step."""

    @abstractmethod
    def debit(self, entry: LedgerEntry) -> bool:
        """Adds a ledger entry; False (and no change) when ``(run, step, unit, note)`` is already there."""

    @abstractmethod
    def ledger(self, run_id: str) -> list[LedgerEntry]:
        """The run's ledger entries in the order written."""

    @abstractmethod
    def usage(self, run_id: str) -> dict[Unit, float]:
        """Total debited per unit (units never debited are absent)."""

    @abstractmethod
    def cache_get(self, key: str) -> EvalResult | None:
        """A cached result for a cache key, or None."""

    # -- student-model calls (prompt tasks)
    @abstractmethod
    def student_call_get(self, key: str) -> dict[str, Any] | None:
        """The stored OK reply (plain JSON) of the student call ``key``, from any run, or None."""

    @abstractmethod
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
        """Stores one student call's reply and its debits in ONE transaction (which also drops the
        reservation ``release``).

        An ``OK`` reply is stored once per key (the cache); when another writer stored that key first,
        nothing is written (no debit) and its reply is returned with False. A failed call is recorded
        (status and error) but never served again.
        """

    @abstractmethod
    def student_call_paid(self, run_id: str, notes: Sequence[str]) -> bool:
        """True when the run has a ``student_calls`` debit under one of ``notes`` (it paid that call)."""

    @abstractmethod
    def debit_student_call(self, debits: Sequence[LedgerEntry], release: str | None = None) -> bool:
        """Writes the debits of a stored call used by this run for the first time (and drops the
        reservation ``release``) in one transaction; False when they were already written."""

    @abstractmethod
    def student_calls(self, run_id: str) -> list[tuple[int, str, str]]:
        """``(step, key, status)`` of every student call recorded for the run, in order."""

    # -- events
    @abstractmethod
    def log_event(self, run_id: str, step: int, kind: str, payload: Mapping[str, Any]) -> bool:
        """Appends an event; False (and no change) when ``(run, step, kind)`` is already logged."""

    @abstractmethod
    def events(self, run_id: str, *, kind: str | None = None) -> list[Event]:
        """The run's events in the order logged, optionally of one kind."""

    @abstractmethod
    def last_step(self, run_id: str) -> int:
        """The highest step with an event, evaluation or debit; -1 for a fresh run."""

    # -- budget reservations (shared by every driver of a run) and liveness
    @abstractmethod
    def reserve(self, run_id: str, token: str, amounts: Mapping[Unit, float], caps: Mapping[Unit, float], *,
                driver_id: str = "", ttl_s: float = 60.0,
                fleet: tuple[str, Mapping[Unit, float]] | None = None,
                step: int = -1, what: str = "", answer_kind: str = "") -> Refusal | None:
        """Holds ``amounts`` for work about to run (an evaluation, a model call), if they fit under ``caps``
        and, for a fleet member, under ``fleet = (fleet id, fleet-wide caps)``; atomic across drivers.

        ``step`` and ``what`` (``"model call"``, ``"evaluation"``) say what the hold is for: should its
        driver die with it held, :meth:`reclaim`/:meth:`takeover` debit it at ``step``. ``answer_kind``:
        the event kind that, logged at ``step``, holds the work's answer (a journaled model reply, whose
        replay debits it): a hold whose answer is logged is then dropped, not charged.

        What counts as used is the ledger plus every live (unexpired) reservation of the run, whoever
        holds it, so a cap holds whatever the number of drivers or executors on the run; against a
        fleet-wide cap, the same summed over every member run of the fleet.

        Returns:
            None when reserved; otherwise a :class:`Refusal` ``(unit, used, cap)`` of the first cap it
            would break (nothing is held then).
        """

    @abstractmethod
    def settle(self, token: str | None, debits: Sequence[LedgerEntry]) -> bool:
        """Writes the actual debits of reserved work and drops its reservation ``token`` in ONE
        transaction (the unused part of the reservation is so returned); False when every debit was
        already written (a replay)."""

    @abstractmethod
    def release(self, token: str) -> None:
        """Drops a reservation (no-op when it is gone: recorded, released or expired)."""

    @abstractmethod
    def reserved(self, run_id: str) -> dict[Unit, float]:
        """The run's live reservations per unit."""

    @abstractmethod
    def heartbeat(self, run_id: str, driver_id: str, *, host: str = "", pid: int = 0, ttl_s: float = 60.0,
                  stopped: bool = False, proc_start: str = "") -> None:
        """Records that ``driver_id`` is alive and driving ``run_id`` (and extends its reservations by ``ttl_s``);
        ``host``, ``pid`` and ``proc_start`` (the process's start, see :class:`DriverRecord`) are kept from
        the first beat."""

    @abstractmethod
    def drivers(self, run_id: str) -> list[DriverRecord]:
        """The run's drivers, oldest first."""

    @abstractmethod
    def reclaim(self, run_id: str, driver_ids: Sequence[str]) -> int:
        """Marks these drivers of the run stopped and turns their reservations into debits at the reserved
        amounts (work in flight when a driver died may have been done and paid for: a model call the
        endpoint answered, an evaluation the sandbox ran), in one transaction, so a second call finds
        nothing to charge; a hold whose answer event is logged is dropped uncharged (see :meth:`reserve`).
        Returns how many reservation rows were dropped."""

    @abstractmethod
    def takeover(self, run_id: str, driver_id: str) -> int:
        """Marks every other driver of the run stopped and charges their reservations as :meth:`reclaim`
        does (they are known dead: a retried fleet task, an explicit resume); returns how many
        reservation rows were dropped."""

    # -- fleets
    @abstractmethod
    def create_fleet(self, fleet_id: str, spec: Mapping[str, Any]) -> bool:
        """Stores a fleet's spec; False (and no change) when the fleet exists."""

    @abstractmethod
    def get_fleet(self, fleet_id: str) -> dict[str, Any]:
        """A fleet's stored spec (``StoreError`` when there is none)."""

    @abstractmethod
    def list_fleets(self) -> list[tuple[str, float]]:
        """``(fleet id, created_at)`` of every fleet, oldest first."""

    @abstractmethod
    def add_fleet_member(self, fleet_id: str, member: int, run_id: str) -> str:
        """Records that member ``member`` of the fleet is run ``run_id``; returns the member's run id
        (the first one recorded stands)."""

    @abstractmethod
    def fleet_members(self, fleet_id: str) -> dict[int, str]:
        """Member index -> run id."""

    @abstractmethod
    def fleet_usage(self, fleet_id: str) -> dict[Unit, float]:
        """Total debited per unit over every run of the fleet."""

    def paid_for(self, run_id: str, candidate_id: str, seed: int | None) -> bool:
        """True when the run already recorded a reusable (``OK``/``INVALID``) evaluation of this candidate
        under this seed: a repeat within the run costs nothing; a first evaluation is always paid, even
        when its result comes from another run's cache entry."""
        return any(ev.candidate_id == candidate_id and ev.seed == seed
                   and ev.result.status in (Status.OK, Status.INVALID) for ev in self.evaluations(run_id))

    @abstractmethod
    def close(self) -> None:
        """Closes the connection."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
