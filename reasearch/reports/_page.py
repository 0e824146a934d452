"""The report page: sections and figures of a run assembled into one HTML document.

The same page serves two uses: a self-contained file (plotly.js inlined, the data in a JSON script
tag, a Content-Security-Policy that forbids every network load) and the dashboard's live page (plotly.js
from the server, updates pushed by server-sent events, sections and figures replaced in place).
"""

from __future__ import annotations

import functools
import json
import math
import secrets
from collections.abc import Sequence
from typing import Any

from reasearch.errors import ConfigError
from reasearch.evaluators.svg import esc
from reasearch.reports._figures import compare_figures, curve_figures, tree_figure
from reasearch.reports._model import RunView, cap_text
from reasearch.reports._sections import (
    compactions_html,
    evaluations_html,
    fmt_duration,
    fmt_score,
    interventions_html,
    ledger_html,
    lessons_html,
    solution_html,
    summary_html,
    transcript_html,
)

__all__ = ["report_payload", "report_html", "compare_html", "plotly_js", "script_json", "CSS", "REPORT_JS", "SECTIONS"]

# Section id -> heading, in page order (the figures sit in the "curves" and "lineage" sections).
SECTIONS = (
    ("summary", "Summary"),
    ("curves", "Score"),
    ("steering", "Interventions"),
    ("solution", "Best solution"),
    ("lineage", "Candidate lineage"),
    ("evaluations", "Evaluations"),
    ("ledger", "Ledger"),
    ("lessons", "lessons.md as it evolved"),
    ("compactions", "Compactions"),
    ("transcript", "Transcript"),
)
_SOURCE_CAP = 200_000


@functools.cache
def plotly_js() -> str:
    """The plotly.js bundle shipped by the pinned ``plotly`` package (inlined once per report)."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise ConfigError("reports need plotly: pip install 'reasearch[web]'") from None
    return get_plotlyjs()


def script_json(obj: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">`` (no ``</script>``, no ``<!--``)."""
    try:
        text = json.dumps(obj, separators=(",", ":"), allow_nan=False, default=str)
    except ValueError:  # a NaN or infinity somewhere: plain JSON has none
        text = json.dumps(_finite(obj), separators=(",", ":"), allow_nan=False, default=str)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _candidates(view: RunView) -> list[dict[str, Any]]:
    """What a click on a tree node shows: source, note, evaluations and the last feedback."""
    evals: dict[str, list[list[Any]]] = {}
    feedback: dict[str, str] = {}
    for ev in view.evaluations:
        r = ev.result
        evals.setdefault(ev.candidate_id, []).append([ev.step, r.status.value, fmt_score(r.score if r.ok else None),
                                                      bool(r.cached)])
        feedback[ev.candidate_id] = r.feedback
    return [{"id": c.id, "parent": c.parent, "note": cap_text(c.note, 2000), "source": cap_text(c.source, _SOURCE_CAP),
             "evaluations": evals.get(c.id, []), "feedback": cap_text(feedback.get(c.id, ""), 20_000)}
            for c in view.candidates]


def _headline(view: RunView) -> str:
    r, best = view.record, view.best
    return (f"run <code>{esc(r.id)}</code> · {esc(r.task_id)} · {esc(r.state.value)} · best "
            f"{esc(fmt_score(best.result.score if best else None))} · {len(view.evaluations)} evaluations")


def _sections(view: RunView) -> dict[str, str]:
    return {
        "headline": _headline(view),
        "summary": summary_html(view),
        "solution": solution_html(view),
        "steering": interventions_html(view),
        "evaluations": evaluations_html(view),
        "ledger": ledger_html(view),
        "lessons": lessons_html(view),
        "compactions": compactions_html(view),
        "transcript": transcript_html(view),
    }


def report_payload(view: RunView, *, sections: bool = True) -> dict[str, Any]:
    """Everything the page draws, as JSON: section HTML, Plotly figures, candidates, counts."""
    figures = curve_figures(view)
    figures["fig-tree"] = tree_figure(view)
    payload: dict[str, Any] = {
        "run_id": view.record.id, "state": view.record.state.value,
        "figures": figures, "candidates": _candidates(view),
        "counts": {"evaluations": len(view.evaluations), "candidates": len(view.candidates),
                   "events": len(view.events), "last_step": view.last_step},
    }
    if sections:
        payload["sections"] = _sections(view)
    return payload


CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d1d1f;background:#fff}
header{background:#1d2b4f;color:#fff;padding:10px 20px}header h1{font-size:18px;margin:0}header a{color:#cfe}
nav{font-size:12px}nav a{margin-right:10px}
main{padding:6px 20px 40px;max-width:1400px}section{margin:18px 0;border-top:1px solid #ddd;padding-top:6px}
h2{font-size:16px;margin:6px 0}.row{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start}
table{border-collapse:collapse}th,td{text-align:left;padding:2px 8px;vertical-align:top}
table.kv th{color:#555;font-weight:600}\
table.grid-table td,table.grid-table th{border-bottom:1px solid #eee;font-size:12px}
.small{font-size:11px;color:#666}.muted{color:#888}.warn{color:#b45309}
pre{background:#f6f8fa;padding:6px 8px;overflow:auto;max-height:420px;font-size:12px;\
white-space:pre-wrap;word-break:break-word}
pre.code{max-height:600px}.badge{color:#fff;border-radius:3px;padding:0 5px;font-size:11px}
.meter{display:inline-block;width:90px;height:8px;background:#eee;vertical-align:middle}\
.meter span{display:block;height:8px;background:#4269d0}
details{margin:3px 0}summary{cursor:pointer}details.turn{border-left:3px solid #4269d0;padding-left:8px}
details.tool{margin-left:10px}details.tool.error summary{color:#b91c1c}.event{margin:6px 0;font-weight:600}
.event.steer{color:#c2185b}.compaction{color:#6d28d9}\
.final{color:#166534}pre.diff .add{color:#166534;background:#dcfce7}\
pre.diff .del{color:#991b1b;background:#fee2e2}
figure.solution{margin:6px 0}figcaption{font-size:12px;color:#444;margin-top:4px}
svg text{font-family:system-ui,sans-serif}svg .t{font-size:12px;font-weight:600}svg .a{font-size:10px;fill:#444}
.pair{display:flex;gap:10px;align-items:flex-end;margin:6px 0;flex-wrap:wrap}.grid{text-align:center}
.plot{width:100%;min-height:360px}.plots2{display:grid;grid-template-columns:1fr 1fr;gap:10px}
#cand-panel{border:1px solid #ddd;padding:6px 10px;margin-top:6px}#live-status{font-size:12px;margin-left:10px}
.state-running{color:#1d4ed8}.state-finished{color:#166534}.state-failed{color:#b91c1c}.state-interrupted{color:#b45309}
"""

REPORT_JS = r"""
(function () {
  "use strict";
  var CONFIG = {displaylogo: false, responsive: true};
  var last = {};
  var DATA = null;
  function setText(id, text) { var el = document.getElementById(id); if (el) { el.textContent = text; } }
  function showCandidate(i) {
    var c = DATA && DATA.candidates[i];
    if (!c) { return; }
    setText("cand-title", "candidate " + c.id.slice(0, 12) +
        (c.parent ? " (parent " + c.parent.slice(0, 12) + ")" : " (a root)"));
    setText("cand-note", c.note || "");
    setText("cand-evals", c.evaluations.length ? c.evaluations.map(function (e) {
      return "step " + e[0] + ": " + e[1] + " " + e[2] + (e[3] ? " (cached)" : ""); }).join("; ") : "not evaluated");
    setText("cand-source", c.source);
    setText("cand-feedback", c.feedback || "(no feedback)");
    var panel = document.getElementById("cand-panel");
    if (panel) { panel.hidden = false; panel.dataset.candidate = c.id; }
  }
  function apply(data) {
    DATA = data;
    var sections = data.sections || {};
    Object.keys(sections).forEach(function (id) {
      var el = document.getElementById("sec-" + id);
      if (el && last[id] !== sections[id]) {
        // keep what the reader unfolded: <details> open before the update stay open (by position)
        var open = [];
        el.querySelectorAll("details").forEach(function (d, k) { if (d.open) { open.push(k); } });
        el.innerHTML = sections[id];
        var all = el.querySelectorAll("details");
        open.forEach(function (k) { if (all[k]) { all[k].open = true; } });
        last[id] = sections[id];
      }
    });
    Object.keys(data.figures || {}).forEach(function (id) {
      var el = document.getElementById(id);
      if (!el) { return; }
      var fig = data.figures[id];
      Plotly.react(el, fig.data, fig.layout, CONFIG);
      if (id === "fig-tree" && !el.dataset.bound) {
        el.dataset.bound = "1";
        el.on("plotly_click", function (ev) { if (ev.points.length) { showCandidate(ev.points[0].customdata[0]); } });
      }
    });
    document.body.dataset.evaluations = String(data.counts.evaluations);
    document.body.dataset.candidates = String(data.counts.candidates);
    document.body.dataset.ready = "1";
  }
  window.reasearchReport = {apply: apply, showCandidate: showCandidate};
  var boot = document.getElementById("report-data");
  if (boot) { apply(JSON.parse(boot.textContent)); }
  var live = document.body.dataset.live;
  if (live && window.EventSource) {
    var status = document.getElementById("live-status");
    var es = new EventSource(live);
    var busy = false;
    es.addEventListener("update", function () {
      if (busy) { return; }
      busy = true;
      fetch(document.body.dataset.dataUrl, {cache: "no-store", credentials: "same-origin"})
        .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
        .then(function (d) {
            apply(d); if (status) { status.textContent = "live: updated " + new Date().toLocaleTimeString(); } })
        .catch(function (e) { if (status) { status.textContent = "live: " + e; } })
        .then(function () { busy = false; });
    });
    es.onerror = function () { if (status) { status.textContent = "live: reconnecting"; } };
  }
})();
"""


def _csp(nonce: str, live: bool) -> str:
    # The file opens offline: nothing may be fetched (connect-src 'none'); the live page talks to its server only.
    connect = "'self'" if live else "'none'"
    script = f"'nonce-{nonce}'" + (" 'self'" if live else "")
    return (f"default-src 'none'; script-src {script}; style-src 'unsafe-inline'; img-src data:; "
            f"font-src data:; connect-src {connect}; base-uri 'none'; form-action 'none'")


def _document(title: str, header: str, body: str, data: dict[str, Any], *, live_url: str | None = None,
              data_url: str | None = None, plotly_src: str | None = None) -> str:
    nonce = secrets.token_urlsafe(16)
    live = live_url is not None
    if plotly_src is None:
        plotly_tag = f'<script nonce="{nonce}">{plotly_js()}</script>'
    else:
        plotly_tag = f'<script nonce="{nonce}" src="{esc(plotly_src)}"></script>'
    attrs = f' data-live="{esc(live_url)}" data-data-url="{esc(data_url or "")}"' if live else ""
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f'<meta http-equiv="Content-Security-Policy" content="{_csp(nonce, live)}">'
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{esc(title)}</title><style>{CSS}</style>{plotly_tag}</head>"
        f"<body{attrs}><header>{header}</header><main>{body}</main>"
        f'<script type="application/json" id="report-data">{script_json(data)}</script>'
        f'<script nonce="{nonce}">{REPORT_JS}</script></body></html>')


def report_html(view: RunView, *, live_url: str | None = None, data_url: str | None = None,
                plotly_src: str | None = None, home_url: str | None = None,
                extra: Sequence[tuple[str, str, str]] = (), panel: str | None = None) -> str:
    """The report page of one run (self-contained unless ``plotly_src`` names a script URL).

    ``extra``: more sections after the score curves, each ``(id, title, inner HTML)``; the inner HTML is the
    caller's, already escaped (the dashboard's running experiments, lessons file and steering slot).
    ``panel``: trusted HTML put first in the page (the dashboard's steering panel, ``serve --steer``).
    """
    sections = _sections(view)
    payload = report_payload(view, sections=False)  # sections are in the HTML already
    r = view.record
    nav = "".join(f'<a href="#{sid}">{esc(title)}</a>' for sid, title in
                  [*SECTIONS[:2], *((sid, title) for sid, title, _ in extra), *SECTIONS[2:]])
    home = f'<a href="{esc(home_url)}">all runs</a> · ' if home_url else ""
    header = (f"<h1>{home}<span id='sec-headline'>{sections['headline']}</span>"
              f"{'<span id=live-status>live</span>' if live_url else ''}</h1><nav>{nav}</nav>")
    parts = [] if panel is None else [panel]
    for sid, title in SECTIONS:
        if sid == "curves":
            inner = (
                '<div id="fig-evals" class="plot"></div><div class="plots2"><div id="fig-dollars" class="plot"></div>'
                '<div id="fig-wall" class="plot"></div></div>'
            )
        elif sid == "lineage":
            inner = (
                '<div id="fig-tree" class="plot"></div><div id="cand-panel" hidden><b id="cand-title"></b>'
                '<div id="cand-note" class="small"></div><div id="cand-evals" class="small"></div>'
                '<div class="row"><div style="flex:1 1 480px"><div class="small">source</div><pre id="cand-source" '
                'class="code"></pre></div><div style="flex:1 1 380px"><div class="small">feedback of its last '
                'evaluation</div><pre id="cand-feedback"></pre></div></div></div>'
            )
        else:
            inner = f'<div id="sec-{sid}">{sections[sid]}</div>'
        parts.append(f'<section id="{sid}"><h2>{esc(title)}</h2>{inner}</section>')
        if sid == "curves":
            parts.extend(f'<section id="{esc(xid)}"><h2>{esc(title)}</h2>{inner_html}</section>'
                         for xid, title, inner_html in extra)
    return _document(f"reasearch report {r.id} ({r.task_id})", header, "".join(parts), payload, live_url=live_url,
                     data_url=data_url, plotly_src=plotly_src)


def compare_html(views: Sequence[RunView], *, plotly_src: str | None = None) -> str:
    """Several runs: best-so-far curves overlaid and a results table."""
    rows = []
    for v in views:
        b = v.best
        dollars = v.usage.get("dollars", 0.0)
        rows.append(
            f"<tr class='run'><td><code>{esc(v.record.id)}</code></td><td>{esc(v.record.task_id)}</td>"
            f"<td>{v.record.seed}</td>"
            f"<td>{esc(v.record.state.value)}</td><td>{esc(fmt_score(b.result.score if b else None))}</td>"
            f"<td>{'-' if b is None or b.result.normalized_score is None else f'{b.result.normalized_score:.4f}'}</td>"
            f"<td>{len(v.evaluations)}</td>"
            f"<td>{', '.join(f'{esc(k)} {n}' for k, n in sorted(v.by_status.items()))}</td>"
            f"<td>{dollars:.4g}</td><td>{esc(fmt_duration(v.wall_s))}</td>"
            f"<td>{esc(', '.join(f'{k}: {m}' for k, m in v.models.items()) or '-')}</td></tr>"
        )
    table = ("<table class='grid-table' id='compare-table'><tr><th>run</th><th>task</th><th>seed</th><th>state</th>"
             "<th>best</th><th>normalized</th><th>evaluations</th><th>by status</th><th>dollars</th><th>wall</th>"
             f"<th>models</th></tr>{''.join(rows)}</table>")
    figures = compare_figures(views)
    body = (f"<section><h2>Results</h2>{table}</section><section><h2>Best so far</h2>"
            '<div id="fig-compare-evals" class="plot"></div><div id="fig-compare-wall" class="plot"></div></section>')
    data = {"figures": figures, "candidates": [], "counts": {"evaluations": sum(len(v.evaluations) for v in views),
                                                             "candidates": 0}}
    return _document(f"reasearch: {len(views)} runs compared", f"<h1>{len(views)} runs compared</h1>", body, data,
                     plotly_src=plotly_src)
