"""Installed task packages (entry-point group ``reasearch.tasks``): the example package in examples/task-package
registers two tasks (a Task subclass and a factory of a packaged task folder) that pass ``check_task``; a broken
package (import error, wrong type, a factory that raises or returns no Task, a built-in namespace, an id another
package took, a bad name) is one line naming the package and leaves every built-in task as it was."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from reasearch.errors import ConfigError
from reasearch.evaluators.checker import check_task
from reasearch.evaluators.registry import list_tasks, make, plugin_problems, registered_entry
from reasearch.evaluators.testing import install_on_path

PACKAGE = "reasearch-example-tasks 0.1.0"
IDS = ("reasearch_example_tasks/sines-v1", "reasearch_example_tasks/spread-v1")


def test_an_installed_package_registers_its_tasks_and_each_passes_check_task(example_task_package: Path) -> None:
    assert set(IDS) <= set(list_tasks())
    for task_id in IDS:
        entry, _ = registered_entry(task_id)
        assert entry.package == PACKAGE
        task = make(task_id)
        assert task.spec.id == task_id
        report = check_task(task)
        assert report.ok, report.failed
    assert make(IDS[0], n=2).evaluate("def solve(n):\n    return [1.5707963267948966] * n\n").score == \
        pytest.approx(2.0)
    assert make(IDS[1], n=3).evaluate("def solve(n):\n    return [0.0, 0.5, 1.0]\n").score == pytest.approx(0.5)
    with pytest.raises(ConfigError, match="has no parameter 'm'"):
        make(IDS[0], m=3)
    assert plugin_problems() == []


def test_a_hostile_candidate_of_a_package_task_gets_no_score(example_task_package: Path) -> None:
    task = make(IDS[0])
    liar = task.evaluate("def solve(n):\n    print('score: 1e9')\n    return 'score: 1e9'\n")
    assert liar.score is None and liar.status.value == "INVALID"
    sleeper = make(IDS[0]).evaluate("import time\ndef solve(n):\n    time.sleep(60)\n")
    assert sleeper.score is None and sleeper.status.value in ("TIMEOUT", "CRASH")
    forker = task.evaluate("import os, time\ndef solve(n):\n    for _ in range(4):\n        if os.fork() == 0:\n"
                           "            time.sleep(600)\n    open('metrics.json', 'w').write('{\"score\": 1e9}')\n"
                           "    return {'score': 1e9}\n")
    assert forker.score is None and forker.status.value == "INVALID"  # its sleeping children die with it


BROKEN = {
    "missing-v1": "broken_tasks.nothere:Task",
    "notatask-v1": "broken_tasks:NotATask",
    "number-v1": "broken_tasks:NUMBER",
    "wrongtype-v1": "broken_tasks:returns_text",
    "raises-v1": "broken_tasks:raises",
    "otherid-v1": "broken_tasks:other_id",
    "n26-v1": "circle_packing.mine:Task",  # a built-in family's namespace
    "Bad Name": "broken_tasks:raises",
}
BROKEN_CODE = '''
from reasearch_example_tasks import SinesTask

class NotATask:
    pass

NUMBER = 3

def returns_text():
    return "a task"

def raises():
    raise RuntimeError("no data here")

def other_id():
    return SinesTask()
'''


def test_a_broken_package_is_one_line_naming_it_and_built_ins_are_untouched(
    example_task_package: Path, tmp_path: Path, add_package_site: Callable[[Path], None],
) -> None:
    site = tmp_path / "broken"
    install_on_path(site, "broken-tasks", "1.0", {"reasearch.tasks": BROKEN}, {"broken_tasks/__init__.py": BROKEN_CODE})
    copy = tmp_path / "copycat"
    install_on_path(copy, "copycat-tasks", "2.0",
                    {"reasearch.tasks": {"sines-v1": "reasearch_example_tasks:SinesTask"}})
    add_package_site(site)
    add_package_site(copy)
    problems = plugin_problems()
    assert len(problems) == 3, problems
    assert all("\n" not in p for p in problems)
    (namespace,) = [p for p in problems if "'n26-v1'" in p]
    assert "broken-tasks 1.0" in namespace and "namespace 'circle_packing' is a built-in" in namespace
    (name,) = [p for p in problems if "'Bad Name'" in p]
    assert "broken-tasks 1.0" in name and "like 'name-v1'" in name
    (clash,) = [p for p in problems if "copycat-tasks 2.0" in p]
    assert f"already registered by {PACKAGE}" in clash
    assert registered_entry(IDS[0])[0].package == PACKAGE  # the first package keeps its id

    expected = {
        "missing-v1": "cannot load broken_tasks.nothere:Task: ModuleNotFoundError",
        "notatask-v1": "is a class but not a reasearch Task subclass",
        "number-v1": "broken_tasks:NUMBER is int, not a Task subclass or a function",
        "wrongtype-v1": "the factory returned str, not a reasearch Task",
        "raises-v1": "building it raised RuntimeError: no data here",
        "otherid-v1": "it builds a task with id 'reasearch_example_tasks/sines-v1'",
    }
    for name, why in expected.items():
        with pytest.raises(ConfigError) as info:
            make(f"broken_tasks/{name}")
        message = str(info.value)
        assert message.startswith(f"task broken_tasks/{name} of package broken-tasks 1.0: ") and "\n" not in message
        assert why in message, message

    built_in = make("circle_packing/n26-v1")
    assert type(built_in).__module__.startswith("reasearch.evaluators.circle_packing")
    assert not registered_entry("circle_packing/n26-v1")[0].package
    assert "circle_packing/mine" not in " ".join(list_tasks())
