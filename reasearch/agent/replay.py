"""``replay_run``: re-runs a run's recorded model replies through the current harness and reports
where tool results or scores diverge (a regression check of the harness, the tools and the tasks).

Scores, statuses and the results of the file and program tools must match exactly. The output of
``bash`` and ``python_exec`` (timestamps in ``ls -la``, timings, random numbers) may differ between two
faithful runs: such differences are reported as information, not as divergences, unless ``strict``."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reasearch.agent._routing import fallback_role
from reasearch.agent.config import ROLES
from reasearch.agent.launch import effective_config, open_existing_store
from reasearch.agent.loop import Agent
from reasearch.errors import ModelError
from reasearch.models.messages import ModelReply
from reasearch.models.scripted import ScriptedModel
from reasearch.runs import Run, Store, open_store
from reasearch.runs.events import REPLY_KINDS, EventKind, base_kind
from reasearch.runs.steering import copy_for_replay, initial_budget

__all__ = ["COMMAND_TOOLS", "Divergence", "ReplayReport", "recorded_replies", "replay_run"]

COMMAND_TOOLS = frozenset({"bash", "python_exec"})  # their output may differ between faithful runs

# Wall times and active time in tool results differ from run to run; they are masked before comparing.
_TIMING = re.compile(r"\d+\.\d+ s\b|active time [^)]*")


@dataclass(frozen=True, slots=True)
class Divergence:
    """One step where the replay differs from the record."""

    step: int
    what: str  # e.g. "tool_result evaluate", "missing step", "final"
    recorded: str
    replayed: str


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """Result of a replay: what was compared, and every divergence."""

    run_id: str
    replay_run_id: str
    replay_dir: str
    steps_compared: int
    tool_results_compared: int
    evaluations_compared: int
    divergences: tuple[Divergence, ...] = field(default_factory=tuple)
    error: str = ""
    differences: tuple[Divergence, ...] = field(default_factory=tuple)  # command output only: information

    @property
    def ok(self) -> bool:
        return not self.divergences and not self.error


def _is_reply_kind(kind: str) -> bool:
    return base_kind(kind) in REPLY_KINDS


def recorded_replies(events: list[Any]) -> dict[str, list[ModelReply]]:
    """The recorded replies of each role, in the order they were received (attempts included)."""
    rows = []
    for e in events:
        if _is_reply_kind(e.kind):
            p = e.payload
            rows.append((int(e.step), int(p.get("attempt", 0)), p["role"], ModelReply.from_dict(p["reply"])))
    out: dict[str, list[ModelReply]] = {role: [] for role in ROLES}
    for _, _, role, reply in sorted(rows, key=lambda r: (r[0], r[1])):
        out.setdefault(role, []).append(reply)
    return out


def _norm_result(payload: Mapping[str, Any]) -> str:
    data = payload.get("data") or {}
    if "evaluation" in data:
        ev = data["evaluation"]
        return f"{ev['status']} score={ev['score']!r} candidate={ev['candidate'][:12]}"
    return f"{'error' if payload.get('is_error') else 'ok'}: {_TIMING.sub('<time>', str(payload.get('text', '')))}"


def replay_run(run_id: str, *, run_dir: str | Path = "runs", store: Store | None = None,
               replay_dir: str | Path | None = None, executor: Any = None, exec_fn: Any = None,
               strict: bool = False) -> ReplayReport:
    """Replays run ``run_id`` into a fresh run (in ``replay_dir``, default a temporary directory).

    The recorded model replies are served by a :class:`ScriptedModel` per role; tools and evaluations
    run live. Every recorded tool result is compared with the replayed one (evaluations by status,
    score and candidate; other tools by text, timings masked), and the final choice is compared too.
    A ``bash``/``python_exec`` result that differs only in its output is listed in ``differences``
    (information); with ``strict`` it is a divergence. A different status or exit code always is.

    Raises:
        StoreError: ``run_dir`` holds no store (a mistyped directory is never created), or no such run.
    """
    store = store or open_existing_store(run_dir)
    original = Run.open(store, run_id)
    events = original.events()
    config = effective_config(original)
    start = next((e.payload for e in events if e.kind == EventKind.START), {})
    models = {role: ScriptedModel(replies, name=f"replay:{role}") for role, replies in recorded_replies(events).items()}
    for role in config.fallbacks:  # a fallback never used still must not reach a real endpoint
        models.setdefault(fallback_role(role), ScriptedModel([], name=f"replay:{fallback_role(role)}"))
    out_dir = Path(replay_dir) if replay_dir else Path(tempfile.mkdtemp(prefix=f"replay-{original.id[:12]}-"))
    replay_store = open_store(out_dir)
    twin = Run.create(replay_store, task=original.task, seed=original.seed, budget=initial_budget(original),
                      config={**original.config, "replay_of": original.id}, executor=executor)
    copy_for_replay(original, twin)  # a steered run's interventions apply at the same steps
    agent = Agent(twin, out_dir / twin.id, config=config, models=models, lessons=start.get("lessons_text"),
                  exec_fn=exec_fn)
    error = ""
    try:
        agent.optimize()
    except ModelError as exc:  # the replay asked for more replies than were recorded: it went another way
        error = f"the replay diverged and asked the model for more than the record holds: {exc}"
    replayed = {(e.step, e.kind): e.payload for e in twin.events()}
    divergences: list[Divergence] = []
    differences: list[Divergence] = []
    tools = evals = 0
    for e in events:
        if e.kind in (EventKind.TOOL_RESULT, EventKind.FINAL) or _is_reply_kind(e.kind):
            other = replayed.get((e.step, e.kind))
            if other is None:
                divergences.append(Divergence(e.step, f"missing {e.kind}", e.kind, "(not reached)"))
                continue
            if e.kind == EventKind.TOOL_RESULT:
                tools += 1
                evals += "evaluation" in (e.payload.get("data") or {})
                a, b = _norm_result(e.payload), _norm_result(other)
                if a != b:
                    d = Divergence(e.step, f"tool_result {e.payload.get('name')}", a[:500], b[:500])
                    only_output = (e.payload.get("name") in COMMAND_TOOLS and other.get("name") == e.payload.get("name")
                                   and _command_head(e.payload) == _command_head(other))
                    (differences if only_output and not strict else divergences).append(d)
            elif e.kind == EventKind.FINAL and (e.payload.get("candidate"), e.payload.get("score")) != (
                other.get("candidate"),
                other.get("score"),
            ):
                divergences.append(Divergence(e.step, "final", f"{e.payload.get('candidate')} {e.payload.get('score')}",
                                              f"{other.get('candidate')} {other.get('score')}"))
    return ReplayReport(original.id, twin.id, str(out_dir), len({e.step for e in events}), tools, evals,
                        tuple(divergences), error, tuple(differences))


_HEAD = re.compile(r"^\[status (\S+), exit code (\S+),")


def _command_head(payload: Mapping[str, Any]) -> tuple[Any, ...]:
    """What must match of a command's result: error flag, status and exit code (not its output)."""
    m = _HEAD.match(str(payload.get("text", "")))
    return (bool(payload.get("is_error")), m.groups() if m else str(payload.get("text", "")))
