"""A seeded chaos soak over method runs: faults at random points, resumes, and the invariants checked at the end.

:func:`soak` runs it (``reasearch bench --section chaos`` reports its figures; ``tests/test_chaos.py``
runs a short one); :mod:`reasearch._chaos.invariants` holds the named checks. It drives runs through
the public API and subprocesses, so it sits on top of the package like ``_cli``: nothing imports it.
See docs/chaos.md. Trust boundary: its own drivers and local endpoint; candidates run only in sandboxes.
"""

from __future__ import annotations

from reasearch._chaos.invariants import CHECKS, SoakRecord, Violation, check_all
from reasearch._chaos.soak import FAULTS, Schedule, SoakReport, make_schedule, soak

__all__ = ["CHECKS", "FAULTS", "Schedule", "SoakRecord", "SoakReport", "Violation", "check_all", "make_schedule",
           "soak"]
