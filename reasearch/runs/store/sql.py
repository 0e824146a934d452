"""The one SQL code path: :class:`SQLStore`, the core joined with its reservation/liveness, fleet and
metered-call pieces. Backends (:mod:`.sqlite`, :mod:`.postgres`) give it their dialect's connection.
"""

from __future__ import annotations

from reasearch.runs.store.fleets import FleetsMixin
from reasearch.runs.store.metered import MeteredCallsMixin
from reasearch.runs.store.reservations import ReservationsMixin


class SQLStore(ReservationsMixin, FleetsMixin, MeteredCallsMixin):
    """The one SQL code path over the :class:`~.connection.SQLConnection` a backend gives it (the
    connection, its lock and its dialect: placeholders, types, transactions, locks, catalogue).

    One connection per store object, serialized by its lock: the store is never the bottleneck next
    to a sandboxed evaluation.
    """
