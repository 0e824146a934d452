"""Fleets in the SQL stores: a fleet's spec, its members (one run each) and their summed usage."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from reasearch.errors import FleetNotFoundError
from reasearch.runs.ledger import Unit
from reasearch.runs.store.connection import SQLConnection
from reasearch.runs.store.records import MAX_FLEET_ID_LEN, check_id, dumps


class Fleets:
    """``create_fleet``/``get_fleet``/``list_fleets``/``add_fleet_member``/``fleet_members``/``fleet_usage``
    over the store's connection."""

    def __init__(self, db: SQLConnection) -> None:
        self.db = db

    def create_fleet(self, fleet_id: str, spec: Mapping[str, Any]) -> bool:
        check_id(fleet_id, "fleet id", max_len=MAX_FLEET_ID_LEN)  # members' run ids (and folders) start with it
        with self.db.transaction():
            cur = self.db.execute("INSERT INTO fleets (id, spec, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                             (fleet_id, dumps(dict(spec)), time.time()))
            return cur.rowcount == 1

    def get_fleet(self, fleet_id: str) -> dict[str, Any]:
        row = self.db.one("SELECT spec FROM fleets WHERE id = ?", (fleet_id,))
        if row is None:
            raise FleetNotFoundError(f"no fleet {fleet_id!r} in {self.db.display_url}; "
                                     "`reasearch fleet list` lists the fleets")
        return dict(json.loads(row[0]))

    def list_fleets(self) -> list[tuple[str, float]]:
        return [(r[0], float(r[1])) for r in self.db.all("SELECT id, created_at FROM fleets ORDER BY created_at, id")]

    def add_fleet_member(self, fleet_id: str, member: int, run_id: str) -> str:
        with self.db.transaction():
            self.db.execute(
                "INSERT INTO fleet_members (fleet_id, member, run_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                (fleet_id, int(member), run_id))
            row = self.db.execute("SELECT run_id FROM fleet_members WHERE fleet_id = ? AND member = ?",
                             (fleet_id, int(member))).fetchone()
        return str(row[0])

    def fleet_members(self, fleet_id: str) -> dict[int, str]:
        rows = self.db.all("SELECT member, run_id FROM fleet_members WHERE fleet_id = ? ORDER BY member", (fleet_id,))
        return {int(m): str(r) for m, r in rows}

    def fleet_usage(self, fleet_id: str) -> dict[Unit, float]:
        rows = self.db.all("SELECT l.unit, SUM(l.amount) FROM ledger l JOIN fleet_members f ON f.run_id = l.run_id "
                         "WHERE f.fleet_id = ? GROUP BY l.unit", (fleet_id,))
        return {Unit(u): float(t) for u, t in rows}
