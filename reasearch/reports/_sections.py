"""The HTML sections of a run report (escaped fragments): summary, evaluations, ledger, lessons,
compactions and the folded transcript."""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping
from typing import Any

from reasearch.evaluators import scores
from reasearch.evaluators.svg import esc
from reasearch.reports._figures import STATUS_COLORS
from reasearch.reports._model import RunView, cap_text
from reasearch.reports.drawings import DrawContext, draw_solution
from reasearch.runs.display import duration_text
from reasearch.runs.events import EventKind

__all__ = ["summary_html", "solution_html", "evaluations_html", "ledger_html", "lessons_html", "compactions_html",
           "transcript_html", "interventions_html", "fmt_score", "fmt_duration", "utc"]

_RESULT_CAP = 20_000  # characters of one tool result in the transcript


def fmt_score(x: float | None) -> str:
    """A score as reports print it: 10 significant digits, scientific below 1e-3 (the rule: ``scores.fmt_score``)."""
    return scores.fmt_score(x, digits=10, small=1e-3)


def fmt_duration(seconds: float) -> str:
    return duration_text(seconds)  # one format for a run's active time: the CLI summary's


def utc(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _badge(status: str) -> str:
    return f'<span class="badge" style="background:{STATUS_COLORS.get(status, "#777")}">{esc(status)}</span>'


def _pre(text: Any, cls: str = "") -> str:
    return f'<pre class="{cls}">{esc(cap_text(text))}</pre>'


def summary_html(view: RunView) -> str:
    """Task, state, best and normalized score, budget used per unit, wall time, models."""
    r = view.record
    best = view.best
    rows = [
        ("run", f"<code>{esc(r.id)}</code>"),
        (
            "task",
            f"<code>{esc(r.task_id)}</code>"
            + (f" <span class='muted'>{esc(json.dumps(dict(r.task_params)))}</span>" if r.task_params else ""),
        ),
        ("seed", esc(r.seed)),
        (
            "state",
            f'<span class="state state-{esc(r.state.value)}">{esc(r.state.value)}</span>'
            + (f" <span class='muted'>{esc(r.reason)}</span>" if r.reason else ""),
        ),
        (
            "best score",
            "-"
            if best is None
            else f"<b class='best-score'>{esc(fmt_score(best.result.score))}</b> "
            f"({esc(view.direction)}; step {best.step}, "
            f"candidate <code>{esc(best.candidate_id[:12])}</code>)",
        ),
        (
            "normalized score",
            "-"
            if best is None or best.result.normalized_score is None
            else f"{best.result.normalized_score:.6f} (1 = best known {esc(fmt_score(view.best_known))})",
        ),
        (
            "evaluations",
            f"{len(view.evaluations)}: "
            + ", ".join(f"{_badge(s)} {n}" for s, n in sorted(view.by_status.items()))
            + f"; cached {sum(1 for e in view.evaluations if e.result.cached)}",
        ),
        ("candidates", str(len(view.candidates))),
        (
            "wall time",
            f"{fmt_duration(view.wall_s)} active (created {utc(r.created_at)}, last write {utc(r.updated_at)})",
        ),
        ("models", ", ".join(f"{esc(role)}: <code>{esc(name)}</code>" for role, name in view.models.items()) or "-"),
    ]
    if best is not None and best.result.provenance is not None:
        rows.append(("sandbox", esc(best.result.provenance.sandbox_mode)))
    held_out = "" if best is None else scores.heldout_text(best.result.metrics)
    if held_out:  # a training task's best: scored on public (carriable) or private held-out data
        warn = best is not None and best.result.metrics.get("heldout_public") is True
        rows.append(("held-out data", f"<span class='warn'>{esc(held_out)}</span>" if warn else esc(held_out)))
    if r.final_candidate:
        rows.append(("final candidate", f"<code>{esc(r.final_candidate[:12])}</code>"))
    if view.task_error:
        rows.append(("note", f"<span class='warn'>the task could not be built here ({esc(view.task_error)}); "
                             "scores are taken as maximize</span>"))
    units = sorted(set(view.caps) | {u for u, v in view.usage.items() if v})
    budget = "".join(
        f"<tr><td>{esc(u)}</td><td>{view.usage.get(u, 0.0):.6g}</td>"
        f"<td>{'-' if u not in view.caps else f'{view.caps[u]:.6g}'}</td>"
        f"<td>{_meter(view.usage.get(u, 0.0), view.caps.get(u))}</td></tr>" for u in units)
    facts = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return (f'<div class="row"><table class="kv">{facts}</table>'
            f'<table class="budget"><tr><th>unit</th><th>used</th><th>cap</th><th></th></tr>{budget}</table></div>')


def _meter(used: float, cap: float | None) -> str:
    if not cap:
        return ""
    frac = max(0.0, min(1.0, used / cap))
    return f'<span class="meter"><span style="width:{frac * 100:.1f}%"></span></span> {frac * 100:.0f}%'


def solution_html(view: RunView) -> str:
    """The best OK evaluation drawn by its task family's drawing, with its metrics and feedback."""
    best = view.best
    if best is None:
        return ('<figure class="solution" data-family="none"><p class="muted">no evaluation scored OK yet: '
                'nothing to draw</p></figure>')
    source = next((c.source for c in view.candidates if c.id == best.candidate_id), "")
    ctx = DrawContext(view.record.task_id, dict(view.record.task_params), best.result, source)
    metrics = {k: v for k, v in best.result.metrics.items() if not isinstance(v, (list, dict))}
    mrows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(fmt_score(v) if isinstance(v, float) else v)}</td></tr>"
                    for k, v in list(metrics.items())[:60])
    return (f"<p>step {best.step}, candidate <code>{esc(best.candidate_id[:12])}</code>, score "
            f"{esc(fmt_score(best.result.score))}</p>{draw_solution(ctx)}"
            f'<details><summary>metrics and feedback</summary><table class="kv small">{mrows}</table>'
            f"{_pre(best.result.feedback)}</details>"
            f"<details><summary>source</summary>{_pre(source, 'code')}</details>")


def evaluations_html(view: RunView) -> str:
    """Every evaluation as a table row (folded)."""
    rows = []
    for p, ev in zip(view.points, view.evaluations, strict=False):
        first = ev.result.feedback.strip().splitlines()[0][:160] if ev.result.feedback.strip() else ""
        rows.append(
            f"<tr><td>{p.index}</td><td>{p.step}</td><td><code>{esc(p.candidate_id[:12])}</code></td>"
            f"<td>{_badge(p.status)}</td><td>{esc(fmt_score(ev.result.score if p.status == 'OK' else None))}</td>"
            f"<td>{'yes' if p.cached else ''}</td><td>{ev.result.wall_s:.3f}</td><td>{esc(first)}</td></tr>"
        )
    return (f"<details><summary>{len(rows)} evaluations</summary><table class='grid-table'><tr><th>#</th><th>step</th>"
            "<th>candidate</th><th>status</th><th>score</th><th>cached</th><th>wall s</th><th>feedback</th></tr>"
            f"{''.join(rows)}</table></details>")


def interventions_html(view: RunView) -> str:
    """A person's interventions (applied ones), each with the best score before it, the best within the next
    evaluations, and the unsteered twin's figures at the same evaluation count when the run has one."""
    if not view.interventions:
        return "<p class='muted'>no interventions (nobody steered this run)</p>"
    twin = next((e.twin_run for e in view.interventions if e.twin_run), None)
    head = ("<tr><th>#</th><th>verb</th><th>who</th><th>sent (UTC)</th><th>applied at step</th><th>what</th>"
            "<th>best before</th><th>best in the next evaluations</th>"
            + ("<th>twin: best before</th><th>twin: best in the next</th>" if twin else "") + "</tr>")
    rows = []
    for e in view.interventions:
        i = e.intervention
        what = i.what()
        row = (f"<tr class='steer'><td>{i.seq}</td><td>{esc(i.verb)}</td><td>{esc(i.who)}</td><td>{esc(i.at)}</td>"
               f"<td>{i.applied_step}</td><td>{esc(what[:400])}</td><td>{esc(fmt_score(e.score_before))}</td>"
               f"<td>{esc(fmt_score(e.best_after))} ({e.evaluations_after} evaluations)</td>")
        if twin:
            row += f"<td>{esc(fmt_score(e.twin_before))}</td><td>{esc(fmt_score(e.twin_after))}</td>"
        rows.append(row + "</tr>")
    note = (f"<p class='small'>the unsteered twin is run <code>{esc(twin)}</code>: forked from the same candidate "
            "with the same budget, never steered</p>" if twin else "")
    return f"<table class='grid-table'>{head}{''.join(rows)}</table>{note}"


def ledger_html(view: RunView) -> str:
    """Totals per unit and every entry (folded)."""
    totals: dict[str, tuple[int, float]] = {}
    for e in view.ledger:
        n, a = totals.get(e.unit.value, (0, 0.0))
        totals[e.unit.value] = (n + 1, a + e.amount)
    head = "".join(f"<tr><td>{esc(u)}</td><td>{n}</td><td>{a:.6g}</td></tr>" for u, (n, a) in totals.items())
    entries = "".join(f"<tr><td>{e.step}</td><td>{esc(e.unit.value)}</td><td>{e.amount:.6g}</td><td>{esc(e.note)}</td>"
                      f"<td>{esc(utc(e.ts))}</td></tr>" for e in view.ledger[:20000])
    more = f"<p class='muted'>{len(view.ledger) - 20000} more entries not shown</p>" if len(view.ledger) > 20000 else ""
    return (f"<table class='grid-table'><tr><th>unit</th><th>entries</th><th>total</th></tr>{head}</table>"
            f"<details><summary>{len(view.ledger)} ledger entries</summary><table class='grid-table'><tr><th>step</th>"
            f"<th>unit</th><th>amount</th><th>note</th><th>time</th></tr>{entries}</table>{more}</details>")


def lessons_html(view: RunView) -> str:
    """Each version of lessons.md with its diff; the latest open."""
    if not view.lessons:
        return "<p class='muted'>no lessons.md recorded (the run was not driven by the agent)</p>"
    out = []
    for k, v in enumerate(view.lessons):
        diff = "".join(f'<span class="{"add" if line.startswith("+") else "del" if line.startswith("-") else ""}">'
                       f"{esc(line)}\n</span>" for line in v.diff.splitlines()[2:])
        last = k == len(view.lessons) - 1
        out.append(
            f"<details class='lessons'{' open' if last else ''}><summary>step {v.step}: {esc(v.origin)}</summary>"
            f"<div class='row'><div><div class='small'>lessons.md</div>{_pre(v.text)}</div>"
            f"<div><div class='small'>change</div><pre class='diff'>{diff}</pre></div></div></details>"
        )
    return "".join(out)


def compactions_html(view: RunView) -> str:
    comps = [e for e in view.events if e.kind == EventKind.COMPACTION]
    if not comps:
        return "<p class='muted'>no compaction</p>"
    out = []
    for e in comps:
        p = e.payload
        out.append(
            f"<details class='compaction'><summary>step {e.step}: {esc(p.get('reason', ''))} "
            f"(~{esc(p.get('tokens_before', '?'))} tokens before)</summary>"
            f"<div class='small'>summary written by the model</div>{_pre(p.get('summary', ''))}"
            f"<div class='small'>transcript saved as <code>{esc(p.get('transcript', ''))}</code></div></details>"
        )
    return "".join(out)


def _reply_parts(payload: Mapping[str, Any]) -> tuple[str, int]:
    """A model reply's text and tool-use blocks as HTML, and its tokens."""
    raw_reply = payload.get("reply")
    reply: Mapping[str, Any] = raw_reply if isinstance(raw_reply, Mapping) else {}
    parts = []
    for block in reply.get("content") or []:
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "text" and str(block.get("text", "")).strip():
            parts.append(_pre(block.get("text", ""), "assistant"))
        elif block.get("type") == "tool_use":
            parts.append(f"<div class='small'>calls <code>{esc(block.get('name', ''))}</code></div>")
    raw_usage = reply.get("usage")
    usage: Mapping[str, Any] = raw_usage if isinstance(raw_usage, Mapping) else {}
    tokens = sum(int(v) for v in usage.values() if isinstance(v, (int, float)))
    return "".join(parts), tokens


def transcript_html(view: RunView) -> str:
    """The agent's transcript from the event log: one folded block per turn (snapshot, reply, each tool
    call with its input and result), and the start, compactions and final choice between them."""
    if not view.events:
        return "<p class='muted'>no transcript (the run was not driven by the agent)</p>"
    out: list[str] = []
    turn: dict[str, Any] | None = None
    calls: dict[int, Mapping[str, Any]] = {}

    def close() -> None:
        nonlocal turn
        if turn is not None:
            tools = ", ".join(turn["tools"]) or "no tool call"
            out.append(f"<details class='turn'><summary>turn {esc(turn['n'])} · step {turn['step']} · {esc(tools)} · "
                       f"{turn['tokens']} tokens</summary>{''.join(turn['body'])}</details>")
            turn = None

    for e in view.events:
        p, kind = e.payload, e.kind
        base = kind.split(".", 1)[0]
        if kind == EventKind.SNAPSHOT:
            close()
            turn = {"n": p.get("turn", "?"), "step": e.step, "tools": [], "tokens": 0,
                    "body": [f"<details><summary>state snapshot</summary>{_pre(p.get('text', ''))}</details>"]}
        elif base == EventKind.MODEL_REPLY and turn is not None:
            html, tokens = _reply_parts(p)
            turn["tokens"] += tokens
            label = f" (attempt {esc(p.get('attempt'))})" if p.get("attempt") else ""
            turn["body"].append(
                f"<div class='reply'><div class='small'>{esc(p.get('model', 'model'))}{label}</div>{html}</div>"
            )
        elif kind == EventKind.TOOL_CALL:
            calls[e.step] = p
        elif kind == EventKind.TOOL_RESULT:
            call = calls.pop(e.step, {})
            name = str(p.get("name") or call.get("name", "?"))
            text = str(p.get("text", ""))
            first = text.strip().splitlines()[0][:140] if text.strip() else ""
            err = bool(p.get("is_error"))
            block = (f"<details class='tool{' error' if err else ''}'><summary><code>{esc(name)}</code> → "
                     f"{'error: ' if err else ''}{esc(first)}</summary>"
                     f"<div class='small'>input</div>{_pre(json.dumps(call.get('input', {}), indent=1))}"
                     f"<div class='small'>result</div><pre>{esc(cap_text(text, _RESULT_CAP))}</pre></details>")
            if turn is not None:
                turn["tools"].append(name)
                turn["body"].append(block)
            else:
                out.append(block)
        elif base in (EventKind.EDIT_REPLY, EventKind.SUMMARY):
            if base == EventKind.SUMMARY:
                close()  # the summary is written after the turn that asked for the compaction
            html, _ = _reply_parts(p)
            target = turn["body"] if turn is not None and base == EventKind.EDIT_REPLY else out
            target.append(f"<details class='aux'><summary>{esc(base.replace('_', ' '))} ({esc(p.get('model', ''))})"
                          f"</summary>{html}</details>")
        elif kind == EventKind.COMPACTION:
            close()
            out.append(f"<div class='event compaction'>compaction at step {e.step}: {esc(p.get('reason', ''))}</div>")
        elif kind == EventKind.FINAL:
            close()
            out.append(f"<div class='event final'>final choice by {esc(p.get('chosen_by', '?'))}: candidate "
                       f"<code>{esc(str(p.get('candidate') or '-')[:12])}</code>, score {esc(p.get('score'))}; "
                       f"{esc(p.get('reason', ''))}</div>")
        elif base == EventKind.STEER_REQUEST:  # a request as sent; its application is the ``steer`` event below
            continue
        elif base == EventKind.STEER:
            said = "; ".join(f"#{d.get('seq')} {d.get('verb')} by {d.get('who')}: "
                             + str((d.get("args") or {}).get("text") or (d.get("args") or {}).get("candidate")
                                   or (d.get("args") or {}).get("value") or (d.get("args") or {}).get("ban") or "")
                             for d in p.get("interventions", []) if isinstance(d, Mapping))
            close()  # applied at a step boundary: between two turns
            out.append(f"<div class='event steer'>a person steered at step {e.step}: {esc(cap_text(said, 2000))}</div>")
        elif kind == EventKind.START:
            out.append(f"<details class='event'><summary>start: task <code>{esc(p.get('task_id', ''))}</code></summary>"
                       f"{_pre(json.dumps(dict(p), indent=1, default=str))}</details>")
        else:
            target = turn["body"] if turn is not None else out
            target.append(f"<details class='event'><summary>{esc(kind)} (step {e.step})</summary>"
                          f"{_pre(json.dumps(dict(p), indent=1, default=str))}</details>")
    close()
    return "".join(out)
