"""``reasearch steer`` / ``fork``: a person's interventions on a live run (or on a fleet's or comparison's
members), their history with what followed each, and a new run forked from any stored candidate.

Holds no logic the API lacks: :mod:`reasearch.runs.steering` validates, journals and measures. Bad input is one
line and exit 2 (``ReasearchError`` in :func:`reasearch.cli.main`).
"""

from __future__ import annotations

import argparse
import getpass
import json
from typing import Any

from reasearch._cli._shared import open_store, store_args
from reasearch.errors import ConfigError

__all__ = ["add_parser"]

_VERB_HELP = ("hint TEXT | ban TEXT | pin CANDIDATE | lift N | pause [TEXT] | resume [TEXT] | cap UNIT=VALUE | "
              "stop [TEXT] | list")
_MAIN_UNITS = ("evaluations", "experiments", "student_calls")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "steer", help="steer a live run: hint, pin, ban, lift, pause, resume, cap, stop (or list them)",
        description="Send a person's intervention to a run; its driver applies it at its next step boundary and "
                    "journals the step (a resume or replay applies it at the same step). `list` shows every "
                    "intervention with the score before it and the best within the next N evaluations (and the "
                    "unsteered twin's, for a run forked with --twin). With --member N or --all, RUN is a fleet or "
                    "comparison id.",
        epilog="exit status: 0 sent (or listed); 2 bad input (one line on stderr; nothing is sent)")
    p.add_argument("run", metavar="RUN", help="run id (a unique prefix is enough), or a fleet id with --member/--all")
    p.add_argument("verb", metavar="VERB", help=_VERB_HELP)
    p.add_argument("words", nargs="*", metavar="ARG", help="the verb's argument (a text may be several words)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--member", type=int, metavar="N", help="RUN is a fleet or comparison: steer its member N")
    g.add_argument("--all", action="store_true", help="RUN is a fleet or comparison: steer every running member")
    p.add_argument("--who", default=None, metavar="NAME", help="who asks (default: cli:$USER)")
    p.add_argument("--window", type=int, default=5, metavar="N", help="list: evaluations after each (default 5)")
    p.add_argument("--json", action="store_true", help="print what was sent (or listed) as JSON")
    store_args(p)
    p.set_defaults(func=cmd_steer)

    f = sub.add_parser(
        "fork", help="start a new run from a stored candidate of a run, with its own budget",
        description="Create a run of the same task, seed and driver settings that starts from CANDIDATE of RUN "
                    "with its own budget; `reasearch resume NEW` drives it (an agent's run). --twin also creates "
                    "an identical unsteered twin (it refuses interventions) so `reasearch steer NEW list` can show "
                    "whether a hint helped.",
        epilog="exit status: 0 created; 2 bad input (one line on stderr; nothing is created)")
    f.add_argument("run", metavar="RUN", help="run id (a unique prefix is enough)")
    f.add_argument("--candidate", required=True, metavar="ID", help="a candidate id of RUN (a unique prefix)")
    f.add_argument("--budget", required=True, metavar="N|UNIT=N[,UNIT=N]",
                   help="the fork's caps: N of RUN's main unit (evaluations, experiments or student_calls), or units")
    f.add_argument("--twin", action="store_true", help="also create the unsteered twin (id NEW-twin)")
    f.add_argument("--id", default=None, metavar="NEW", help="the new run's id (default: a new sortable id)")
    f.add_argument("--json", action="store_true", help="print the new ids as JSON")
    store_args(f)
    f.set_defaults(func=cmd_fork)


def _args_of(verb: str, words: list[str]) -> dict[str, Any]:
    """The verb's arguments from the words after it (one line error when they do not fit)."""
    text = " ".join(words)
    if verb in ("hint", "ban"):
        if not words:
            raise ConfigError(f"steer {verb} needs a text: reasearch steer RUN {verb} \"...\"")
        return {"text": text}
    if verb in ("pause", "resume", "stop"):
        return {"text": text} if words else {}
    if verb == "pin":
        if len(words) != 1:
            raise ConfigError("steer pin takes one candidate id (a unique prefix): reasearch steer RUN pin 3f2a9c")
        return {"candidate": words[0]}
    if verb == "lift":
        if len(words) != 1 or not words[0].lstrip("#").isdigit():
            raise ConfigError("steer lift takes the number of a ban or a pin: reasearch steer RUN lift 3")
        return {"ban": int(words[0].lstrip("#"))}
    if verb == "cap":
        pair = words[0].split("=", 1) if len(words) == 1 else words
        if len(pair) != 2:
            raise ConfigError("steer cap takes UNIT=VALUE: reasearch steer RUN cap evaluations=40")
        return {"unit": pair[0], "value": pair[1]}
    from reasearch.runs.steering import VERBS

    raise ConfigError(f"unknown steering verb {verb[:40]!r}; verbs: {', '.join(VERBS)}, list")


def cmd_steer(args: argparse.Namespace) -> int:
    from reasearch.runs import steering

    who = args.who if args.who is not None else f"cli:{_user()}"
    fleet = args.member is not None or args.all
    with open_store(args) as store:
        if args.verb == "list":
            return _list(args, store, fleet)
        params = _args_of(args.verb, list(args.words))
        if fleet:
            sent = steering.submit_fleet(store, args.run, args.verb, params, who,
                                         member=None if args.all else args.member)
        else:
            sent = [steering.submit(store, args.run, args.verb, params, who)]
    if args.json:
        print(json.dumps([i.to_dict() for i in sent], indent=2))
    else:
        for i in sent:
            print(f"run {i.run_id}: {i.describe()} sent; its driver applies it at its next step boundary")
    return 0


def _list(args: argparse.Namespace, store: Any, fleet: bool) -> int:
    from reasearch.runs import steering

    if fleet:
        members = store.fleet_members(args.run)
        run_ids = [members[args.member]] if args.member is not None and args.member in members else (
            [rid for _, rid in sorted(members.items())] if args.all else [])
        if not run_ids:
            raise ConfigError(f"fleet {args.run} has no member {args.member}")
    else:
        run_ids = [store.get_run(args.run).id]
    rows: list[dict[str, Any]] = []
    for rid in run_ids:
        measured = {e.intervention.seq: e for e in steering.effects(store, rid, window=args.window)}
        for i in steering.history(store, rid):
            e = measured.get(i.seq)
            rows.append({**i.to_dict(), "effect": e.to_dict() if e else None})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no interventions")
    for r in rows:
        i = steering.Intervention.from_dict(r)
        where = "pending" if i.applied_step is None else f"applied at step {i.applied_step}"
        line = f"run {i.run_id}: {i.describe()} at {i.at}, {where}"
        e = r["effect"]
        if e is not None:
            line += (f"; best before {_num(e['score_before'])}, best of the next {e['evaluations_after']} "
                     f"evaluations {_num(e['best_after'])}")
            if e["twin_run"]:
                line += f"; unsteered twin: {_num(e['twin_before'])} then {_num(e['twin_after'])}"
        print(line)
    return 0


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container)
        return "unknown"


def _budget_of(text: str, source_budget: dict[str, float]) -> dict[str, float]:
    """``N`` (of the source run's main unit) or ``UNIT=N[,UNIT=N]``."""
    text = text.strip()
    try:
        if "=" not in text:
            unit = next((u for u in _MAIN_UNITS if u in source_budget), "evaluations")
            return {unit: float(text)}
        out = {}
        for part in text.split(","):
            unit, _, value = part.partition("=")
            out[unit.strip()] = float(value)
        return out
    except ValueError:
        raise ConfigError(f"--budget takes N or UNIT=N[,UNIT=N], not {text[:60]!r}") from None


def cmd_fork(args: argparse.Namespace) -> int:
    from reasearch.runs import steering

    with open_store(args) as store:
        try:
            source = store.get_run(args.run)
        except Exception as exc:  # StoreError: a one-line message
            raise ConfigError(str(exc)) from None
        new = steering.fork(store, source.id, args.candidate, _budget_of(args.budget, dict(source.budget)),
                            twin=args.twin, new_id=args.id)
        twin = steering.fork_info(store.get_run(new).config).get("twin")
    flag = f" --store {args.store}" if args.store else (f" --run-dir {args.run_dir}" if args.run_dir else "")
    if args.json:
        print(json.dumps({"run": new, "twin": twin, "of": source.id}, indent=2))
        return 0
    print(f"forked run {source.id} at candidate {args.candidate} as run {new}"
          + (f" (unsteered twin: {twin})" if twin else ""))
    drive = "reasearch resume" if source.config.get("driver") == "agent" else "reasearch.methods.open_method"
    for rid in [new, *([twin] if twin else [])]:
        print(f"  drive it: {drive} {rid}{flag}" if drive == "reasearch resume" else
              f"  drive it from Python: {drive}({rid!r}, store=reasearch.runs.open_store(...)).optimize()")
    return 0
