"""Budget reservations and driver liveness of the SQL stores (a mixin, as Optuna keeps its heartbeat).

A reservation holds budget for work in flight so that every driver of a run (agents, sweeps, fleet
workers, on any machine) checks its caps against the ledger plus what the others hold; a driver's
heartbeat keeps its reservations alive, and a takeover drops those of drivers known dead.
"""

from __future__ import annotations

import time
from typing import Mapping

from reasearch.runs.ledger import Budget, Unit
from reasearch.runs.store.core import SQLCore
from reasearch.runs.store.records import DriverRecord


class ReservationsMixin(SQLCore):
    """``reserve``/``release``/``reserved`` and ``heartbeat``/``drivers``/``takeover`` over :class:`SQLCore`."""

    def _lock_run(self, run_id: str) -> None:
        """Serializes budget checks of one run between connections (SQLite: BEGIN IMMEDIATE already does)."""

    def reserve(self, run_id: str, token: str, amounts: Mapping[Unit, float], caps: Mapping[Unit, float], *,
                driver_id: str = "", ttl_s: float = 60.0) -> tuple[Unit, float, float] | None:
        budget = Budget(dict(caps))
        now = time.time()
        with self._tx():
            self._lock_run(run_id)
            used: dict[str, float] = {u: float(t) for u, t in self._exec(
                "SELECT unit, SUM(amount) FROM ledger WHERE run_id = ? GROUP BY unit", (run_id,)).fetchall()}
            for u, t in self._exec("SELECT unit, SUM(amount) FROM reservations WHERE run_id = ? AND expires_at > ? "
                                   "GROUP BY unit", (run_id, now)).fetchall():
                used[u] = used.get(u, 0.0) + float(t)
            for unit, amount in amounts.items():
                unit = Unit(unit)
                if not budget.allows(unit, used.get(unit.value, 0.0), float(amount)):
                    cap = budget.cap(unit)
                    assert cap is not None
                    return unit, used.get(unit.value, 0.0), cap
            for unit, amount in amounts.items():
                self._exec("INSERT INTO reservations (token, run_id, driver_id, unit, amount, expires_at) "
                           "VALUES (?, ?, ?, ?, ?, ?)", (token, run_id, driver_id, Unit(unit).value, float(amount),
                                                         now + ttl_s))
        return None

    def release(self, token: str) -> None:
        with self._tx():
            self._exec("DELETE FROM reservations WHERE token = ?", (token,))

    def reserved(self, run_id: str) -> dict[Unit, float]:
        rows = self._all("SELECT unit, SUM(amount) FROM reservations WHERE run_id = ? AND expires_at > ? "
                         "GROUP BY unit", (run_id, time.time()))
        return {Unit(u): float(t) for u, t in rows}

    def heartbeat(self, run_id: str, driver_id: str, *, host: str = "", pid: int = 0, ttl_s: float = 60.0,
                  stopped: bool = False) -> None:
        now = time.time()
        with self._tx():
            cur = self._exec("UPDATE drivers SET heartbeat_at = ?, stopped = ? WHERE run_id = ? AND driver_id = ?",
                             (now, int(stopped), run_id, driver_id))
            if cur.rowcount == 0:
                self._exec("INSERT INTO drivers (run_id, driver_id, host, pid, started_at, heartbeat_at, stopped) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                           (run_id, driver_id, host, int(pid), now, now, int(stopped)))
            self._exec("UPDATE reservations SET expires_at = ? WHERE driver_id = ? AND run_id = ?",
                       (now + ttl_s, driver_id, run_id))

    def drivers(self, run_id: str) -> list[DriverRecord]:
        rows = self._all("SELECT run_id, driver_id, host, pid, started_at, heartbeat_at, stopped FROM drivers "
                         "WHERE run_id = ? ORDER BY started_at, driver_id", (run_id,))
        return [DriverRecord(r[0], r[1], r[2], int(r[3]), float(r[4]), float(r[5]), bool(r[6])) for r in rows]

    def takeover(self, run_id: str, driver_id: str) -> int:
        with self._tx():
            self._exec("UPDATE drivers SET stopped = 1 WHERE run_id = ? AND driver_id <> ?", (run_id, driver_id))
            cur = self._exec("DELETE FROM reservations WHERE run_id = ? AND driver_id <> ?", (run_id, driver_id))
            return max(cur.rowcount, 0)
