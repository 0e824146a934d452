"""The fleet section's bound (reasearch._bench.fleet): how much a fleet on the bench's CPUs can gain over
members that already keep more than one CPU busy one after another, and each fleet's share of it."""

from __future__ import annotations

import math

from reasearch._bench import fleet


def test_the_bound_is_the_cpus_over_the_cpus_the_reference_kept_busy() -> None:
    assert fleet.CPUS == 2
    assert math.isclose(fleet.bound(4, 1.45) or 0.0, 2 / 1.45)  # members overlapping their own work
    assert fleet.bound(4, 0.8) == 2.0  # a reference that left a CPU idle: never beyond the CPUs
    assert fleet.bound(1, 0.5) == 1.0  # nor beyond the members
    assert fleet.bound(4, None) is None and fleet.bound(4, 0.0) is None  # no reading: no bound made up


def test_the_rows_say_the_bound_and_each_fleets_share_of_it() -> None:
    rows = {r.name: r for r in fleet._bound_rows(4, 1.6)}
    assert rows["reference: CPUs kept busy, members one after another"].value == 1.6
    top = rows["the most a fleet on 2 CPUs can gain over it"]
    assert math.isclose(top.value, 1.25) and top.met is False  # 1.8x is out of reach of such members
    assert "at most 1.11 CPUs busy" in top.note
    assert fleet._bound_rows(4, None) == []
    got = {r.name: r for r in fleet._fleet_rows("F", 4, 10.0, 11.0, 12.0, "n", top=1.25)}
    share = got["F: speed-up as a share of the most 2 CPUs allow"]
    assert math.isclose(share.value, 1.1 / 1.25)
    assert math.isclose(got["F: 4 members, wall time"].ratio or 0.0, 1.1)
    assert "F: speed-up as a share of the most 2 CPUs allow" not in {
        r.name for r in fleet._fleet_rows("F", 4, 10.0, 11.0, 12.0, "n")}
