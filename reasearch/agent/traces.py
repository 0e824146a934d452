"""Multi-trace runs: agents on one task that learn from each other's memory.

A fleet with ``traces > 1`` runs several agents per (task, seed, model). With sharing on (the
default), the traces of one group see each other's ``lessons.md`` in their state snapshot, each
attributed to its trace and that trace's best score, and may adopt the best candidate any of them has
found so far (``adopt_best``). The lessons travel through the run store (an event ``lessons_shared``
each time a trace's lessons change, written when its snapshot is taken), so traces on different
nodes of a Ray cluster share them as well as threads of one process.

Everything a trace reads of another is the other's own model output (lessons, candidate source):
it is shown as data, capped, and never executed on the host.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reasearch.agent.snapshot import fmt_score
from reasearch.agent.tools.schema import ToolError, tool
from reasearch.agent.tools.workspace import Workspace
from reasearch.runs import Run
from reasearch.runs.events import EventKind
from reasearch.runs.fleet_link import FleetLink
from reasearch.runs.store import Store

__all__ = ["TraceGroup", "TraceTools", "SHARED_LESSONS_EVENT"]

SHARED_LESSONS_EVENT = EventKind.LESSONS_SHARED
_MAX_SHARED_CHARS = 2000  # of each other trace's lessons in a snapshot


@dataclass(frozen=True, slots=True)
class _Sibling:
    run_id: str
    trace: int


class TraceGroup:
    """The traces of one (task, seed, model) of a multi-trace fleet, as seen from one of them."""

    def __init__(self, run: Run, store: Store, fleet_id: str, trace: int, siblings: list[_Sibling]) -> None:
        self.run = run
        self.store = store
        self.fleet_id = fleet_id
        self.trace = trace
        self.siblings = siblings
        self._published: str | None = None

    @classmethod
    def of(cls, run: Any) -> TraceGroup | None:
        """The group of a fleet member run with shared traces; None for any other run."""
        link = FleetLink.from_config(getattr(run, "config", None))
        if link is None or not link.share_traces or link.member is None or not isinstance(run, Run):
            return None
        store = run.store
        spec = store.get_fleet(link.id)
        members = store.fleet_members(link.id)
        me = link.member
        traces = int(spec.get("traces", 1))
        group_start = me - me % traces  # members are ordered task, seed, model, trace
        siblings = [_Sibling(members[i], i - group_start) for i in range(group_start, group_start + traces)
                    if i != me and i in members]
        return cls(run, store, link.id, me - group_start, siblings)

    def refresh(self) -> None:
        """Picks up siblings that started after this trace (their run ids are recorded as they start)."""
        link = FleetLink.from_dict(self.run.config["fleet"])
        if link.member is None:  # not a member of a trace group (of() returns no group for it)
            return
        spec = self.store.get_fleet(self.fleet_id)
        members = self.store.fleet_members(self.fleet_id)
        me = link.member
        traces = int(spec.get("traces", 1))
        start = me - me % traces
        self.siblings = [
            _Sibling(members[i], i - start) for i in range(start, start + traces) if i != me and i in members
        ]

    def publish(self, step: int, lessons: str) -> None:
        """Records this trace's lessons for the others when they changed (once per step)."""
        if lessons != self._published:
            self.run.log_event(step, SHARED_LESSONS_EVENT, {"trace": self.trace, "text": lessons})
            self._published = lessons

    def _best(self, run_id: str) -> tuple[str, Any] | None:
        try:
            return Run(self.store, self.store.get_run(run_id)).best()
        except Exception:  # a sibling recorded but not started yet
            return None

    def snapshot_section(self) -> str:
        """The other traces' lessons and best scores, for this trace's snapshot ('' when none)."""
        self.refresh()
        lines: list[str] = []
        for sib in self.siblings:
            events = self.store.events(sib.run_id, kind=SHARED_LESSONS_EVENT)
            best = self._best(sib.run_id)
            score = fmt_score(best[1].score) if best else "none yet"
            if not events and best is None:
                continue
            text = str(events[-1].payload.get("text", "")).strip() if events else ""
            if len(text) > _MAX_SHARED_CHARS:
                text = text[:_MAX_SHARED_CHARS] + "\n[... cut]"
            lines += [f"### trace {sib.trace} (run {sib.run_id}, best {score})", text or "(no lessons yet)"]
        if not lines:
            return ""
        return "\n".join(["## Lessons from the other traces (their words, for you to weigh; adopt_best() copies "
                          "the best candidate found by any trace into candidate.py)", *lines])

    def best_elsewhere(self) -> tuple[_Sibling, str, Any] | None:
        """The best OK candidate of the other traces: (trace, candidate id, result)."""
        spec = self.run.task.spec
        found: tuple[_Sibling, str, Any] | None = None
        for sib in self.siblings:
            best = self._best(sib.run_id)
            if best is not None and spec.is_better(best[1].score, None if found is None else found[2].score):
                found = (sib, best[0], best[1])
        return found


class TraceTools:
    """``adopt_best``: bring the best candidate another trace has found into this trace's workspace."""

    def __init__(self, group: TraceGroup, workspace: Workspace, own_best: Callable[[], float | None],
                 candidate_file: str) -> None:
        self.group = group
        self.workspace = workspace
        self.own_best = own_best
        self.candidate_file = candidate_file

    @tool
    def adopt_best(self) -> str:
        """Copies the best candidate any other trace has found into candidate.py (evaluate() to score it here).

        Free: no evaluation is spent until you evaluate it. Refused when no other trace has a scored
        candidate better than your own best.
        """
        self.group.refresh()
        found = self.group.best_elsewhere()
        if found is None:
            raise ToolError("no other trace has a scored candidate yet")
        sib, cid, result = found
        mine = self.own_best()
        spec = self.group.run.task.spec
        if mine is not None and not spec.is_better(result.score, mine):
            raise ToolError(f"your best ({fmt_score(mine)}) is at least as good as trace {sib.trace}'s "
                            f"({fmt_score(result.score)}): nothing to adopt")
        source = Run(self.group.store, self.group.store.get_run(sib.run_id)).candidate_source(cid)
        self.workspace.write_text(self.candidate_file, source)
        return (f"candidate.py is now trace {sib.trace}'s best (candidate {cid[:12]}, score "
                f"{fmt_score(result.score)} in run {sib.run_id}); evaluate() to score it in this run")
