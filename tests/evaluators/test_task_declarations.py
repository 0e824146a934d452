"""What the agent and the CLI ask of a task is declared on ``Task`` (issue 31), not probed with getattr."""

from __future__ import annotations

import ast
from pathlib import Path

from reasearch.evaluators import make
from reasearch.evaluators.base import Task
from reasearch.evaluators.testing import ToyTask
from reasearch.runs.testing import make_result

PACKAGE = Path(__file__).resolve().parents[2] / "reasearch"
DECLARED = ("candidate_kind", "candidate_file", "budget_estimate", "evaluation_costs")


def test_defaults_and_a_family_that_overrides_them() -> None:
    toy = ToyTask()
    assert (toy.candidate_kind, toy.candidate_file) == ("program", "candidate.py")
    assert toy.budget_estimate() == {"evaluations": 1.0}
    assert toy.evaluation_costs(make_result(1.0)) == toy.budget_estimate()
    prompt_cls = type(make("prompt/jsonl-v1"))
    assert (prompt_cls.candidate_kind, prompt_cls.candidate_file) == ("prompt", "prompt.txt")
    assert issubclass(prompt_cls, Task)


def test_no_module_probes_a_declared_task_attribute_with_getattr() -> None:
    probes = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value in DECLARED and "task" in ast.unparse(node.args[0])):
                probes.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not probes, f"read these from Task (they are declared there): {probes}"
