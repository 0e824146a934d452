"""A lessons library: the lessons of finished agent runs, gathered into one file (``reasearch lessons
collect TASK_PREFIX -o library.md``) and loaded into a new run with ``--lessons library.md``.

A lesson is a list item of a run's ``lessons.md`` (continuation lines included) that the run wrote
itself: items preloaded from an earlier library are not credited to it again. Lessons are deduplicated
by their text (case, spacing, punctuation and list markers ignored); each keeps the run and the score
gain it came with: how much the run's best score had improved over its first OK score by the step at
which the lesson first appeared in ``lessons.md`` (positive = better, in the task's direction). The
library lists the lessons with the largest gains first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasearch.agent.loop import LESSONS_FILE
from reasearch.agent.snapshot import fmt_score
from reasearch.hostfs.guarded_path import Root, UnsafePathError
from reasearch.runs import Run, RunState, Store
from reasearch.runs.events import EventKind

__all__ = ["Lesson", "collect_lessons", "lesson_items", "lesson_sections", "render_library"]

_MAX_FILE = 256 * 1024
_MAX_LESSON = 1000  # characters of one lesson kept in a library
_ITEM = re.compile(r"^\s{0,3}(?:[-*+]|\d+[.)])\s+(.*\S)\s*$")
_CREDIT = re.compile(r"\s*_\(run [\w.-]+ on [^)]*\)_\s*$")  # the credit a library adds after each item


@dataclass(frozen=True, slots=True)
class Lesson:
    """One lesson of a library.

    Attributes:
        text: the lesson, as its run wrote it (one line).
        run_id: the run it is credited to (the one with the largest gain among those that wrote it).
        task_id: that run's task.
        step: the step at which it first appeared in that run's lessons.md (None: only in the final file).
        gain: best-score improvement over the run's first OK score by that step (None: nothing scored OK).
        also_in: how many other runs wrote the same lesson.
    """

    text: str
    run_id: str
    task_id: str
    step: int | None
    gain: float | None
    also_in: int = 0
    section: str = ""  # the lessons.md heading it was filed under ("What worked", ...; '' for none)


def _key(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def lesson_items(text: str) -> list[str]:
    """The list items of a lessons file, one line each (continuation lines joined; credits dropped)."""
    return [item for _, item in lesson_sections(text)]


def lesson_sections(text: str) -> list[tuple[str, str]]:
    """``(section, item)`` for each list item: the ``##`` heading it sits under ('' before any), so that a
    library keeps the categories (What worked, What failed, ...) its runs filed lessons under."""
    items: list[list[str]] = []
    section = ""
    for line in text.splitlines():
        m = _ITEM.match(line)
        if m:
            items.append([section, m.group(1)])
        elif items and line.startswith((" ", "\t")) and line.strip():
            items[-1][1] += " " + line.strip()
        elif line.lstrip().startswith("## "):
            section = line.strip()[3:].strip()
    out = [(sec, _CREDIT.sub("", i).strip()) for sec, i in items]
    return [(sec, i if len(i) <= _MAX_LESSON else i[:_MAX_LESSON] + "...") for sec, i in out if i]


def _read_plain(path: Path) -> str | None:
    """A workspace file the agent may have tampered with, through the guarded reader: a regular file only
    (no symlink followed, no FIFO waited on), cut at ``_MAX_FILE`` bytes; None when it is anything else."""
    try:
        fs = Root(path.parent)
    except OSError:
        return None
    try:
        return fs.read_bytes(path.name, cap=_MAX_FILE, cut=True).decode("utf-8", errors="replace")
    except (OSError, UnsafePathError):
        return None
    finally:
        fs.close()


def _lessons_writes(events: Iterable[Any]) -> list[tuple[int, str]]:
    """(step, full text) of each write of lessons.md recorded in the journal, in order."""
    out = []
    for e in events:
        p = e.payload
        if e.kind == EventKind.TOOL_CALL and p.get("name") == "write_file":
            args = p.get("input") or {}
            if str(args.get("path", "")).strip().lstrip("./") == LESSONS_FILE:
                out.append((int(e.step), str(args.get("content", ""))))
        elif e.kind == EventKind.COMPACTION and p.get("lessons"):
            out.append((int(e.step), str(p["lessons"])))
    return sorted(out, key=lambda r: r[0])


def _gain_by_step(run: Run) -> tuple[list[tuple[int, float]], float | None, Any]:
    """(step, best score so far) after each improving OK evaluation, the first OK score, the spec."""
    spec = run.task.spec
    best: float | None = None
    first: float | None = None
    marks: list[tuple[int, float]] = []
    for rec in run.evaluations():
        r = rec.result
        if r.status.value == "OK" and r.score is not None:
            first = r.score if first is None else first
            if best is None or spec.is_better(r.score, best):
                best = r.score
                marks.append((rec.step, best))
    return marks, first, spec


def collect_lessons(store: Store, task_prefix: str, *, run_dir: str | Path) -> tuple[list[Lesson], list[str]]:
    """The deduplicated lessons of the finished agent runs whose task id starts with ``task_prefix``.

    Returns:
        The lessons (largest gain first) and the ids of the runs read.
    """
    found: dict[str, list[Lesson]] = {}
    runs: list[str] = []
    for record in store.list_runs():
        if not record.task_id.startswith(task_prefix) or record.state is not RunState.FINISHED:
            continue
        if dict(record.config).get("driver") != "agent":
            continue
        run = Run.open(store, record.id)
        events = run.events()
        start = next((e.payload for e in events if e.kind == EventKind.START), {})
        preloaded = {_key(i) for i in lesson_items(str(start.get("lessons_text") or ""))}
        final_file = Path(run_dir) / record.id / "workspace" / LESSONS_FILE
        writes = _lessons_writes(events)
        final_text = _read_plain(final_file)
        if final_text is None:
            final_text = writes[-1][1] if writes else ""
        marks, first, spec = _gain_by_step(run)
        runs.append(record.id)
        for section, item in lesson_sections(final_text):
            key = _key(item)
            if not key or key in preloaded:
                continue
            step = next((s for s, text in writes if key in {_key(i) for i in lesson_items(text)}), None)
            upto = [b for s, b in marks if step is None or s <= step]
            gain = None
            if first is not None and upto:
                gain = (upto[-1] - first) if spec.direction == "maximize" else (first - upto[-1])
            found.setdefault(key, []).append(Lesson(item, record.id, record.task_id, step, gain, section=section))
    lessons = []
    for same in found.values():
        best = max(same, key=lambda lesson: (lesson.gain is not None, lesson.gain or 0.0))
        lessons.append(Lesson(best.text, best.run_id, best.task_id, best.step, best.gain, len(same) - 1, best.section))
    lessons.sort(key=lambda lesson: (lesson.gain is None, -(lesson.gain or 0.0), lesson.text))
    return lessons, runs


def render_library(lessons: Sequence[Lesson], task_prefix: str, runs: Sequence[str]) -> str:
    """The library as markdown (a valid ``lessons.md``: ``--lessons FILE`` loads it as is)."""
    lines = [f"# Lessons library: {task_prefix}*", "",
             (f"{len(lessons)} lessons from {len(runs)} finished runs; each with the run that wrote it and the "
              "best-score gain over that run's first OK score when it was written."), ""]
    # The template's sections first (a library is a valid lessons.md), then any other heading runs used.
    sections = [*_SECTIONS, *dict.fromkeys(lesson.section for lesson in lessons if lesson.section not in _SECTIONS)]
    for section in sections:
        title = section or "What earlier runs learned"
        rows = [lesson for lesson in lessons if lesson.section == section]
        if not rows and section not in _SECTIONS:
            continue
        lines += [f"## {title}", ""]
        for lesson in rows:
            gain = (
                "gain n/a" if lesson.gain is None else f"gain {'+' if lesson.gain >= 0 else ''}{fmt_score(lesson.gain)}"
            )
            where = f"step {lesson.step}" if lesson.step is not None else "final lessons.md"
            also = f", also in {lesson.also_in} other runs" if lesson.also_in else ""
            lines.append(f"- {lesson.text} _(run {lesson.run_id} on {lesson.task_id}, {where}, {gain}{also})_")
        lines.append("")
    return "\n".join(lines)


_SECTIONS = ("What worked", "What failed (and why)", "What to try next")  # LESSONS_TEMPLATE's headings

