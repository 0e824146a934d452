"""Waiting for a quick answer after a pause: poll for it briefly before sleeping.

On a virtual machine the virtual CPUs halt once nothing has run for a few milliseconds, and a
process woken on a halted one starts late: the host must first run that virtual CPU again (~0.5-0.9
ms on the 2-vCPU Firecracker VMs this project is measured on). A trivial evaluation after a pause
has two such wake-ups on its path (the worker woken by the child's result, the engine's thread woken
by the worker's reply): measured 2.9-3.1 ms there against 1.9 ms with these waits polling.

So a wait that begins after a pause (the previous frame on that channel came more than
:data:`IDLE_S` ago) first polls for its answer for a few milliseconds, yielding the CPU between
polls (``sched_yield``: any other runnable task goes first, so the poll only takes otherwise idle
time), and sleeps only if the answer takes longer. Back-to-back work never polls: its cores are busy
(they do not halt) and every cycle of theirs is needed. Only one-shot evaluations poll: a session's
calls are timed against replays of the same transport and keep a plain blocking wait.

A wait polls only when the previous answer on the same channel came within the polling window: an
answer that takes longer (an evaluation of a few milliseconds or more) would be polled for during the
whole window and then slept for all the same, and those polls are CPU a busy machine (a fleet of runs)
needs elsewhere. Measured: two agent members of 200 circle-packing evaluations each, one after another,
kept 1.45 CPUs busy with every post-pause wait polling and 1.22 without, in the same wall time.
"""

from __future__ import annotations

import math
import os
import select

__all__ = ["ENGINE_S", "IDLE_S", "WORKER_S", "poll", "until"]

IDLE_S = 0.005  # a pause longer than this (since the channel's previous frame) lets the next wait poll
ENGINE_S = 0.003  # the engine's thread, waiting for a worker's reply
WORKER_S = 0.002  # a worker, waiting for its child's result


def until(now: float, last_frame: float, spin_s: float, last_wait_s: float = 0.0) -> float:
    """The monotonic time up to which a wait starting at ``now`` polls (0.0: it does not poll): only after a
    pause (``last_frame``: when the channel's previous frame came) and when the previous answer on that
    channel took less than ``spin_s`` (``last_wait_s``; 0.0: none yet)."""
    return now + spin_s if now - last_frame > IDLE_S and last_wait_s < spin_s else 0.0


def poll(poller: select.poll, now: float, spin_until: float, timeout_s: float | None) -> list[tuple[int, int]] | None:
    """One wait of a loop: ``poller.poll`` without sleeping while ``now < spin_until`` (None when
    nothing is ready yet: the CPU was yielded, look again), else blocking for up to ``timeout_s``
    (None: no limit; an empty list once it passed)."""
    if now < spin_until:
        events = poller.poll(0)
        if events:
            return events
        os.sched_yield()
        return None
    return poller.poll(-1 if timeout_s is None else math.ceil(max(0.0, timeout_s) * 1000))
