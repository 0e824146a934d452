"""``reasearch optimize`` / ``resume`` / ``replay`` / ``lessons``: run the agent on a task, resume a run,
replay one, gather lessons of finished runs into a library."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from reasearch._cli._params import key_values
from reasearch._cli._track import add_track_arg, check_track, tracking
from reasearch.engine.waits import set_owner
from reasearch.errors import ConfigError, ModelError, StoreError

if TYPE_CHECKING:
    from reasearch.runs import Budget

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 3
EXIT_CTRL_C = 130  # as the shell reports a process ended by SIGINT
DEFAULT_MAX_TOKENS = 10_000_000  # every run has a token cap: a model that loops on text cannot spend without end
_EXITS = ("exit status: 0 a final candidate was chosen; 1 the run ended without an OK candidate (or replay found a "
          "divergence); 2 bad input or configuration, nothing run; 3 the run was interrupted (model endpoint "
          "failure after its retries): it is saved, and the command on stderr resumes it")


def _model_args(p: argparse.ArgumentParser, *, resume: bool) -> None:
    """The model options, shared by ``optimize`` and ``resume`` (on resume: None = as recorded)."""
    g = p.add_argument_group("models" + (" (default: as recorded in the run; a change is recorded)" if resume else ""))
    g.add_argument("--model", default=None if resume else "claude-sonnet-4-6", metavar="M[,FALLBACK]",
                   help="agent model: NAME (Anthropic), anthropic/NAME, openai/NAME (with --base-url) or "
                        "scripted/FILE.json; with ',FALLBACK' a second model takes a turn the first fails"
                        + ("" if resume else " (default: %(default)s)"))
    g.add_argument("--editor-model", metavar="M[,FALLBACK]",
                   help="model of edit_code; with ',FALLBACK' a cheap editor first and, when its edit has no code, "
                        "does not compile, lacks the entry point or does not import, FALLBACK redoes it "
                        "(default: --model)")
    g.add_argument("--summarizer-model", metavar="M[,FALLBACK]",
                   help="model of compaction summaries, optionally with a fallback (default: --model)")
    g.add_argument(
        "--base-url",
        metavar="URL",
        help="endpoint of the models (an OpenAI-compatible /v1 URL for openai/...)"
        + ("; needed to move a run to another endpoint than the one it recorded" if resume else ""),
    )
    g.add_argument("--max-output-tokens", type=int, default=None if resume else 8192, metavar="N",
                   help="output tokens per reply")
    g.add_argument("--temperature", type=float, help="sampling temperature")
    g.add_argument(
        "--price-in", type=float, metavar="USD", help="USD per million input tokens (models without a list price)"
    )
    g.add_argument("--price-out", type=float, metavar="USD", help="USD per million output tokens")
    g.add_argument("--retries", type=int, default=None if resume else 6, metavar="N",
                   help="attempts per model call on overload, rate limits, refused connections and malformed "
                        "answers" + ("" if resume else " (default %(default)s)"))


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("optimize", help="run the agent on a task", epilog=_EXITS,
                       description="Run the agent on a task: it evaluates, edits and decides when to stop.")
    p.add_argument("task_id", metavar="TASK_ID", help="registry id, e.g. heilbronn/n11-v1")
    _model_args(p, resume=False)
    p.add_argument(
        "--budget",
        type=int,
        default=50,
        metavar="N",
        help="evaluations the agent may spend (default 50; experiments for training tasks)",
    )
    p.add_argument("--max-dollars", type=float, metavar="USD", help="dollar cap on model calls")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, metavar="N",
                   help="cap on model tokens, input + output (default %(default)s; the summary states it)")
    p.add_argument("--max-turns", type=int, default=200, metavar="N", help="model turns (default 200)")
    p.add_argument("--max-turns-without-tools", type=int, default=5, metavar="N",
                   help="stop after N replies in a row that call no tool; the model is warned the turn before "
                        "(default %(default)s)")
    p.add_argument("--max-wall", type=float, metavar="S", help="active wall seconds")
    p.add_argument(
        "--compact-at", type=int, default=90_000, metavar="TOKENS", help="compaction threshold (default 90000)"
    )
    p.add_argument("--run-dir", default="runs", metavar="D", help="run directory (default ./runs)")
    p.add_argument("--store", metavar="URL", help="run store (postgresql://... to share one with other machines; "
                                                   "default: store.sqlite in --run-dir)")
    p.add_argument("--executor", default="local", metavar="local|ray[=ADDRESS]",
                   help="where evaluations run: the local warm pool, or Ray (ray=HOST:PORT joins a cluster)")
    p.add_argument("--lessons", metavar="F", help="preload lessons.md from F (an earlier run's, or a library from "
                                                  "`reasearch lessons collect`)")
    p.add_argument("--seed", type=int, default=0, help="the run's seed")
    p.add_argument(
        "-p", "--param", action="append", default=[], metavar="KEY=VALUE", help="task parameter (repeatable)"
    )
    p.add_argument("--sandbox", choices=("auto", "nsjail", "process"), default="auto",
                   help="sandbox mode of python_exec and bash")
    p.add_argument("--quiet", action="store_true", help="no progress display (the summary is still printed)")
    p.add_argument("--student", metavar="MODEL", help="prompt tasks: the student, openai/NAME or anthropic/NAME")
    p.add_argument(
        "--student-base-url", metavar="URL", help="prompt tasks: the student's endpoint (OpenAI-compatible .../v1)"
    )
    p.add_argument("--student-calls", type=int, default=5000, metavar="N",
                   help="prompt tasks: student calls the agent may spend (default 5000; replaces --budget)")
    p.add_argument("--student-tokens", type=int, default=None, metavar="N",
                   help="prompt tasks: cap on the student's tokens, input + output (default: none; counted apart "
                        "from the agent's --max-tokens)")
    add_track_arg(p)
    p.set_defaults(func=optimize)

    r = sub.add_parser("resume", help="resume an agent run", epilog=_EXITS,
                       description="Resume an interrupted agent run: recorded steps replay without spending budget, "
                                   "then the agent continues live. It refuses to send the run to another endpoint "
                                   "than the one it recorded unless --base-url says so.")
    r.add_argument("run_id", metavar="RUN", help="run id (or a unique prefix)")
    r.add_argument("--run-dir", default="runs", metavar="D", help="run directory (default ./runs)")
    r.add_argument("--store", metavar="URL", help="the run store the run was started with (default: --run-dir's)")
    r.add_argument("--executor", default="local", metavar="local|ray[=ADDRESS]", help="where evaluations run")
    _model_args(r, resume=True)
    r.add_argument("--quiet", action="store_true", help="no progress display (the summary is still printed)")
    r.set_defaults(func=resume)

    y = sub.add_parser("replay", help="replay an agent run and report divergences",
                       description="Re-run a run's recorded model replies through the current harness (tools and "
                                   "evaluations live) and report any divergence in scores, statuses or file-tool "
                                   "results. Output of bash and python_exec that differs is reported as "
                                   "information (--strict: as a divergence).")
    y.add_argument("run_id", metavar="RUN", help="run id (or a unique prefix)")
    y.add_argument("--run-dir", default="runs", metavar="D", help="run directory (default ./runs)")
    y.add_argument("--into", metavar="DIR", help="where the replayed run is stored (default: a temporary directory)")
    y.add_argument("--strict", action="store_true", help="command output (bash, python_exec) must match too")
    y.add_argument("--json", action="store_true", help="print the report as JSON")
    y.set_defaults(func=replay)

    lp = sub.add_parser("lessons", help="gather the lessons of finished runs into one library",
                        description="Lessons libraries: the lessons.md of finished agent runs, deduplicated, each "
                                    "with its run and the score gain it came with; load one with "
                                    "`reasearch optimize --lessons FILE`.")
    ls = lp.add_subparsers(dest="lessons_command", metavar="COMMAND")
    ls.required = True
    c = ls.add_parser("collect", help="collect the lessons of the finished runs of tasks matching a prefix")
    c.add_argument(
        "task_prefix", metavar="TASK_PREFIX", help="task id prefix, e.g. heilbronn/ or circle_packing/n26-v1"
    )
    c.add_argument("--run-dir", default="runs", metavar="D", help="run directory (default ./runs)")
    c.add_argument("-o", "--output", metavar="FILE", help="write the library to FILE (default: stdout)")
    c.set_defaults(func=lessons_collect)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The spec fields the model options set (on resume, only the ones given)."""
    out = {"base_url": args.base_url, "max_tokens": args.max_output_tokens, "temperature": args.temperature,
           "price_in": args.price_in, "price_out": args.price_out, "attempts": args.retries}
    return {k: v for k, v in out.items() if v is not None}


def _role_specs(text: str, args: argparse.Namespace) -> tuple[Any, Any]:
    """``M`` or ``CHEAP,FALLBACK`` -> (spec, fallback spec or None)."""
    from reasearch.agent import ModelSpec

    names = [t.strip() for t in text.split(",")]
    if len(names) > 2 or not all(names):
        raise ConfigError(f"a role takes MODEL or CHEAP,FALLBACK, not {text!r}")
    specs = [ModelSpec.parse(n, **_overrides(args)) for n in names]
    return specs[0], (specs[1] if len(specs) == 2 else None)


def _specs(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """Model and fallback specs per role named on the command line."""
    models: dict[str, Any] = {}
    fallbacks: dict[str, Any] = {}
    for role, text in (("agent", args.model), ("editor", args.editor_model), ("summarizer", args.summarizer_model)):
        if text:
            models[role], fb = _role_specs(text, args)
            if fb is not None:
                fallbacks[role] = fb
    return models, fallbacks


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _store_hint(exc: StoreError, resume: str) -> str:
    """The store's one line with its resume placeholder filled in: the command that continues this run."""
    return _one_line(str(exc)).replace("reasearch resume RUN", resume)


def _run_agent(agent: Any, console: Console, quiet: bool, title: str, run_dir: str) -> int:
    from reasearch.agent.console import RunConsole, summary_lines
    from reasearch.errors import ModelError

    resume = f"reasearch resume {agent.run.id} --run-dir {shlex.quote(str(run_dir))}"
    try:
        if quiet:
            result = agent.optimize()
        else:
            with RunConsole(console, agent, title) as display:
                agent.on_progress = display
                result = agent.optimize()
    except ModelError as exc:  # the run is marked interrupted with the reason; one line, then exit 3
        print(f"reasearch: interrupted: {_one_line(str(exc))[:600]}; the run is saved: `{resume}` continues it",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:  # one line (the command's own), not a second from the top level
        print(f"reasearch: interrupted by the user; the run is saved: `{resume}` continues it", file=sys.stderr)
        return EXIT_CTRL_C
    except StoreError as exc:  # the disk full, the database gone: exit 2 as every store error, the run named
        print(f"reasearch: {_store_hint(exc, resume)}", file=sys.stderr)
        return EXIT_USAGE
    for line in summary_lines(agent, result, run_dir, agent.final_files):
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    return EXIT_OK if result.final_candidate else EXIT_FAILED


def _check_models(config: Any) -> None:
    """Every model the run would call: its client library is installed and its endpoint answers."""
    from reasearch.models.probe import check_model

    specs = [(role, spec) for role, spec in config.models.items()]
    specs += [(f"{role} fallback", spec) for role, spec in config.fallbacks.items()]
    for role, spec in specs:
        check_model(spec, role=role)


def _executor(text: str) -> Any:
    """``local`` (None: the run's default local pool) or a RayExecutor for ``ray`` / ``ray=ADDRESS``."""
    kind, _, address = text.partition("=")
    if kind == "local" and not address:
        return None
    if kind != "ray":
        raise ConfigError(f"--executor is local, ray or ray=ADDRESS, not {text!r}")
    from reasearch.runs import RayExecutor

    return RayExecutor(address=address or None)


def optimize(args: argparse.Namespace) -> int:
    from reasearch._cli._shared import student_params
    from reasearch.agent import AgentConfig, build_model
    from reasearch.agent.launch import check_budget
    from reasearch.evaluators import make
    from reasearch.evaluators.kinds import PromptKind, RepositoryKind, task_kind
    from reasearch.runs import Budget, Unit

    check_track(args)  # a missing tracker package: one line, exit 2, no run made
    params = key_values(args.param)
    task = make(args.task_id, **params)  # an unknown id or parameter fails here, before anything is built
    prompt_task = isinstance(task_kind(task), PromptKind)
    if prompt_task:  # the same task with its student
        params.update(student_params(args, "student_base_url"))
        task = make(args.task_id, **params)
    if isinstance(kind := task_kind(task), PromptKind):
        student = kind.task.student_spec()  # no student: one line, exit 2, no run made
        kind.task.splits()  # missing data: one line, exit 2, no run made
        from reasearch.models.probe import check_endpoint

        # A dead student endpoint: one line, exit 2, no run made (as for the agent's endpoint below).
        check_endpoint(student.url, role=f"student {student.name}", flag="--student-base-url")
    elif args.student:
        raise ConfigError(f"--student is for prompt tasks; {args.task_id} evaluates programs")
    preflight = getattr(task, "preflight", None)
    if callable(preflight):  # a task folder whose seed or score.py fails: one line, exit 2, no run made
        preflight(seed=args.seed)
    # --budget counts what one evaluation costs: training tasks (a repository candidate) spend experiments.
    unit = "experiments" if isinstance(kind, RepositoryKind) else "evaluations"
    budget: dict[str, float] = {"student_calls": args.student_calls} if prompt_task else {unit: args.budget}
    if args.student_tokens is not None:
        if not prompt_task:
            raise ConfigError(f"--student-tokens is for prompt tasks; {args.task_id} evaluates programs")
        budget["student_tokens"] = args.student_tokens
    if args.max_dollars is not None:
        budget["dollars"] = args.max_dollars
    if args.max_tokens is not None:
        budget["tokens"] = args.max_tokens
    caps = Budget.from_dict(budget)  # parsed once, here: the run gets this Budget and stores its plain form
    check_budget(caps)  # --budget 0: refused before a model is built or called (checked once: not again later)
    specs, fallbacks = _specs(args)
    config = AgentConfig(models=specs, fallbacks=fallbacks, max_turns=args.max_turns, max_wall_s=args.max_wall,
                         max_turns_without_tools=args.max_turns_without_tools,
                         compact_threshold_tokens=args.compact_at, sandbox_mode=args.sandbox)
    models = {role: build_model(spec) for role, spec in specs.items()}  # no key: one line, exit 2, no run made
    models.update({f"{role}:fallback": build_model(spec) for role, spec in fallbacks.items()})
    if caps.cap(Unit.DOLLARS) is not None:  # a configuration error first: it needs no endpoint to be found
        from reasearch.agent.model_calls import require_prices

        require_prices(config)
    _check_models(config)  # a missing client library or a silent endpoint: one line, exit 2, no run made
    lessons = Path(args.lessons).read_text() if args.lessons else None
    console = Console(stderr=True)
    from reasearch.runs import open_store

    store = open_store(args.store) if args.store else None
    executor = _executor(args.executor)
    try:
        return _optimize(args, console, caps, config, params, models, lessons, store, executor)
    finally:
        if executor is not None:  # a Ray executor this command started (and Ray with it) ends with it
            executor.close()


def _optimize(args: argparse.Namespace, console: Console, budget: Budget, config: Any,
              params: dict[str, Any], models: dict[str, Any], lessons: str | None, store: Any, executor: Any) -> int:
    from reasearch.agent.launch import start_checked_run

    # optimize() checked the budget and the prices, each once, where it reports them
    agent = start_checked_run(args.task_id, budget=budget, config=config, run_dir=args.run_dir,
                              task_params=params, seed=args.seed, models=models, lessons=lessons, store=store,
                              executor=executor)
    console.print(f"run {agent.run.id} on {args.task_id} (workspace {agent.workspace.root})", highlight=False,
                  soft_wrap=True)
    set_owner(f"run {agent.run.id}")  # a slot this process leases names the run to whoever waits for it
    with tracking(args, lambda: agent.run.store.url, lambda store: [(agent.run.id, "", "agent")]):
        code = _run_agent(agent, console, args.quiet, f"reasearch optimize {args.task_id}", args.run_dir)
    for event in agent.run.events(kind="test_result"):  # prompt tasks: scored by the trusted side at finish
        res = event.payload["result"]
        console.print(f"test split (sealed, scored by the harness): status {res['status']}, accuracy "
                      f"{res['score']} on {res['metrics'].get('n')} examples; `reasearch test {agent.run.id[:12]} "
                      f"--run-dir {args.run_dir}` repeats it", highlight=False, soft_wrap=True)
    return code


def resume(args: argparse.Namespace) -> int:
    from dataclasses import replace as dc_replace

    from reasearch.agent.launch import effective_config, open_existing_store
    from reasearch.runs import Run, RunState

    console = Console(stderr=True)
    store = open_existing_store(args.store or args.run_dir)  # a mistyped location is an error, never a new store
    run = Run.open(store, args.run_id)
    if run.state is RunState.FINISHED:
        console.print(f"run {run.id} is already finished; nothing to resume", highlight=False)
        return EXIT_OK
    specs, fallbacks = _specs(args)
    overrides = _overrides(args)
    model_specs = None
    if specs or overrides:  # the flags change the recorded specs; roles not named keep theirs, with the overrides
        recorded = effective_config(run)
        model_specs = {role: dc_replace(spec, **overrides) for role, spec in recorded.models.items()}
        model_specs.update(specs)
        fallbacks = {**{role: dc_replace(spec, **overrides) for role, spec in recorded.fallbacks.items()}, **fallbacks}
    executor = _executor(args.executor)
    try:
        return _resume(args, console, run, store, model_specs, fallbacks, executor)
    finally:
        if executor is not None:
            executor.close()


def _resume(args: argparse.Namespace, console: Console, run: Any, store: Any, model_specs: Any, fallbacks: Any,
            executor: Any) -> int:
    from reasearch.agent import open_agent

    if run.config.get("driver") == "method":  # a method's run (a fork of one): its own runner, as recorded
        return _resume_method(console, run, store, executor)
    agent = open_agent(run.id, run_dir=args.run_dir, store=store, model_specs=model_specs, executor=executor,
                       fallbacks=fallbacks if model_specs else None, allow_endpoint_change=args.base_url is not None)
    _check_models(agent.config)
    set_owner(f"run {agent.run.id}")
    console.print(f"resuming run {agent.run.id} ({run.state.value}; {agent.journal.last_recorded + 1} steps recorded)",
                  highlight=False, soft_wrap=True)
    agent.run.resume()  # this process drives the run now (state running, heartbeat)
    return _run_agent(agent, console, args.quiet, f"reasearch resume {agent.run.id[:12]}", args.run_dir)


def _resume_method(console: Console, run: Any, store: Any, executor: Any) -> int:
    from reasearch.methods import open_method

    runner = open_method(run.id, store=store, executor=executor)
    console.print(f"resuming {runner.method} run {run.id} ({run.state.value})", highlight=False, soft_wrap=True)
    try:
        result = runner.optimize()
    except ModelError as exc:
        print(f"reasearch: interrupted: {_one_line(str(exc))[:600]}; the run is saved: `reasearch resume {run.id}` "
              "continues it", file=sys.stderr)
        return EXIT_INTERRUPTED
    except StoreError as exc:
        print(f"reasearch: {_store_hint(exc, f'reasearch resume {run.id}')}", file=sys.stderr)
        return EXIT_USAGE
    score = "none" if result.final_score is None else f"{result.final_score:.12g}"
    console.print(f"run {result.run_id} finished ({result.method}): best {score}; {result.reason}",
                  highlight=False, soft_wrap=True, markup=False)
    return EXIT_OK if result.final_candidate else EXIT_FAILED


def replay(args: argparse.Namespace) -> int:
    from reasearch.agent import replay_run

    report = replay_run(args.run_id, run_dir=args.run_dir, replay_dir=args.into, strict=args.strict)
    if args.json:
        print(json.dumps({
            "run_id": report.run_id, "replay_run_id": report.replay_run_id, "replay_dir": report.replay_dir,
            "steps_compared": report.steps_compared, "tool_results_compared": report.tool_results_compared,
            "evaluations_compared": report.evaluations_compared, "ok": report.ok, "error": report.error,
            "strict": args.strict,
            "divergences": [{"step": d.step, "what": d.what, "recorded": d.recorded, "replayed": d.replayed}
                            for d in report.divergences],
            "differences": [{"step": d.step, "what": d.what, "recorded": d.recorded, "replayed": d.replayed}
                            for d in report.differences]}, indent=2))
    else:
        console = Console()
        console.print(
            f"replayed run {report.run_id} as {report.replay_run_id} in {report.replay_dir}: "
            f"{report.tool_results_compared} tool results ({report.evaluations_compared} evaluations) compared",
            soft_wrap=True,
            highlight=False,
        )
        if report.error:
            console.print(f"[red]{report.error}[/red]")
        for title, rows in ((f"{len(report.divergences)} divergence(s)", report.divergences),
                            (f"{len(report.differences)} command output difference(s) (information only)",
                             report.differences)):
            if rows:
                t = Table(title=title)
                for col in ("step", "what", "recorded", "replayed"):
                    t.add_column(col)
                for d in rows:
                    t.add_row(str(d.step), d.what, d.recorded[:200], d.replayed[:200])
                console.print(t)
        if not report.divergences and not report.error:
            console.print("no divergence: every score, status and file-tool result matches the record")
    return EXIT_OK if report.ok else EXIT_FAILED


def lessons_collect(args: argparse.Namespace) -> int:
    from reasearch.agent.launch import open_existing_store
    from reasearch.agent.lessons import collect_lessons, render_library

    store = open_existing_store(args.run_dir)
    lessons, runs = collect_lessons(store, args.task_prefix, run_dir=args.run_dir)
    text = render_library(lessons, args.task_prefix, runs)
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {len(lessons)} lessons from {len(runs)} finished runs to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK if lessons else EXIT_FAILED
