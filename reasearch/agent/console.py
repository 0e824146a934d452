"""What a person sees of an agent run: progress while it runs, the final files and a summary after.

- Not a terminal (CI, a log file): one plain line per event (evaluation with status and score, new
  best, compaction, lessons update, model fallback, wrap-up, final choice), never a repainted table.
- A terminal: a rich live panel (turn, budget left, best score, last tool, context) with the score so
  far against evaluations as a sparkline.

Events are read from the agent's journal after each step, so the display needs nothing from the loop
but the ``on_progress`` call; steps replayed on resume are counted, not printed again.
"""

from __future__ import annotations

import math
import os
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from reasearch.agent.snapshot import EvalRecord
from reasearch.evaluators.scores import fmt_score, ok_score, running_best
from reasearch.runs.display import duration_text
from reasearch.runs.events import EventKind
from reasearch.runs.ledger import Unit
from reasearch.runs.run import active_seconds

__all__ = ["FINAL_FILE", "FINAL_PICTURE", "RunConsole", "sparkline", "summary_lines", "write_final_files"]

FINAL_FILE = "best_candidate.py"
FINAL_PICTURE = "best_candidate.png"
_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float | None], *, width: int = 60) -> str:
    """One character per value (the last ``width``), scaled between their min and max; None is a gap."""
    values = list(values)[-width:]
    known = [v for v in values if v is not None and math.isfinite(v)]
    if not known:
        return ""
    lo, hi = min(known), max(known)
    out = []
    for v in values:
        if v is None or not math.isfinite(v):
            out.append(" ")
        else:
            out.append(_BARS[-1] if hi == lo else _BARS[round((v - lo) / (hi - lo) * (len(_BARS) - 1))])
    return "".join(out)


class RunConsole:
    """The ``on_progress`` display of one agent run.

    Args:
        console: where to write (``Console(stderr=True)`` in the CLI).
        agent: the agent (its journal, history and run are read after each step).
        title: the panel's title.
        live: force the live panel (True) or plain lines (False); default: live on a terminal.
    """

    def __init__(self, console: Console, agent: Any, title: str, *, live: bool | None = None) -> None:
        self.console, self.agent, self.title = console, agent, title
        self.live_mode = console.is_terminal if live is None else live
        self._live: Live | None = None
        self._cursor = (0, 0)  # (step, events of that step already seen)
        self._replayed = 0
        self._said_replay = False
        self._best: float | None = None
        self._evaluations = 0
        self._last: Any = None
        self._lessons: str | None = None

    def _read_lessons(self) -> str:
        try:
            return str(self.agent.lessons())
        except Exception:  # a lessons.md the agent turned into something unreadable: nothing to report
            return ""

    # ------------------------------------------------------------ events
    def __call__(self, progress: Any) -> None:
        self._last = progress
        if self._lessons is None:
            self._lessons = self._read_lessons()
        for step, kind, payload in self._new_events():
            if self.agent.journal.replaying(step):
                self._replayed += 1
                self._track(step, kind, payload, quiet=True)
                continue
            if self._replayed and not self._said_replay:
                self._say(f"resumed: {self._replayed} recorded events replayed without spending anything")
                self._said_replay = True
            self._track(step, kind, payload, quiet=False)
            if kind == EventKind.TOOL_RESULT:  # however it was changed (write_file, bash, python_exec)
                lessons = self._read_lessons()
                if lessons != self._lessons:
                    self._lessons = lessons
                    self._say(f"[step {step}] lessons.md updated ({len(lessons.splitlines())} lines)")
        if self._live is not None:
            self._live.update(self.panel(progress))

    def _new_events(self) -> list[tuple[int, str, Mapping[str, Any]]]:
        journal = self.agent.journal
        step, seen = self._cursor
        out = []
        while step <= journal.last_recorded:
            kinds = journal.kinds(step)
            for kind in kinds[seen:]:
                out.append((step, kind, journal.get(step, kind) or {}))
            if step == journal.last_recorded:
                seen = len(kinds)
                break
            step, seen = step + 1, 0
        self._cursor = (step, seen)
        return out

    def _track(self, step: int, kind: str, p: Mapping[str, Any], *, quiet: bool) -> None:
        base = kind.split(".", 1)[0]
        line = ""
        if kind == EventKind.TOOL_RESULT and "evaluation" in (p.get("data") or {}):
            rec = EvalRecord.from_dict(p["data"]["evaluation"])
            self._evaluations += 1
            line = f"evaluation {self._evaluations}: {rec.status}"
            if rec.score is not None:
                norm = f" (normalized {rec.normalized_score:.4f})" if rec.normalized_score is not None else ""
                line += f" score {fmt_score(rec.score)}{norm}" + (" [cached]" if rec.cached else "")
                if self._best is None or self.agent.task.spec.is_better(rec.score, self._best):
                    line += " - new best" + (f" (was {fmt_score(self._best)})" if self._best is not None else "")
                    self._best = rec.score
            line += f"  [candidate {rec.candidate[:12]}]"
        elif kind == EventKind.COMPACTION:
            line = (f"compaction: {p.get('reason')}; ~{p.get('tokens_before')} tokens summarized, "
                    f"transcript {p.get('transcript')}")
        elif kind == EventKind.SNAPSHOT and p.get("wrap_up"):
            line = f"wrap-up turn: {p.get('wrap_up')}; the agent may only call finish"
        elif base == EventKind.FALLBACK:
            line = f"{p.get('role')}: {p.get('from')} failed ({p.get('reason')}); {p.get('to')} redoes it"
        elif base == EventKind.MODELS:
            line = "models changed for this resume: " + ", ".join(
                f"{role} {spec.get('name')} @ {(p.get('endpoints') or {}).get(role) or '-'}"
                for role, spec in (p.get("models") or {}).items())
        elif kind == EventKind.FINAL:
            line = (f"final: candidate {str(p.get('candidate') or 'none')[:12]} score {fmt_score(p.get('score'))} "
                    f"chosen by {p.get('chosen_by')} ({p.get('stop_reason')})")
        if line and not quiet:
            self._say(f"[step {step}] {line}")

    def _say(self, line: str) -> None:
        text = Text(line)
        if self._live is not None:
            self._live.console.print(text)
        else:
            self.console.print(text, soft_wrap=True, highlight=False)

    # ------------------------------------------------------------ the live panel
    def panel(self, p: Any) -> Panel:
        t = Table(show_header=True, header_style="bold", expand=False)
        for col in ("turn", "step", "evaluations left", "dollars left", "best score", "last tool", "context"):
            t.add_column(col)
        left = {getattr(k, "value", str(k)): v for k, v in p.remaining.items()}
        ev, usd = left.get("evaluations"), left.get("dollars")
        t.add_row(str(p.turn), str(p.step), "-" if ev is None else f"{ev:g}", "-" if usd is None else f"${usd:.2f}",
                  fmt_score(p.best_score), p.last_tool or "-", f"~{p.context_tokens} tok")
        history = list(self.agent.history)
        scores = [ok_score(r.status, r.score) for r in history]
        best = running_best(scores, self.agent.task.spec.direction)
        chart = Text()
        chart.append("score  ", style="bold")
        chart.append(sparkline(scores) or "(no evaluation yet)")
        chart.append("\nbest   ", style="bold")
        chart.append(sparkline(best))
        chart.append(f"\n{len(history)} evaluations; best {fmt_score(best[-1] if best else None)}", style="dim")
        return Panel(Group(t, chart), title=self.title)

    def __enter__(self) -> RunConsole:
        if self.live_mode:
            self._live = Live(console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None


def _result_of(run: Any, candidate: str) -> Any:
    """The stored evaluation result of ``candidate`` (the latest OK one), or None."""
    best = run.best()
    if best is not None and best[0] == candidate:
        return best[1]
    evs = getattr(run, "evaluations", None)
    rows = [(r.candidate_id, r.result) for r in evs()] if callable(evs) else list((evs or {}).values())
    ok = [res for cid, res in rows if cid == candidate and getattr(res, "ok", False)]
    return ok[-1] if ok else None


def _place(root: Path, name: str, write: Any) -> Path:
    """Writes ``root/name`` through a fresh exclusive temp file renamed over it: whatever the agent left
    at that name (a symlink out of the workspace, a FIFO) is replaced, never followed."""
    fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{name}-", suffix=Path(name).suffix)
    os.close(fd)
    try:
        write(Path(tmp))
        target = root / name
        if target.is_dir() and not target.is_symlink():
            raise IsADirectoryError(f"{name} is a directory in the workspace")
        os.replace(tmp, target)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return root / name


def write_final_files(agent: Any, candidate: str | None) -> dict[str, str]:
    """Writes the final candidate to the workspace as ``best_candidate.py`` and, for a task that draws,
    its picture as ``best_candidate.png``; returns what was written (name -> path) and why something is
    missing (``candidate_note``, ``picture_note``). Never raises: the run's result stands without them."""
    out: dict[str, str] = {}
    if candidate is None:
        return out
    root = Path(agent.workspace.root)
    try:
        source = agent.run.candidate_source(candidate)
        out["candidate"] = str(_place(root, FINAL_FILE, lambda p: p.write_text(source)))
    except Exception as exc:  # e.g. a directory planted under that name
        out["candidate_note"] = f"{FINAL_FILE} could not be written: {type(exc).__name__}: {exc}"
    render = getattr(agent.task, "render_png", None)
    if not callable(render):
        return out
    result = _result_of(agent.run, candidate)
    if result is None or getattr(result, "solution", None) is None:
        out["picture_note"] = "no stored solution to draw"
        return out
    try:
        out["picture"] = str(_place(root, FINAL_PICTURE, lambda p: render(result, p)))
    except Exception as exc:  # a picture is a courtesy
        out["picture_note"] = f"the picture could not be drawn: {type(exc).__name__}: {exc}"
    return out


def summary_lines(agent: Any, result: Any, run_dir: str | Path, files: Mapping[str, str] | None = None) -> list[str]:
    """The end-of-run summary: the final score (formatted, normalized to the best known), evaluations,
    tokens, dollars, wall time, the files written, and the commands to resume, replay and report."""
    spec = agent.task.spec
    used = agent.run.used()
    unit = Unit(next(iter(agent.task.budget_estimate()), Unit.EVALUATIONS))  # the task's own unit (experiments, ...)
    cap = agent.run.budget.cap(unit) if hasattr(agent.run, "budget") else None
    token_cap = agent.run.budget.cap(Unit.TOKENS) if hasattr(agent.run, "budget") else None
    student_cap = agent.run.budget.cap(Unit.STUDENT_TOKENS) if hasattr(agent.run, "budget") else None
    student = used.get(Unit.STUDENT_TOKENS, 0)  # a prompt task's student: its own unit, apart from the agent's
    students = (f", {int(student):,} student tokens" + (f" of a {int(student_cap):,} cap" if student_cap is not None
                                                         else "")) if student or student_cap is not None else ""
    rec = next(
        (r for r in reversed(agent.history) if r.candidate == result.final_candidate and r.score is not None), None
    )
    score = result.final_score
    if score is None:
        scored = "no candidate scored OK"
    else:
        scored = f"score {fmt_score(score)}"
        if rec is not None and rec.normalized_score is not None:
            scored += f" = {rec.normalized_score:.4f} of the best known {fmt_score(spec.best_known)}"
        elif spec.best_known is not None:
            scored += f" (best known {fmt_score(spec.best_known)})"
    d = shlex.quote(str(run_dir))
    rid = result.run_id
    active = active_seconds(agent.run.store, agent.run.store.get_run(agent.run.id))  # the report's figure too
    lines = [
        f"run {rid}: {result.state}; final candidate {(result.final_candidate or 'none')[:12]} {scored} "
        f"(chosen by {result.chosen_by})",
        f"why: {result.reason}",
        f"spent: {used.get(unit, 0):g} {unit.value.replace('_', ' ')}" + (f" of {cap:g}" if cap is not None else "")
        + f", {used.get(Unit.MODEL_CALLS, 0):g} model calls, {int(used.get(Unit.TOKENS, 0)):,} tokens"
        + (f" of a {int(token_cap):,} cap" if token_cap is not None else "") + students + ", "
          f"${used.get(Unit.DOLLARS, 0):.4f}, {duration_text(active)} active wall time, {result.turns} turns",
    ]
    files = dict(files or {})
    if "candidate" in files:
        lines.append(f"final candidate: {files['candidate']}")
    elif "candidate_note" in files:
        lines.append(f"final candidate: not written ({files['candidate_note']})")
    if "picture" in files:
        lines.append(f"picture: {files['picture']}")
    elif "picture_note" in files:
        lines.append(f"picture: none ({files['picture_note']})")
    lines.append(f"workspace: {agent.workspace.root}")
    lines.append(f"report: reasearch report {rid} --run-dir {d}   (summary: reasearch show {rid} --run-dir {d})")
    lines.append(f"replay: reasearch replay {rid} --run-dir {d}")
    lines.append(f"resume: reasearch resume {rid} --run-dir {d}"
                 + ("   (finished: a resume has nothing left to do)" if result.state == "finished" else ""))
    return lines
