"""``FleetLink``: how a run belongs to a fleet (which fleet, its member index, the fleet-wide caps, the
shared-traces group), stored in the run's config under ``"fleet"``.

The one typed reading of that config entry for the fleet that writes it and the agent, methods and run
that read it. Stored as the same plain JSON object as before (``id``, ``caps``, ``member``, and for
agent members ``trace`` and ``share_traces``; keys left None are not written), so stored runs read unchanged.
The config is trusted (written by this package); a malformed entry is a clear error, not a silent default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reasearch.errors import ConfigError

__all__ = ["FleetLink"]


@dataclass(frozen=True, slots=True)
class FleetLink:
    """A run's link to its fleet.

    Attributes:
        id: the fleet's id in the store.
        member: the run's index among the fleet's members (ordered task, seed, model, trace); None
            for a run linked only to the fleet's caps.
        caps: fleet-wide budget caps per unit name (every member's spending counts against them).
        trace: the run's trace within its shared-traces group (agent members only; None otherwise).
        share_traces: whether the group's traces share lessons (agent members only; None otherwise).
    """

    id: str
    member: int | None = None
    caps: Mapping[str, float] = field(default_factory=dict)
    trace: int | None = None
    share_traces: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        """The stored form (keys left None are not written, as before)."""
        out: dict[str, Any] = {"id": self.id, "caps": dict(self.caps)}
        if self.member is not None:
            out["member"] = self.member
        if self.trace is not None:
            out["trace"] = self.trace
        if self.share_traces is not None:
            out["share_traces"] = self.share_traces
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FleetLink:
        """Reads the stored form.

        Raises:
            ConfigError: ``id`` is missing, or an unknown key is present.
        """
        unknown = set(d) - {"id", "caps", "member", "trace", "share_traces"}
        if unknown or "id" not in d:
            raise ConfigError(f"a run's fleet link needs 'id' (and may hold 'member', 'caps', 'trace', "
                              f"'share_traces'); got keys {sorted(d)}")
        member, trace, share = d.get("member"), d.get("trace"), d.get("share_traces")
        return cls(id=str(d["id"]), member=None if member is None else int(member), caps=dict(d.get("caps") or {}),
                   trace=None if trace is None else int(trace), share_traces=None if share is None else bool(share))

    @classmethod
    def of(cls, value: FleetLink | Mapping[str, Any]) -> FleetLink:
        """``value`` as a link (a mapping in the stored form is read with :meth:`from_dict`)."""
        return value if isinstance(value, FleetLink) else cls.from_dict(value)

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> FleetLink | None:
        """The link in a run's config, or None for a run outside any fleet."""
        entry = (config or {}).get("fleet")
        return None if not entry else cls.from_dict(entry)
