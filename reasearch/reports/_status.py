"""The HTTP status of a store error: 404 for an id the store does not hold (or that matches several runs), 503
for a store that failed (a full disk, a lost connection, a locked file): a failure is never "not found".

Trust boundary: maps our own exception types; no input is read.
"""

from __future__ import annotations

from reasearch.errors import AmbiguousIdError, FleetNotFoundError, RunNotFoundError, StoreError

__all__ = ["store_error_status"]


def store_error_status(exc: StoreError) -> int:
    return 404 if isinstance(exc, (RunNotFoundError, FleetNotFoundError, AmbiguousIdError)) else 503
