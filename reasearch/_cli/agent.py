"""``reasearch optimize`` / ``resume`` / ``replay``: run the agent on a task, resume a run, replay one."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from reasearch.errors import ConfigError

EXIT_OK, EXIT_FAILED = 0, 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("optimize", help="run the agent on a task",
                       description="Run the agent on a task: it evaluates, edits and decides when to stop.")
    p.add_argument("task_id", metavar="TASK_ID", help="registry id, e.g. heilbronn/n11-v1")
    p.add_argument("--model", default="claude-sonnet-4-6",
                   help="agent model: NAME (Anthropic), anthropic/NAME, openai/NAME (with --base-url) or "
                        "scripted/FILE.json (default: %(default)s)")
    p.add_argument("--editor-model", metavar="M", help="model of edit_code (default: --model)")
    p.add_argument("--summarizer-model", metavar="M", help="model of compaction summaries (default: --model)")
    p.add_argument("--base-url", metavar="URL", help="endpoint of the models (an OpenAI-compatible /v1 URL for openai/...)")
    p.add_argument("--max-output-tokens", type=int, default=8192, metavar="N", help="output tokens per reply")
    p.add_argument("--temperature", type=float, help="sampling temperature")
    p.add_argument("--price-in", type=float, metavar="USD", help="USD per million input tokens (models without a list price)")
    p.add_argument("--price-out", type=float, metavar="USD", help="USD per million output tokens")
    p.add_argument("--budget", type=int, default=50, metavar="N", help="evaluations the agent may spend (default 50; experiments for training tasks)")
    p.add_argument("--max-dollars", type=float, metavar="USD", help="dollar cap on model calls")
    p.add_argument("--max-tokens", type=int, metavar="N", help="cap on model tokens (input + output)")
    p.add_argument("--max-turns", type=int, default=200, metavar="N", help="model turns (default 200)")
    p.add_argument("--max-wall", type=float, metavar="S", help="active wall seconds")
    p.add_argument("--compact-at", type=int, default=90_000, metavar="TOKENS", help="compaction threshold (default 90000)")
    p.add_argument("--run-dir", default="runs", metavar="D", help="run directory (default ./runs)")
    p.add_argument("--lessons", metavar="F", help="preload lessons.md from F (e.g. an earlier run's)")
    p.add_argument("--seed", type=int, default=0, help="the run's seed")
    p.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE", help="task parameter (repeatable)")
    p.add_argument("--sandbox", choices=("auto", "nsjail", "process"), default="auto",
                   help="sandbox mode of python_exec and bash")
    p.add_argument("--quiet", action="store_true", help="no live display")
    p.set_defaults(func=optimize)

    r = sub.add_parser("resume", help="resume an agent run", description="Resume an interrupted agent run: "
                       "recorded steps replay without spending budget, then the agent continues live.")
    r.add_argument("run_id", metavar="RUN", help="run id (or a unique prefix)")
    r.add_argument("--run-dir", default="runs", metavar="D", help="run directory (default ./runs)")
    r.add_argument("--quiet", action="store_true", help="no live display")
    r.set_defaults(func=resume)

    y = sub.add_parser("replay", help="replay an agent run and report divergences",
                       description="Re-run a run's recorded model replies through the current harness (tools and "
                                   "evaluations live) and report any divergence in tool results or scores.")
    y.add_argument("run_id", metavar="RUN", help="run id (or a unique prefix)")
    y.add_argument("--run-dir", default="runs", metavar="D", help="run directory (default ./runs)")
    y.add_argument("--into", metavar="DIR", help="where the replayed run is stored (default: a temporary directory)")
    y.add_argument("--json", action="store_true", help="print the report as JSON")
    y.set_defaults(func=replay)


def _params(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"-p takes KEY=VALUE, not {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _spec(text: str, args: argparse.Namespace) -> Any:
    from reasearch.agent import ModelSpec

    return ModelSpec.parse(text, base_url=args.base_url, max_tokens=args.max_output_tokens, temperature=args.temperature,
                           price_in=args.price_in, price_out=args.price_out)


class _Display:
    """The live line: turn, budget left, best score, last tool."""

    def __init__(self, console: Console, title: str) -> None:
        self.console, self.title = console, title
        self.live: Live | None = None

    def table(self, p: Any) -> Table:
        t = Table(title=self.title, show_header=True, header_style="bold")
        for col in ("turn", "step", "evaluations left", "dollars left", "best score", "last tool", "context"):
            t.add_column(col)
        left = {getattr(k, "value", str(k)): v for k, v in p.remaining.items()}
        ev = left.get("evaluations")
        usd = left.get("dollars")
        t.add_row(str(p.turn), str(p.step), "-" if ev is None else f"{ev:g}", "-" if usd is None else f"${usd:.2f}",
                  "-" if p.best_score is None else f"{p.best_score:.10g}", p.last_tool or "-", f"~{p.context_tokens} tok")
        return t

    def __call__(self, progress: Any) -> None:
        if self.live is not None:
            self.live.update(self.table(progress))

    def __enter__(self) -> _Display:
        self.live = Live(console=self.console, refresh_per_second=4, transient=False)
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)
            if not self.console.is_terminal:  # a redirected Live leaves its last frame without a newline
                self.console.print()


def _report(console: Console, result: Any, run_dir: str) -> int:
    console.print(f"run {result.run_id}: {result.state}; final candidate "
                  f"{(result.final_candidate or 'none')[:12]} score {result.final_score} (chosen by {result.chosen_by})")
    console.print(f"why: {result.reason}")
    console.print(f"workspace: {Path(run_dir) / result.run_id / 'workspace'}   resume/replay: reasearch replay {result.run_id} --run-dir {run_dir}")
    return EXIT_OK if result.final_candidate else EXIT_FAILED


def _check_reachable(console: Console, workspace: Path) -> None:
    """Warns when the sandbox uid cannot reach the workspace (python_exec and bash would fail there)."""
    blocked = [p for p in reversed(workspace.resolve().parents) if p.exists() and not p.stat().st_mode & 0o001]
    if blocked and os.geteuid() == 0:
        console.print(f"[yellow]warning: {blocked[0]} is not searchable by other users, so the sandbox cannot reach "
                      f"the workspace: python_exec and bash will fail. Use a --run-dir under /var/tmp, or "
                      f"`chmod o+x {blocked[0]}`.[/yellow]")


def _run_agent(agent: Any, console: Console, quiet: bool, title: str) -> Any:
    from reasearch.errors import ModelError

    _check_reachable(console, agent.workspace.root)
    hint = f"the run is saved: `reasearch resume {agent.run.id} --run-dir {agent.root.parent}` continues it"
    try:
        if quiet:
            return agent.optimize()
        with _Display(console, title) as display:
            agent.on_progress = display
            return agent.optimize()
    except ModelError as exc:
        raise ModelError(f"{exc} ({hint})") from exc
    except KeyboardInterrupt:
        console.print(hint)
        raise


def optimize(args: argparse.Namespace) -> int:
    from reasearch.agent import AgentConfig, build_model, start_run
    from reasearch.evaluators import make

    params = _params(args.param)
    task = make(args.task_id, **params)  # an unknown id or parameter fails here, before anything is built
    specs = {"agent": _spec(args.model, args)}
    if args.editor_model:
        specs["editor"] = _spec(args.editor_model, args)
    if args.summarizer_model:
        specs["summarizer"] = _spec(args.summarizer_model, args)
    config = AgentConfig(models=specs, max_turns=args.max_turns, max_wall_s=args.max_wall,
                         compact_threshold_tokens=args.compact_at, sandbox_mode=args.sandbox)
    models = {role: build_model(spec) for role, spec in specs.items()}  # no key: one line, exit 2, no run made
    lessons = Path(args.lessons).read_text() if args.lessons else None
    # --budget counts what one evaluation costs: training tasks (a repository candidate) spend experiments.
    unit = "experiments" if getattr(task, "candidate_kind", "program") == "repository" else "evaluations"
    budget: dict[str, float] = {unit: args.budget}
    if args.max_dollars is not None:
        budget["dollars"] = args.max_dollars
    if args.max_tokens is not None:
        budget["tokens"] = args.max_tokens
    console = Console(stderr=True)
    agent = start_run(args.task_id, budget=budget, config=config, run_dir=args.run_dir, task_params=params,
                      seed=args.seed, models=models, lessons=lessons)
    console.print(f"run {agent.run.id} on {args.task_id} (workspace {agent.workspace.root})")
    return _report(console, _run_agent(agent, console, args.quiet, f"reasearch optimize {args.task_id}"), args.run_dir)


def resume(args: argparse.Namespace) -> int:
    from reasearch.agent import open_agent
    from reasearch.runs import Run, RunState

    console = Console(stderr=True)
    agent = open_agent(args.run_id, run_dir=args.run_dir)
    assert isinstance(agent.run, Run)
    state = agent.run.state
    if state is RunState.FINISHED:
        console.print(f"run {agent.run.id} is already finished; nothing to resume")
        return EXIT_OK
    console.print(f"resuming run {agent.run.id} ({state.value}; {agent.journal.last_recorded + 1} steps recorded)")
    return _report(console, _run_agent(agent, console, args.quiet, f"reasearch resume {agent.run.id[:12]}"), args.run_dir)


def replay(args: argparse.Namespace) -> int:
    from reasearch.agent import replay_run

    report = replay_run(args.run_id, run_dir=args.run_dir, replay_dir=args.into)
    if args.json:
        print(json.dumps({
            "run_id": report.run_id, "replay_run_id": report.replay_run_id, "replay_dir": report.replay_dir,
            "steps_compared": report.steps_compared, "tool_results_compared": report.tool_results_compared,
            "evaluations_compared": report.evaluations_compared, "ok": report.ok, "error": report.error,
            "divergences": [{"step": d.step, "what": d.what, "recorded": d.recorded, "replayed": d.replayed}
                            for d in report.divergences]}, indent=2))
    else:
        console = Console()
        console.print(f"replayed run {report.run_id} as {report.replay_run_id} in {report.replay_dir}: "
                      f"{report.tool_results_compared} tool results ({report.evaluations_compared} evaluations) compared")
        if report.error:
            console.print(f"[red]{report.error}[/red]")
        if report.divergences:
            t = Table(title=f"{len(report.divergences)} divergence(s)")
            for col in ("step", "what", "recorded", "replayed"):
                t.add_column(col)
            for d in report.divergences:
                t.add_row(str(d.step), d.what, d.recorded[:200], d.replayed[:200])
            console.print(t)
        elif not report.error:
            console.print("no divergence: every tool result and score matches the record")
    return EXIT_OK if report.ok else EXIT_FAILED
