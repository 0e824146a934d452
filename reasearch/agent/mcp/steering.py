"""``reasearch mcp --steer``: a supervising MCP client steers the runs of a store.

Four tools, typed with ``@tool`` like the agent's: ``list_runs``, ``steer`` (one intervention on a live run:
hint, pin, ban, lift, pause, resume, cap, stop), ``interventions`` (a run's interventions and what followed
each) and ``fork`` (a new run from a stored candidate, optionally with an unsteered twin). Every write goes
through :func:`reasearch.runs.steering.submit` or :func:`~reasearch.runs.steering.fork` with ``who`` =
``mcp:CLIENT`` (the name and version the client announced), so it is validated, journaled and applied at
the run's next step exactly as one from the CLI or the dashboard.
"""

from __future__ import annotations

from typing import Any, Literal

from reasearch.agent.mcp._service import ToolsetService
from reasearch.agent.snapshot import fmt_score
from reasearch.agent.tools.schema import ToolError, ToolOutput, tool
from reasearch.errors import ConfigError, StoreError
from reasearch.runs import steering
from reasearch.runs.store import Store

__all__ = ["SteeringService", "SteeringTools"]

Verb = Literal["hint", "pin", "ban", "lift", "pause", "resume", "cap", "stop"]


class SteeringTools:
    """The steering verbs over one store, as tools; ``who`` names the client of the call in progress."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.who = "mcp"

    def _run(self, run: str) -> str:
        try:
            return self.store.get_run(run).id
        except StoreError as exc:
            raise ToolError(f"{exc} (list_runs shows the ids)") from None

    @tool
    def list_runs(self, filter: str = "", limit: int = 50) -> ToolOutput:
        """Lists the store's runs, newest first: id, task, state, evaluations and best score.

        Args:
            filter: show only runs whose id or task id contains this text.
            limit: how many runs to show at most.
        """
        runs = [r for r in sorted(self.store.list_runs(), key=lambda r: -r.created_at)
                if filter in r.id or filter in r.task_id]
        shown = runs[:max(1, min(limit, 500))]
        rows, data = [], []
        for r in shown:
            evals = self.store.evaluations(r.id)
            scores = [e.result.score for e in evals if e.result.score is not None]
            minimize = r.task_spec is not None and r.task_spec.direction == "minimize"
            best = (min(scores) if minimize else max(scores)) if scores else None
            rows.append(f"{r.id}  {r.task_id}  {r.state.value}  {len(evals)} evaluations  best {fmt_score(best)}")
            data.append({"run": r.id, "task_id": r.task_id, "state": r.state.value, "evaluations": len(evals),
                         "best": best})
        more = f"\n[{len(runs) - len(shown)} more; narrow the filter]" if len(runs) > len(shown) else ""
        return ToolOutput("\n".join(rows) + more if rows else "no run matches", {"runs": data, "total": len(runs)})

    @tool
    def steer(self, run: str, verb: Verb, text: str = "", candidate: str = "", ban: int = 0, unit: str = "",
              value: float = 0.0) -> ToolOutput:
        """Sends one intervention to a live run; it reaches the optimizer at its next step and is journaled.

        Args:
            run: the run id (or a unique prefix).
            verb: hint (text the optimizer reads next), pin (a candidate as the parent to work from), ban (a note
                shown until lifted), lift (a ban, by its number), pause, resume, cap (change a budget cap, never
                below what is spent) or stop.
            text: the hint or ban text; an optional reason for pause, resume and stop.
            candidate: for pin: the candidate id or a unique prefix.
            ban: for lift: the number (#) of the ban to lift.
            unit: for cap: the budget unit, e.g. evaluations or dollars.
            value: for cap: the new cap.
        """
        run_id = self._run(run)
        args: dict[str, Any]
        if verb == "pin":
            args = {"candidate": candidate}
        elif verb == "lift":
            args = {"ban": ban}
        elif verb == "cap":
            args = {"unit": unit, "value": value}
        elif verb in ("hint", "ban"):
            args = {"text": text}
        else:
            args = {"text": text} if text else {}
        try:
            i = steering.submit(self.store, run_id, verb, args, who=self.who)
        except (ConfigError, StoreError) as exc:
            raise ToolError(str(exc)) from None
        return ToolOutput(f"queued {i.describe()} on run {run_id}; it applies at the run's next step",
                          {"intervention": i.to_dict()})

    @tool
    def interventions(self, run: str, window: int = 5) -> ToolOutput:
        """A run's interventions: who sent what and when, the step it applied at, and what followed it (the best
        score before, the best within the next evaluations, and the unsteered twin's when there is one).

        Args:
            run: the run id (or a unique prefix).
            window: how many evaluations after an intervention count as what followed it.
        """
        run_id = self._run(run)
        try:
            effects = {e.intervention.seq: e for e in steering.effects(self.store, run_id, window=max(1, window))}
            items = steering.history(self.store, run_id)
        except ConfigError as exc:
            raise ToolError(str(exc)) from None
        lines, data = [], []
        for i in items:
            e = effects.get(i.seq)
            when = "pending" if i.applied_step is None else f"applied at step {i.applied_step}"
            after = "" if e is None else (f"; best before {fmt_score(e.score_before)}, best in the next "
                                          f"{e.evaluations_after} {fmt_score(e.best_after)}"
                                          + ("" if e.twin_run is None else f", twin {fmt_score(e.twin_after)}"))
            lines.append(f"{i.describe()} at {i.at}, {when}{after}")
            data.append({**i.to_dict(), "score_before": None if e is None else e.score_before,
                         "best_after": None if e is None else e.best_after})
        return ToolOutput("\n".join(lines) if lines else f"run {run_id} has no interventions",
                          {"run": run_id, "interventions": data})

    @tool
    def fork(self, run: str, candidate: str, evaluations: int, twin: bool = False) -> ToolOutput:
        """Starts a new run from a stored candidate of a run, with its own budget (stored interrupted: `reasearch
        resume NEW` drives it).

        Args:
            run: the run id (or a unique prefix).
            candidate: the candidate to start from (id or unique prefix).
            evaluations: the new run's evaluation budget.
            twin: also make an unsteered twin, so the effect of later interventions can be measured against it.
        """
        run_id = self._run(run)
        try:
            new = steering.fork(self.store, run_id, candidate, {"evaluations": evaluations}, twin=twin)
        except (ConfigError, StoreError) as exc:
            raise ToolError(str(exc)) from None
        twin_id = steering.fork_info(self.store.get_run(new).config).get("twin")
        return ToolOutput(f"forked run {new} from {candidate} of {run_id}" + (f", twin {twin_id}" if twin_id else "")
                          + f"; drive it with: reasearch resume {new}", {"run": new, "twin": twin_id})


class SteeringService(ToolsetService[SteeringTools]):
    """The supervising server's provider: the steering tools over one store, no resources; one call at a time,
    so ``who`` is the caller's while its call runs."""

    serial = True

    def __init__(self, store: Store) -> None:
        super().__init__(SteeringTools(store))

    def bind(self, client: str) -> None:
        self.toolset.who = f"mcp:{client}" if client else "mcp"

    def instructions(self) -> str:
        return ("Steer the runs of a reasearch store: list_runs, steer (hint, pin, ban, lift, pause, resume, cap, "
                "stop), interventions, fork. Every intervention is journaled with who sent it and reaches the run's "
                "optimizer at its next step.")
