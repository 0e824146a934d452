"""Start-up laziness: a command imports its own module only, and listing the registry imports no task.

Each check runs in a fresh interpreter (what was imported is what a user's first command pays for).
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from reasearch import cli


def _imported_after(code: str) -> set[str]:
    prog = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, check=True, timeout=120)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("module", cli._COMMAND_MODULES)
def test_the_command_map_names_exactly_what_each_module_adds(module: str) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    importlib.import_module(module).add_parser(sub)
    assert set(sub.choices) == {c for c, m in cli._COMMANDS.items() if m == module}
    assert set(cli._COMMANDS.values()) == set(cli._COMMAND_MODULES)


def test_a_command_line_imports_only_its_commands_module() -> None:
    assert cli._modules_for(["tasks", "--all"]) == ("reasearch._cli.tasks",)
    assert cli._modules_for(["eval", "circle_packing/n26-v1", "x.py"]) == ("reasearch._cli.tasks",)
    assert cli._modules_for(["--help"]) == cli._COMMAND_MODULES
    assert cli._modules_for(["-h", "tasks"]) == cli._COMMAND_MODULES  # help lists every command
    assert cli._modules_for(["no-such-command"]) == cli._COMMAND_MODULES  # argparse lists the choices
    assert cli._modules_for([]) == cli._COMMAND_MODULES
    mods = _imported_after("from reasearch.cli import build_parser\nbuild_parser(['tasks'])")
    assert "reasearch._cli.tasks" in mods
    assert not {m for m in mods if m.startswith(("reasearch.runs", "reasearch.agent", "reasearch._cli.runs"))}


def test_help_still_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = capsys.readouterr().out
    assert all(c in text for c in cli._COMMANDS)


def test_listing_the_registry_imports_no_task_module() -> None:
    mods = _imported_after("import reasearch\nids = reasearch.list_tasks()\nassert 'arc_agi_2/eval-v1' in ids")
    heavy = {m for m in mods if m.endswith((".task", ".set_task", "._students", ".harness"))
             or m.startswith(("numpy", "reasearch.engine", "reasearch.evaluators.base"))}
    assert not heavy, sorted(heavy)


def test_make_still_loads_the_task_class_and_checks_it() -> None:
    import reasearch
    from reasearch.errors import ConfigError
    from reasearch.evaluators.registry import _load_class

    assert type(reasearch.make("circle_packing/n26-v1")).__name__ == "CirclePackingTask"
    with pytest.raises(ConfigError, match="not a Task subclass"):
        _load_class("reasearch.evaluators.registry:TaskEntry")
