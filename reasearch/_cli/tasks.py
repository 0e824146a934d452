"""``reasearch tasks`` (the registered ids), ``reasearch eval TASK_ID FILE`` (one sandboxed evaluation), ``seed`` and
``new-task`` (a working example task folder). A task id may be a task folder's path everywhere."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from reasearch._cli._params import key_values
from reasearch._cli._shared import (
    ProgressCaller,
    num,
    progress_bar,
    read_source,
    result_table,
    student_params,
)
from reasearch.errors import ConfigError, ReasearchError
from reasearch.evaluators.kinds import ProgramKind, PromptKind, PromptOptions, RepositoryKind, task_kind
from reasearch.evaluators.registry import (
    is_folder_ref,
    list_tasks,
    make,
    make_folder_task,
    plugin_problems,
    registered_entry,
)
from reasearch.evaluators.result import Status

if TYPE_CHECKING:
    from reasearch.evaluators.training import TrainingTask

EXIT_OK, EXIT_FAILED = 0, 1
_LISTED = ("direction", "best_known", "best_known_source", "seed_score")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tasks", help="list the registered task ids and their best known scores",
        description="List the registered task ids, with direction, best known and seed score.",
    )
    p.add_argument("filter", nargs="?", default="", help="show only ids containing this text")
    p.add_argument("--all", action="store_true", help="list every id of each family (e.g. each ARC task)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument(
        "--params",
        action="store_true",
        help="with an exact id: the task's parameters (-p KEY=VALUE): names, types, defaults, ranges, meaning",
    )
    p.set_defaults(func=run_tasks)

    e = sub.add_parser(
        "eval",
        help="evaluate a candidate program on a task (in the sandbox)",
        description="Evaluate one candidate program on a task, in the sandbox, and print the result. "
        "For a prompt task (gsm8k/v1, prompt/jsonl-v1) FILE is a system prompt, scored by "
        "--student on the validation split (aggregates only). "
        "Exit 0 if the candidate scored, 1 if it failed (any status but OK), 2 on bad input.",
    )
    e.add_argument("task_id", metavar="TASK_ID", help="e.g. circle_packing/n26-v1 (see `reasearch tasks`)")
    e.add_argument("file", metavar="FILE", help="the candidate's Python source file, or the repository folder of a "
                                                "training task's candidate (nanogpt/v2)")
    e.add_argument("--seed", type=int, default=0, help="seed handed to the task and the candidate (default 0)")
    e.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                   help="task constructor parameter (repeatable); VALUE is parsed as JSON when it can be")
    e.add_argument("--json", action="store_true", help="print the EvalResult as JSON")
    e.add_argument("--png", metavar="PATH", help="also draw the solution to this PNG (tasks that can draw)")
    e.add_argument("--student", metavar="MODEL", help="prompt tasks: the student, openai/NAME or anthropic/NAME")
    e.add_argument("--base-url", metavar="URL", help="prompt tasks: the student's endpoint (OpenAI-compatible .../v1)")
    e.set_defaults(func=run_eval)

    sd = sub.add_parser("seed", help="write a task's seed program (a file, or a repository for training tasks)",
                        description="Write the program the agent starts from: a Python file, or for training tasks "
                                    "(nanogpt/v2) a git repository holding train.py and its files.")
    sd.add_argument("task_id", metavar="TASK_ID", help="e.g. circle_packing/n26-v1 or nanogpt/v2")
    sd.add_argument("-o", "--output", metavar="PATH", required=True,
                    help="the file to write (program tasks) or the folder to create (training tasks)")
    sd.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                    help="task constructor parameter (repeatable)")
    sd.add_argument("--force", action="store_true", help="overwrite an existing file")
    sd.set_defaults(func=run_seed)

    nt = sub.add_parser("new-task", help="write a working example task folder to start your own task from",
                        description="Write a task folder (task.toml, description.md, seed.py, score.py) that passes "
                                    "check_task; every command that takes a task id takes its path. "
                                    "See docs/your-own-task.md.")
    nt.add_argument("name", metavar="NAME", help="the folder to create (its name becomes the task id's namespace)")
    nt.set_defaults(func=run_new_task)

    ct = sub.add_parser("convert-task", help="write the split form of an OpenEvolve folder (the candidate cannot "
                                              "touch its score)",
                        description="Where an OpenEvolve folder's evaluate() imports the program, calls one function "
                                    "and computes metrics from what it returned, write the split form (task.toml, "
                                    "description.md, seed.py, score.py): the candidate runs alone in the sandbox and "
                                    "the evaluator's code scores its return value on the trusted side. Otherwise one "
                                    "line says why not (exit 2). See docs/your-own-task.md.")
    ct.add_argument("folder", metavar="PATH", help="the OpenEvolve folder (initial_program.py + evaluator.py)")
    ct.add_argument("out", metavar="OUT", help="the folder to create")
    ct.set_defaults(func=run_convert_task)


# ------------------------------------------------------------------------------------------ tasks


def _row(task_id: str) -> dict[str, Any]:
    """One listing row: spec facts of a concrete id (building the task is cheap: constructors only store)."""
    entry, _ = registered_entry(task_id)
    if entry.listing:  # declared at registration: the task's module is not imported
        return {"id": task_id, **{k: entry.listing[k] for k in _LISTED}, "summary": entry.summary}
    spec = make(task_id).spec
    return {
        "id": task_id,
        "direction": spec.direction,
        "best_known": spec.best_known,
        "best_known_source": spec.best_known_source,
        "seed_score": spec.seed_score,
        "summary": entry.summary,
        **({"package": entry.package} if entry.package else {}),
    }


def _listing(filter_text: str, expand: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for task_id in list_tasks(include_families=True, expand=False):
        if "{" in task_id:
            entry, _ = registered_entry(task_id)
            members = [task_id.format(**f) for f in entry.enumerate()] if entry.enumerate else []
            if expand:
                rows.extend({"id": m, "family": task_id, "summary": entry.summary} for m in members)
            else:
                rows.append({"id": task_id, "family_size": len(members), "example": members[0] if members else None,
                             "summary": entry.summary})
        elif registered_entry(task_id)[0].package:  # an installed package's: a broken one is a line, not an error
            if filter_text in task_id:
                try:
                    rows.append(_row(task_id))
                except ReasearchError as exc:
                    print(f"reasearch: warning: {_one_line(str(exc))}", file=sys.stderr)
        else:
            rows.append(_row(task_id))
    for line in plugin_problems():
        print(f"reasearch: warning: {_one_line(line)}", file=sys.stderr)
    return [r for r in rows if filter_text in r["id"]]


def _one_line(text: str) -> str:
    """A package's message on one printable line (it may hold a newline or a terminal escape)."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


def _params(task_id: str, as_json: bool) -> int:
    """The parameters of one task, read from its declaration (``evaluators/params.py``: a TaskParams dataclass, or
    a class's signature and docstring)."""
    from reasearch.evaluators.params import describe_params

    if not task_id:
        raise ConfigError("--params needs a task id, e.g. reasearch tasks circle_packing/n26-v1 --params")
    if is_folder_ref(task_id):  # a task folder: the parameters its task.toml declares
        params = make_folder_task(task_id).declared_params()
    else:
        entry, implied = registered_entry(task_id)
        declared = getattr(make(task_id), "declared_params", None) if entry.package else None
        if entry.is_family and task_id != entry.id:
            make(task_id)  # a family whose task checks its own ids (ARC: they depend on the data): a bad one fails here
        if declared is not None:  # an installed package's task folder: the parameters its task.toml declares
            params = declared()
        else:
            params = [p for p in describe_params(entry.load()) if p.name not in implied or p.name in entry.kwargs]
    if as_json:
        print(json.dumps([p.to_dict() for p in params], indent=2))
        return EXIT_OK
    rows = [(p.name, p.type_text(), "required" if p.required else repr(p.default), p.range.text() if p.range else "",
             p.meaning) for p in params]
    console = Console()
    title = f"parameters of {task_id} (-p KEY=VALUE)"
    fixed = sum(max([len(h), *(len(r[i]) for r in rows)]) + 3 for i, h in enumerate(_PARAM_HEADERS[:4])) + 4
    if console.width - fixed >= _MEANING_MIN:
        table = Table(title=title)
        for header in _PARAM_HEADERS[:4]:
            table.add_column(header, no_wrap=True, overflow="ignore")
        table.add_column("meaning", overflow="fold")
        for r in rows:
            table.add_row(*(Text(c) for c in r))
        console.print(table)
        return EXIT_OK
    # Too narrow for a meaning column worth reading: one line of facts per parameter, its meaning below at full width.
    console.print(Text(title, style="bold"))
    for name, kind, default, rng, meaning in rows:
        facts = ", ".join(x for x in (kind, f"default {default}" if default != "required" else "required", rng) if x)
        first, *more = textwrap.wrap(f"{name}  {facts}", width=max(20, console.width), subsequent_indent="    ",
                                     break_long_words=False, break_on_hyphens=False)  # a long list of choices
        console.print(Text.assemble((name, "bold"), first[len(name):]), soft_wrap=True)
        for line in more:
            console.print(Text(line), soft_wrap=True)
        if meaning:
            console.print(Text(textwrap.fill(meaning, width=max(20, console.width - 4), initial_indent="    ",
                                             subsequent_indent="    ", break_long_words=False,
                                             break_on_hyphens=False)))
    return EXIT_OK


_PARAM_HEADERS = ("name", "type", "default", "range", "meaning")
_MEANING_MIN = 40  # a meaning column narrower than this turns the table into a tall narrow strip


def _family_note(row: dict[str, Any]) -> str:
    """How many ids a family has and one real one (a pattern like ``rl/{env}-v2`` hides what the ids look like)."""
    example = f", e.g. {row['example']}" if row.get("example") else ""
    return f"{row['family_size']} ids{example}; --all lists them"


def run_tasks(args: argparse.Namespace) -> int:
    if args.params:
        return _params(args.filter, args.json)
    if args.filter and is_folder_ref(args.filter):  # a task folder: its one row
        folder_task = make_folder_task(args.filter)
        spec = folder_task.spec
        kind = {"openevolve": "OpenEvolve folder", "shinka": "ShinkaEvolve folder"}.get(
            str(getattr(folder_task, "kind", "")), "task folder")
        trust = f"; trust: {folder_task.trust_note}" if folder_task.trust_note else ""
        rows: list[dict[str, Any]] = [{"id": spec.id, "direction": spec.direction, "best_known": spec.best_known,
                 "best_known_source": spec.best_known_source, "seed_score": spec.seed_score,
                 "summary": f"{kind} {spec.params['folder']} (content {str(spec.params['content_hash'])[:12]}){trust}"}]
    else:
        rows = _listing(args.filter, args.all)
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    from reasearch._cli._tables import Column, fitted_table

    cols = [Column("id", 9), Column("direction", 2), Column("best known", 6), Column("seed score", 5),
            Column("summary", 7, prose=True)]  # what a task is matters more to a newcomer than its seed score
    cells = [(r["id"], "", "", "", f"{r['summary']} ({_family_note(r)})") if "family_size" in r
             else (r["id"], r.get("direction", ""), num(r.get("best_known")), num(r.get("seed_score")), r["summary"])
             for r in rows]
    console = Console()
    console.print(fitted_table(f"registered tasks ({len(rows)})", cols, cells, console.width))
    return EXIT_OK


# ------------------------------------------------------------------------------------------- eval


def _start_sandbox_ahead(path: str) -> None:
    """For a ``.py`` candidate, starts the sandbox worker for its image in the background, so that its
    jail starts while the task's module is imported (the evaluation then finds it up, or waits for it)."""
    if not path.endswith(".py"):
        return
    try:
        source = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return  # the evaluation reports it

    def start() -> None:
        from reasearch.engine import default_pool
        from reasearch.engine.protocol import RunRequest

        try:
            default_pool().prestart(RunRequest(source=source))
        except Exception:  # noqa: BLE001 - a head start only: the evaluation itself reports what is wrong
            pass

    threading.Thread(target=start, name="reasearch-sandbox-ahead", daemon=True).start()


def run_eval(args: argparse.Namespace) -> int:
    _start_sandbox_ahead(args.file)
    params = key_values(args.param)
    task = make(args.task_id, **params)  # UnknownTaskError / ConfigError -> exit 2 with a one-line message
    if isinstance(task_kind(task), PromptKind) and student_params(args):
        task = make(args.task_id, **params, **student_params(args))
    kind = task_kind(task)
    if not isinstance(kind, PromptKind) and (args.student or args.base_url):
        raise ConfigError(f"--student and --base-url are for prompt tasks; {task.spec.id} evaluates programs")
    match kind:
        case RepositoryKind(task=training):
            result = training.evaluate(_repository_source(training, args.file), seed=args.seed)
        case PromptKind(task=prompt_task):
            source = read_source(args.file, task)
            with progress_bar(Console(stderr=True)) as progress:  # validation only: aggregates, no per-example data
                caller = ProgressCaller(prompt_task.student_client(), progress, f"{task.spec.id} validation")
                result = prompt_task.evaluate(source, seed=args.seed, options=PromptOptions("validation", caller))
        case ProgramKind():
            source = read_source(args.file, task)
            preflight = getattr(task, "preflight", None)
            if callable(preflight):  # a task folder: its seed and score.py must work before a candidate is judged
                preflight(seed=args.seed)
            result = task.evaluate(source, seed=args.seed)
    if args.json:
        print(result.to_json(indent=2))
    else:
        console = Console()
        console.print(result_table(task.spec.id, result, task.spec.best_known))
        render_table = getattr(task, "render_table", None)
        if callable(render_table):
            console.print(render_table(result))
    if args.png:
        render_png = getattr(task, "render_png", None)
        if not callable(render_png):
            print(f"reasearch: note: {task.spec.id} cannot draw its results; no PNG written", file=sys.stderr)
        elif result.ok:
            written = render_png(result, args.png)
            print(f"wrote {written}", file=sys.stderr)
        else:
            print(f"reasearch: note: a {result.status} result has no solution to draw; no PNG written", file=sys.stderr)
    return EXIT_OK if result.status is Status.OK else EXIT_FAILED


def _repository_source(task: TrainingTask, path: str) -> str:
    """A training task's candidate from ``path``: a folder (encoded), or a repository manifest file."""
    if Path(path).is_dir():
        from reasearch.evaluators.repo import encode_repo, read_repo_dir

        source = encode_repo(read_repo_dir(path))
        budget = task.params.time_budget_s
        print(f"reasearch: running one experiment of {task.spec.id} on {path} (budget {budget} s) ...", file=sys.stderr)
        return source
    source = read_source(path, task)
    if not _is_manifest(source):
        # One file would run as the whole repository (train.py alone) and fail only after training.
        raise ConfigError(f"{task.spec.id} evaluates a repository: give a folder holding {task.entry_file} "
                          f"(`reasearch seed {task.spec.id} -o DIR` writes one), not the file {path}")
    return source


# ------------------------------------------------------------------------------------------- seed


def _is_manifest(text: str) -> bool:
    """Whether a candidate file is a repository manifest (``encode_repo``'s JSON), not one source file."""
    try:
        doc = json.loads(text)
    except ValueError:
        return False
    return isinstance(doc, dict) and "format" in doc


def run_seed(args: argparse.Namespace) -> int:
    task = make(args.task_id, **key_values(args.param))
    out = Path(args.output)
    if not out.parent.is_dir():
        raise ConfigError(f"the folder {out.parent} does not exist: create it (mkdir -p {out.parent}) or give "
                          f"-o a path in an existing folder")
    if isinstance(kind := task_kind(task), RepositoryKind):
        from reasearch.evaluators.repo import write_repo

        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise ConfigError(f"{out} exists and is not an empty folder; give a new folder")
        write_repo(kind.task.seed_files(), out)
        committed = _git_init(out, f"seed of {task.spec.id}")
        print(f"wrote the seed repository of {task.spec.id} to {out}" + (" (git: one commit)" if committed else ""))
        return EXIT_OK
    if out.exists() and not args.force:
        raise ConfigError(f"{out} exists; pass --force to overwrite it")
    if out.is_dir():
        raise ConfigError(f"{out} is a folder; {task.spec.id}'s seed is one file")
    out.write_text(task.seed_program())
    print(f"wrote the seed program of {task.spec.id} to {out}")
    return EXIT_OK


def _git_init(folder: Path, message: str) -> bool:
    """``git init`` + one commit, with hooks and user config disabled; False when git is missing."""
    import tempfile

    from reasearch.agent.tools.git import GitRepo

    with tempfile.TemporaryDirectory(prefix="reasearch-git-home-") as home:  # not left in the user's folder
        try:
            repo = GitRepo(folder, git_dir=folder / ".git", home=home)
            repo.init()
            repo.run(["add", "-A"])
            repo.run(["commit", "-q", "-m", message])
        except (FileNotFoundError, ConfigError):
            return False
    return True


# --------------------------------------------------------------------------------------- new-task


def run_convert_task(args: argparse.Namespace) -> int:
    from reasearch.evaluators.peer_convert import convert_peer_folder

    out = convert_peer_folder(args.folder, args.out)
    try:
        task = make_folder_task(str(out))
        task.preflight()  # the seed scores under the converted score.py
    except ConfigError:
        import shutil

        shutil.rmtree(out)  # a folder that does not work is not left behind
        raise
    print(f"wrote the split form of {args.folder} to {out} ({task.spec.id}): task.toml, description.md, seed.py, "
          f"score.py\nthe candidate runs alone in the sandbox; score.py (the evaluator's code) scores what it returns\n"
          f"next: reasearch optimize {out} --model demo   |   the format: docs/your-own-task.md")
    return EXIT_OK


def run_new_task(args: argparse.Namespace) -> int:
    from reasearch.evaluators.folder import write_example_folder

    out = write_example_folder(args.name)
    task = make_folder_task(str(out))
    print(f"wrote the task folder {out} ({task.spec.id}): task.toml, description.md, seed.py, score.py\n"
          f"next: reasearch eval {out} {out / 'seed.py'}   |   reasearch optimize {out} --model demo\n"
          f"the format: docs/your-own-task.md")
    return EXIT_OK
