"""The handover of a member's run from a driver that died with its node to the Ray retry that resumes it.

Ray retries a member whose worker or node died as soon as it learns of the death, which can be before
the dead node's worker process is gone (a removed node's workers exit only once they notice their raylet
went) or, on another host, before its heartbeat went stale. A takeover refuses a run another process
still holds (:meth:`reasearch.runs.Run.resume`): the retry would end the member ``failed``. So the retry
first waits, for a bounded time, until no other process holds the run (:func:`wait_for_other_drivers`);
the run is never driven by two processes at once. Reads the store only.
"""

from __future__ import annotations

import os
import socket
import time

from reasearch.runs.liveness import HEARTBEAT_S, STALE_S, live_drivers
from reasearch.runs.store import Store

__all__ = ["RETRY_HANDOVER_S", "wait_for_other_drivers"]

# A driver on another host counts as alive until its heartbeat is STALE_S old, and it beat at most
# HEARTBEAT_S before it died: a retry that waits this long outlasts any dead driver's claim.
RETRY_HANDOVER_S = STALE_S + 2 * HEARTBEAT_S


def wait_for_other_drivers(store: Store, run_id: str, wait_s: float, *, poll_s: float = 0.2) -> bool:
    """Waits up to ``wait_s`` seconds until no driver of another process holds ``run_id``; True once none
    does (at once when none did), False when one still held it at the end (the takeover then refuses)."""
    me = (socket.gethostname(), os.getpid())
    deadline = time.monotonic() + wait_s
    while any((d.host, d.pid) != me for d in live_drivers(store, run_id)):
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True
