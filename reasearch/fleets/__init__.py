"""Fleets: many optimizer runs at once (tasks x seeds x models), locally or on Ray, with one results table.

Fleets start optimizers, so they sit above them: this package imports the agent (and the baseline methods),
never the other way round (the layer contract in ``pyproject.toml``).
"""

from __future__ import annotations

from reasearch.fleets.fleet import (
    FleetMember,
    FleetReport,
    FleetSpec,
    MemberResult,
    fleet_report,
    resume_fleet,
    run_fleet,
)

__all__ = ["FleetMember", "FleetReport", "FleetSpec", "MemberResult", "fleet_report", "resume_fleet", "run_fleet"]
