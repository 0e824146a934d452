"""A run's journal: every step recorded in the run's event log, replayed on resume (the agent's and the methods').

Every step is written to the run's event log before it is acted upon. On resume the loop runs again
from the start: where the journal holds a step, the recorded model reply or tool result is used
instead of calling the model or the tool, so nothing is spent twice; past the last recorded step the
loop continues live. Trust boundary: it reads and writes the run's own store (the trusted side) only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reasearch.runs.events import REPLY_KINDS, base_kind
from reasearch.runs.run import Run

__all__ = ["Journal"]


class Journal:
    """Recorded events by (step, kind), read once when the agent starts; writes go to the run."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self._events: dict[tuple[int, str], dict[str, Any]] = {}
        self._kinds: dict[int, list[str]] = {}
        for e in run.events():
            if int(e.step) < 0:  # a person's steering request (runs/steering.py): no driver's step
                continue
            self._events[(int(e.step), str(e.kind))] = dict(e.payload)
            self._kinds.setdefault(int(e.step), []).append(str(e.kind))
        self.last_recorded = max(self._kinds, default=-1)
        self._earlier = frozenset(self._kinds)

    def get(self, step: int, kind: str) -> dict[str, Any] | None:
        """The payload recorded for (step, kind), or None."""
        return self._events.get((step, kind))

    def reply_kinds(self, role: str) -> list[tuple[int, str]]:
        """(step, kind) of every recorded model reply of ``role`` (all attempts)."""
        return [(step, kind) for (step, kind), p in self._events.items()
                if base_kind(kind) in REPLY_KINDS and p.get("role") == role]

    def kinds(self, step: int) -> list[str]:
        return self._kinds.get(step, [])

    def steps(self) -> list[int]:
        """The steps with a recorded event, in the order they were first recorded."""
        return list(self._kinds)

    def record(self, step: int, kind: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """Writes an event (idempotent per step and kind) and keeps it; returns the payload stored."""
        known = self._events.get((step, kind))
        if known is not None:
            return known
        payload = dict(payload)
        self.run.log_event(step, kind, payload)
        self._events[(step, kind)] = payload
        self._kinds.setdefault(step, []).append(kind)
        self.last_recorded = max(self.last_recorded, step)
        return payload

    def replaying(self, step: int) -> bool:
        """True while ``step`` was recorded by an earlier driver (before a resume)."""
        return step in self._earlier
