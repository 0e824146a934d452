"""The one SQL code path: :class:`SQLStore`, the core (:mod:`.core`: runs, candidates, evaluations, ledger,
cache, events) holding three parts over the same connection, each an object of its own: budget reservations
and driver liveness (:mod:`.reservations`), fleets (:mod:`.fleets`) and metered student calls
(:mod:`.metered`). Backends (:mod:`.sqlite`, :mod:`.postgres`) give it their dialect's connection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reasearch.runs.ledger import LedgerEntry, Unit
from reasearch.runs.store.connection import SQLConnection
from reasearch.runs.store.core import SQLCore
from reasearch.runs.store.fleets import Fleets
from reasearch.runs.store.metered import MeteredCalls
from reasearch.runs.store.records import DriverRecord, Refusal
from reasearch.runs.store.reservations import Reservations


class SQLStore(SQLCore):
    """The one SQL code path over the :class:`~.connection.SQLConnection` a backend gives it (the
    connection, its lock and its dialect: placeholders, types, transactions, locks, catalogue).

    One connection per store object, serialized by its lock: the store is never the bottleneck next
    to a sandboxed evaluation. The :class:`~.base.Store` methods of its parts are passed to them.
    """

    def __init__(self, db: SQLConnection) -> None:
        super().__init__(db)
        self.reservations = Reservations(db)
        self.fleets = Fleets(db)
        self.metered = MeteredCalls(db, self.reservations)

    # -- reservations (:class:`~.reservations.Reservations`)
    def reserve(self, run_id: str, token: str, amounts: Mapping[Unit, float], caps: Mapping[Unit, float], *,
                driver_id: str = "", ttl_s: float = 60.0,
                fleet: tuple[str, Mapping[Unit, float]] | None = None,
                step: int = -1, what: str = "", answer_kind: str = "") -> Refusal | None:
        return self.reservations.reserve(run_id, token, amounts, caps, driver_id=driver_id, ttl_s=ttl_s, fleet=fleet,
                                         step=step, what=what, answer_kind=answer_kind)

    def settle(self, token: str | None, debits: Sequence[LedgerEntry]) -> bool:
        return self.reservations.settle(token, debits)

    def release(self, token: str) -> None:
        self.reservations.release(token)

    def reserved(self, run_id: str) -> dict[Unit, float]:
        return self.reservations.reserved(run_id)

    def heartbeat(self, run_id: str, driver_id: str, *, host: str = "", pid: int = 0, ttl_s: float = 60.0,
                  stopped: bool = False, proc_start: str = "") -> None:
        self.reservations.heartbeat(run_id, driver_id, host=host, pid=pid, ttl_s=ttl_s, stopped=stopped,
                                    proc_start=proc_start)

    def drivers(self, run_id: str) -> list[DriverRecord]:
        return self.reservations.drivers(run_id)

    def reclaim(self, run_id: str, driver_ids: Sequence[str]) -> int:
        return self.reservations.reclaim(run_id, driver_ids)

    def takeover(self, run_id: str, driver_id: str) -> int:
        return self.reservations.takeover(run_id, driver_id)

    # -- fleets (:class:`~.fleets.Fleets`)
    def create_fleet(self, fleet_id: str, spec: Mapping[str, Any]) -> bool:
        return self.fleets.create_fleet(fleet_id, spec)

    def get_fleet(self, fleet_id: str) -> dict[str, Any]:
        return self.fleets.get_fleet(fleet_id)

    def list_fleets(self) -> list[tuple[str, float]]:
        return self.fleets.list_fleets()

    def add_fleet_member(self, fleet_id: str, member: int, run_id: str) -> str:
        return self.fleets.add_fleet_member(fleet_id, member, run_id)

    def fleet_members(self, fleet_id: str) -> dict[int, str]:
        return self.fleets.fleet_members(fleet_id)

    def fleet_usage(self, fleet_id: str) -> dict[Unit, float]:
        return self.fleets.fleet_usage(fleet_id)

    # -- metered (:class:`~.metered.MeteredCalls`)
    def student_call_get(self, key: str) -> dict[str, Any] | None:
        return self.metered.student_call_get(key)

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
        return self.metered.record_student_call(run_id, step, key, model, reply, debits, release)

    def debit_student_call(self, debits: Sequence[LedgerEntry], release: str | None = None) -> bool:
        return self.metered.debit_student_call(debits, release)

    def student_call_paid(self, run_id: str, notes: Sequence[str]) -> bool:
        return self.metered.student_call_paid(run_id, notes)

    def student_calls(self, run_id: str) -> list[tuple[int, str, str]]:
        return self.metered.student_calls(run_id)
