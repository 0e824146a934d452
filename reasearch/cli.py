"""The ``reasearch`` command. Each subcommand group lives in ``reasearch._cli.<name>``.

Exit codes: 0 success; 1 the work ran but did not succeed (e.g. a candidate failed, a check found a
problem); 2 bad input or configuration (one-line error, no traceback).
``optimize``/``resume``: 3 the run was interrupted (a model endpoint failed after its retries): it is
saved, and the one line on stderr says how to resume it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from reasearch.engine.waits import WaitNotice, add_wait_reporter
from reasearch.errors import ReasearchError

# One line per subcommand module; each defines add_parser(subparsers) and sets a `func(args) -> int`.
_COMMAND_MODULES = (
    "reasearch._cli.sandbox",
    "reasearch._cli.tasks",
    "reasearch._cli.bench",
    "reasearch._cli.runs",
    "reasearch._cli.agent",
    "reasearch._cli.fleet",
    "reasearch._cli.compare",
    "reasearch._cli.prompt",
    "reasearch._cli.mcp",
    "reasearch._cli.reports",
    "reasearch._cli.adapters",
    "reasearch._cli.certify",
    "reasearch._cli.steer",
)

# The commands each module adds (tests/test_cli_lazy.py holds this in step with the modules): a command
# line naming one of them imports only its module, so `reasearch tasks` does not pay for the run store,
# the agent or Ray's clients. Help, and anything else, imports them all.
_COMMANDS = {
    "sandbox": "reasearch._cli.sandbox",
    "tasks": "reasearch._cli.tasks", "eval": "reasearch._cli.tasks", "seed": "reasearch._cli.tasks",
    "new-task": "reasearch._cli.tasks", "convert-task": "reasearch._cli.tasks",
    "bench": "reasearch._cli.bench",
    "runs": "reasearch._cli.runs", "show": "reasearch._cli.runs", "export": "reasearch._cli.runs",
    "optimize": "reasearch._cli.agent", "resume": "reasearch._cli.agent", "replay": "reasearch._cli.agent",
    "lessons": "reasearch._cli.agent",
    "fleet": "reasearch._cli.fleet",
    "compare": "reasearch._cli.compare",
    "test": "reasearch._cli.prompt",
    "mcp": "reasearch._cli.mcp",
    "report": "reasearch._cli.reports", "serve": "reasearch._cli.reports",
    "export-evaluator": "reasearch._cli.adapters",
    "certify": "reasearch._cli.certify",
    "steer": "reasearch._cli.steer", "fork": "reasearch._cli.steer",
}

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _modules_for(argv: Sequence[str] | None) -> tuple[str, ...]:
    """The command modules a command line needs: the one defining its command, else all of them."""
    args = sys.argv[1:] if argv is None else list(argv)
    first = next((a for a in args if not a.startswith("-")), None)
    if first in _COMMANDS and not any(a in ("-h", "--help", "--version") for a in args[:args.index(first)]):
        return (_COMMANDS[first],)
    return _COMMAND_MODULES


def build_parser(argv: Sequence[str] | None = ()) -> argparse.ArgumentParser:
    """The parser for ``argv``'s command (only its module is imported); ``()``: every command."""
    parser = argparse.ArgumentParser(
        prog="reasearch",
        description="An optimizer that is a single tool-using LLM agent, on a fast sandboxed evaluator engine.",
    )
    from reasearch import __version__

    parser.add_argument("--version", action="version", version=f"reasearch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in _modules_for(argv) if argv != () else _COMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    return parser


def error(message: str) -> None:
    """One line on stderr, no traceback."""
    print(f"reasearch: error: {message}", file=sys.stderr)


def _print_wait(notice: WaitNotice) -> None:
    """A wait of the engine (a slot another process holds, the sandbox starting): one line on stderr, repeated."""
    print(f"reasearch: {notice.line()}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    remove_reporter = add_wait_reporter(_print_wait)
    try:
        return int(args.func(args) or 0)
    except ReasearchError as exc:
        error(str(exc))
        return EXIT_USAGE
    except FileNotFoundError as exc:
        error(f"no such file: {exc.filename}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        error("interrupted")
        return 130
    except BrokenPipeError:  # `reasearch tasks --json | head`: the reader left; stop quietly
        _silence_stdout()
        return 141
    finally:
        remove_reporter()


def _silence_stdout() -> None:
    """Points stdout at /dev/null so the interpreter's last flush does not fail on the closed pipe."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file (a test's capture)
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
