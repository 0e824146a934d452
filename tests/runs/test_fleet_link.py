"""``FleetLink``: a run's fleet entry, typed, stored as the same JSON object fleets wrote before."""

from __future__ import annotations

import pytest

from reasearch.errors import ConfigError
from reasearch.runs.fleet_link import FleetLink


def test_stored_forms_are_the_old_dicts_and_read_back() -> None:
    agent = FleetLink("f1", 3, {"dollars": 2.0}, trace=1, share_traces=True)
    method = FleetLink("f1", 4, {"dollars": 2.0})
    assert agent.to_dict() == {"id": "f1", "caps": {"dollars": 2.0}, "member": 3, "trace": 1, "share_traces": True}
    assert method.to_dict() == {"id": "f1", "caps": {"dollars": 2.0}, "member": 4}
    assert FleetLink.from_dict(agent.to_dict()) == agent and FleetLink.of(method.to_dict()) == method
    assert FleetLink.of(agent) is agent
    assert FleetLink.from_config({"fleet": method.to_dict(), "driver": "method"}) == method
    assert FleetLink.from_config({"driver": "agent"}) is None and FleetLink.from_config(None) is None
    caps_only = {"id": "f2", "caps": {"model_calls": 1}}  # a run tied only to a fleet's caps
    assert FleetLink.from_dict(caps_only).to_dict() == caps_only and FleetLink.from_dict(caps_only).member is None


@pytest.mark.parametrize("bad", [{"caps": {}}, {"member": 0}, {"id": "f", "member": 0, "memberr": 1}])
def test_a_malformed_entry_is_a_clear_error(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="fleet link needs 'id'"):
        FleetLink.from_dict(bad)
