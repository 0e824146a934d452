"""Budget reservations and driver liveness of the SQL stores (a part the store holds, as Optuna keeps its heartbeat).

A reservation holds budget for work in flight so that every driver of a run (agents, sweeps, fleet
workers, on any machine) checks its caps against the ledger plus what the others hold; a driver's
heartbeat keeps its reservations alive, and a takeover drops those of drivers known dead. A fleet
member's reservation is also checked against its fleet's caps (the debits and live reservations of
every member run), so a fleet-wide cap holds whatever the number of members calling at once.

A hold of a driver known dead (:meth:`reclaim`, :meth:`takeover`) is work that may have been done and
paid for elsewhere (a model call the endpoint answered, an evaluation the sandbox ran) whose result
was never stored: it becomes a ledger debit at its reserved amounts, in the same transaction that drops
it (so a second resume finds nothing to charge), unless the answer it held for was stored meanwhile
(a journaled reply whose debit the replay writes).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from reasearch.runs.ledger import Budget, LedgerEntry, Unit
from reasearch.runs.store.connection import SQLConnection
from reasearch.runs.store.records import DriverRecord, Refusal
from reasearch.runs.store.rows import insert_debit, touch

IN_FLIGHT_NOTE = "charged at reservation: the driver died while the {what} was in flight [{token}]"


def reservation_mark(token: str) -> str:
    """How a reservation is named where it is recorded: in its charge's note (:data:`IN_FLIGHT_NOTE`) and in
    the journaled answer of the work it held (a model reply's ``reservation``), so that a charge and an
    answer of the same call can be matched."""
    return str(token)[:12]


def charged_mark(note: str) -> str | None:
    """The reservation a ledger note of a charge at reservation names (:data:`IN_FLIGHT_NOTE`'s ``[...]``), or
    None for any other note."""
    head = IN_FLIGHT_NOTE.split("{", 1)[0]
    if not (note.startswith(head) and note.endswith("]") and "[" in note):
        return None
    return note[note.rfind("[") + 1:-1]


def _first_refusal(budget: Budget, used: Mapping[str, float], amounts: Mapping[Unit, float],
                   fleet_id: str | None = None, others: Mapping[str, float] | None = None) -> Refusal | None:
    """The first cap of ``budget`` that ``amounts`` on top of ``used`` would break, or None; ``others``:
    what other drivers' live reservations hold of ``used`` (the refusal says how much)."""
    for unit, amount in amounts.items():
        unit = Unit(unit)
        if not budget.allows(unit, used.get(unit.value, 0.0), float(amount)):
            cap = budget.cap(unit)
            assert cap is not None
            return Refusal(unit, used.get(unit.value, 0.0), cap, fleet_id, (others or {}).get(unit.value, 0.0))
    return None


class Reservations:
    """``reserve``/``settle``/``release``/``reserved`` and ``heartbeat``/``drivers``/``reclaim``/``takeover``
    over the store's connection (each write one transaction)."""

    def __init__(self, db: SQLConnection) -> None:
        self.db = db

    def reserve(self, run_id: str, token: str, amounts: Mapping[Unit, float], caps: Mapping[Unit, float], *,
                driver_id: str = "", ttl_s: float = 60.0,
                fleet: tuple[str, Mapping[Unit, float]] | None = None,
                step: int = -1, what: str = "", answer_kind: str = "") -> Refusal | None:
        budget = Budget({unit: cap for unit, cap in caps.items()})
        now = time.time()
        with self.db.transaction():
            self.db.lock_run(run_id)
            used: dict[str, float] = {u: float(t) for u, t in self.db.execute(
                "SELECT unit, SUM(amount) FROM ledger WHERE run_id = ? GROUP BY unit", (run_id,)).fetchall()}
            others: dict[str, float] = {}
            for u, holder, t in self.db.execute(
                    "SELECT unit, driver_id, SUM(amount) FROM reservations WHERE run_id = ? AND expires_at > ? "
                    "GROUP BY unit, driver_id", (run_id, now)).fetchall():
                used[u] = used.get(u, 0.0) + float(t)
                if holder != driver_id:
                    others[u] = others.get(u, 0.0) + float(t)
            refusal = _first_refusal(budget, used, amounts, others=others)
            if refusal is None and fleet is not None and fleet[1]:
                fleet_id = str(fleet[0])
                self.db.lock_fleet(fleet_id)
                held, fleet_others = self._fleet_held(fleet_id, now, driver_id)
                refusal = _first_refusal(
                    Budget({unit: cap for unit, cap in fleet[1].items()}), held, amounts, fleet_id, fleet_others
                )
            if refusal is not None:
                return refusal
            for unit, amount in amounts.items():
                self.db.execute("INSERT INTO reservations (token, run_id, driver_id, unit, amount, expires_at, step, "
                           "what, answer_kind) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           (token, run_id, driver_id, Unit(unit).value, float(amount), now + ttl_s, int(step),
                            str(what), str(answer_kind)))
        return None

    def _fleet_held(self, fleet_id: str, now: float, driver_id: str) -> tuple[dict[str, float], dict[str, float]]:
        """Debited plus held (live reservations) per unit over every member run of the fleet, and of that
        what other drivers' reservations hold."""
        held: dict[str, float] = {}
        others: dict[str, float] = {}
        for u, t in self.db.execute("SELECT l.unit, SUM(l.amount) FROM ledger l JOIN fleet_members f "
                               "ON f.run_id = l.run_id WHERE f.fleet_id = ? GROUP BY l.unit", (fleet_id,)).fetchall():
            held[u] = held.get(u, 0.0) + float(t)
        for u, holder, t in self.db.execute(
                "SELECT r.unit, r.driver_id, SUM(r.amount) FROM reservations r JOIN fleet_members f "
                "ON f.run_id = r.run_id WHERE f.fleet_id = ? AND r.expires_at > ? GROUP BY r.unit, r.driver_id",
                (fleet_id, now)).fetchall():
            held[u] = held.get(u, 0.0) + float(t)
            if holder != driver_id:
                others[u] = others.get(u, 0.0) + float(t)
        return held, others

    def settle(self, token: str | None, debits: Sequence[LedgerEntry]) -> bool:
        with self.db.transaction():
            if token is not None:
                self.db.execute("DELETE FROM reservations WHERE token = ?", (token,))
            written = [insert_debit(self.db, entry) for entry in debits]
            for run_id in {entry.run_id for entry in debits}:
                touch(self.db, run_id)
        return any(written)

    def release(self, token: str) -> None:
        with self.db.transaction():
            self.db.execute("DELETE FROM reservations WHERE token = ?", (token,))

    def reserved(self, run_id: str) -> dict[Unit, float]:
        rows = self.db.all("SELECT unit, SUM(amount) FROM reservations WHERE run_id = ? AND expires_at > ? "
                         "GROUP BY unit", (run_id, time.time()))
        return {Unit(u): float(t) for u, t in rows}

    def heartbeat(self, run_id: str, driver_id: str, *, host: str = "", pid: int = 0, ttl_s: float = 60.0,
                  stopped: bool = False, proc_start: str = "") -> None:
        now = time.time()
        with self.db.transaction():
            cur = self.db.execute("UPDATE drivers SET heartbeat_at = ?, stopped = ? WHERE run_id = ? AND driver_id = ?",
                             (now, int(stopped), run_id, driver_id))
            if cur.rowcount == 0:
                self.db.execute("INSERT INTO drivers (run_id, driver_id, host, pid, started_at, heartbeat_at, stopped, "
                           "proc_start) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                           (run_id, driver_id, host, int(pid), now, now, int(stopped), proc_start))
            self.db.execute("UPDATE reservations SET expires_at = ? WHERE driver_id = ? AND run_id = ?",
                       (now + ttl_s, driver_id, run_id))

    def drivers(self, run_id: str) -> list[DriverRecord]:
        rows = self.db.all("SELECT run_id, driver_id, host, pid, started_at, heartbeat_at, stopped, proc_start "
                         "FROM drivers WHERE run_id = ? ORDER BY started_at, driver_id", (run_id,))
        return [DriverRecord(r[0], r[1], r[2], int(r[3]), float(r[4]), float(r[5]), bool(r[6]), str(r[7] or ""))
                for r in rows]

    def _charge_holds(self, run_id: str, where: str, params: tuple[object, ...]) -> None:
        """Debits the run's holds selected by ``where`` at their reserved amounts (inside the caller's
        transaction, which then drops them); a hold whose answer event is stored is left to the replay."""
        now = time.time()
        rows = self.db.execute("SELECT token, unit, amount, step, what, answer_kind FROM reservations "
                          f"WHERE run_id = ? AND {where}", (run_id, *params)).fetchall()
        answered: dict[tuple[int, str], bool] = {}
        for token, unit, amount, step, what, answer_kind in rows:
            step = int(step)
            if answer_kind:
                key = (step, str(answer_kind))
                if key not in answered:
                    answered[key] = self.db.execute("SELECT 1 FROM events WHERE run_id = ? AND step = ? AND kind = ?",
                                               (run_id, step, key[1])).fetchone() is not None
                if answered[key]:
                    continue  # the reply was journaled: the replay debits what it actually cost
            if not float(amount) > 0:
                continue
            note = IN_FLIGHT_NOTE.format(what=what or "work", token=reservation_mark(token))
            insert_debit(self.db, LedgerEntry(run_id, step, Unit(unit), float(amount), note, now))
        if rows:
            touch(self.db, run_id)

    def reclaim(self, run_id: str, driver_ids: Sequence[str]) -> int:
        ids = list(driver_ids)
        if not ids:
            return 0
        marks = ", ".join("?" for _ in ids)
        with self.db.transaction():
            self.db.lock_run(run_id)
            self.db.execute(f"UPDATE drivers SET stopped = 1 WHERE run_id = ? AND driver_id IN ({marks})",
                            (run_id, *ids))
            self._charge_holds(run_id, f"driver_id IN ({marks})", tuple(ids))
            cur = self.db.execute(f"DELETE FROM reservations WHERE run_id = ? AND driver_id IN ({marks})",
                                  (run_id, *ids))
            return max(cur.rowcount, 0)

    def takeover(self, run_id: str, driver_id: str) -> int:
        with self.db.transaction():
            self.db.lock_run(run_id)
            self.db.execute("UPDATE drivers SET stopped = 1 WHERE run_id = ? AND driver_id <> ?", (run_id, driver_id))
            self._charge_holds(run_id, "driver_id <> ?", (driver_id,))
            cur = self.db.execute("DELETE FROM reservations WHERE run_id = ? AND driver_id <> ?", (run_id, driver_id))
            return max(cur.rowcount, 0)
