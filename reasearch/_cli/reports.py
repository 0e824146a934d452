"""``reasearch report RUN`` (one self-contained HTML file), ``reasearch report --compare RUN...`` and
``reasearch serve`` (the live dashboard)."""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
from pathlib import Path

from reasearch._cli._shared import open_store, store_args
from reasearch.errors import ConfigError

TOKEN_ENV = "REASEARCH_SERVE_TOKEN"
STEER_TOKEN_ENV = "REASEARCH_STEER_TOKEN"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="one run (or several, --compare) as a self-contained HTML report",
                       description="Write a run's report: summary, score curves, best solution drawn, candidate "
                                   "lineage, ledger, lessons.md, compactions and the transcript, in one HTML file "
                                   "that opens offline. With --compare: several runs' curves overlaid and a table.")
    p.add_argument("runs", nargs="*", metavar="RUN", help="run id (a unique prefix is enough; default: the latest run)")
    p.add_argument("--compare", action="store_true", help="compare the runs given (curves overlaid, results table)")
    p.add_argument("--task", metavar="PATTERN", action="append",
                   help="with --compare: also every run whose task id matches PATTERN (shell-style, e.g. "
                        "'circle_packing/*': a fleet of tasks x seeds x models); repeatable")
    p.add_argument("-o", "--output", type=Path, metavar="FILE",
                   help="where to write (default: report-RUN.html, or compare.html)")
    store_args(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("serve", help="a live dashboard over a run store (read only unless --steer)",
                       description="Serve every run of a store, grouped by task, fleet or method (normalized "
                                   "scores, sparklines, state, spend; filters as query parameters), each run's "
                                   "report with its running experiments and lessons file, and each fleet's "
                                   "comparison, updated live as evaluations land. Binds 127.0.0.1 unless told "
                                   "otherwise; any other address needs an access token.")
    store_args(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    p.add_argument("--token", help=f"access token required on every request (default: ${TOKEN_ENV}); "
                                   "needed to bind a non-loopback address")
    p.add_argument("--poll", type=float, default=0.5, metavar="S", help="seconds between looks at the store")
    p.add_argument("--steer", action="store_true",
                   help="also take interventions (hint, pin, ban, pause, cap, stop, fork) from each run page's "
                        f"steering panel; every write needs a write token, made at start and printed once (or "
                        f"${STEER_TOKEN_ENV}), which is never put in a URL")
    p.set_defaults(func=cmd_serve)


def cmd_report(args: argparse.Namespace) -> int:
    from reasearch.reports import build_compare, build_report

    if len(args.runs) > 1 and not args.compare:
        raise ConfigError("several runs given: add --compare to compare them, or give one run")
    if args.task and not args.compare:
        raise ConfigError("--task selects runs to compare: add --compare")
    if not args.runs and not args.task and args.compare:
        raise ConfigError("--compare needs run ids and/or --task PATTERN")
    if args.output is not None and not args.output.parent.is_dir():  # before the report is built
        raise ConfigError(f"cannot write {args.output}: the folder {args.output.parent} does not exist (create it, "
                          "or give -o a file in an existing folder)")
    with open_store(args) as store:
        if args.compare:
            ids = [store.get_run(r).id for r in args.runs]
            for pattern in args.task or []:
                matched = [r.id for r in store.list_runs() if fnmatch.fnmatchcase(r.task_id, pattern)]
                if not matched:
                    raise ConfigError(f"no run in {store.display_url} has a task id matching {pattern!r}")
                ids += [i for i in matched if i not in ids]
            text = build_compare(store, ids)
            out = args.output or Path("compare.html")
        else:
            if args.runs:
                rec = store.get_run(args.runs[0])
            else:  # no id: the latest run of the store (what the README's first minutes show)
                runs = store.list_runs()
                if not runs:
                    raise ConfigError(f"no run in {store.display_url} yet: `reasearch optimize TASK_ID` makes one")
                rec = max(runs, key=lambda r: r.created_at)
                print(f"reasearch: the latest run, {rec.id} ({rec.task_id})", file=sys.stderr)
            text = build_report(store, rec.id)
            out = args.output or Path(f"report-{rec.id}.html")
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB; opens offline)", file=sys.stderr)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from reasearch.reports.serve import check_bind, serve

    token = args.token or os.environ.get(TOKEN_ENV) or None
    check_bind(args.host, token)  # before the store is opened: a refused bind touches nothing
    steer_token = None
    if args.steer:
        import secrets

        from reasearch.reports.steer_web import check_steer_token

        steer_token = os.environ.get(STEER_TOKEN_ENV) or secrets.token_urlsafe(24)
        check_steer_token(steer_token)
        if token is not None and steer_token == token:
            raise ConfigError(f"${STEER_TOKEN_ENV} equals the read token: a person who can read the dashboard could "
                              "steer; give them different values")
    from reasearch._cli._port import check_port_free

    check_port_free(args.host, args.port)  # a busy port: one line, exit 2 (not uvicorn's raw error)
    with open_store(args) as store:
        host = f"[{args.host}]" if ":" in args.host else args.host
        print(f"dashboard of {store.display_url} on http://{host}:{args.port}/"
              + ("?token=..." if token else "") + " (Ctrl-C stops it)", file=sys.stderr)
        if steer_token is not None:
            made = "" if os.environ.get(STEER_TOKEN_ENV) else f": {steer_token}"
            print(f"steering is on; the write token{made or ' is $' + STEER_TOKEN_ENV} (paste it in a run page's "
                  "steering panel, or send it in the X-Reasearch-Steer-Token header)", file=sys.stderr)
        serve(store, host=args.host, port=args.port, token=token, poll_interval_s=args.poll, steer_token=steer_token)
    return 0


__all__ = ["add_parser", "cmd_report", "cmd_serve"]
