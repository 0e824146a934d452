"""The one SQL code path: :class:`SQLStore`, the core joined with its reservation/liveness, fleet and
metered-call pieces. Dialects (:mod:`.sqlite`, :mod:`.postgres`) subclass it.
"""

from __future__ import annotations

from reasearch.runs.store.fleets import FleetsMixin
from reasearch.runs.store.metered import MeteredCallsMixin
from reasearch.runs.store.reservations import ReservationsMixin


class SQLStore(ReservationsMixin, FleetsMixin, MeteredCallsMixin):
    """The one SQL code path; subclasses supply a DB-API connection and a dialect.

    SQL is written with ``?`` placeholders and portable statements (``INSERT ... ON CONFLICT DO
    NOTHING`` works in both SQLite >= 3.24 and PostgreSQL). One connection per store object,
    serialized by a lock: the store is never the bottleneck next to a sandboxed evaluation.
    """
