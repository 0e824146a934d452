"""Task kinds are types with one narrowing point (issue 42 item 1): ``task_kind`` tells program, prompt and
repository tasks apart; kind-specific evaluation options are one typed object; no module switches on the
``candidate_kind`` string."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from reasearch.engine.testing import StaticRunner
from reasearch.errors import ConfigError
from reasearch.evaluators.base import Task
from reasearch.evaluators.kinds import (
    ExperimentOptions,
    ProgramKind,
    PromptKind,
    PromptOptions,
    RepositoryKind,
    task_kind,
)
from reasearch.evaluators.prompt.task import PromptTask
from reasearch.evaluators.registry import list_tasks, registered_entry
from reasearch.evaluators.testing import ToyTask
from reasearch.evaluators.training import TrainingTask
from reasearch.runs.executor import EvalRequest, LocalExecutor, evaluate_with

PACKAGE = Path(__file__).resolve().parents[2] / "reasearch"


def _bare(cls: type[Task]) -> Task:
    """An instance without its constructor (the kind depends on the class only)."""
    return cls.__new__(cls)


def test_every_registered_task_narrows_to_the_kind_it_declares() -> None:
    seen = set()
    for task_id in list_tasks(include_families=True, expand=False):
        cls = registered_entry(task_id)[0].load()
        kind = task_kind(_bare(cls))
        assert kind.name == cls.candidate_kind, task_id
        assert isinstance(kind, {"program": ProgramKind, "prompt": PromptKind, "repository": RepositoryKind}[kind.name])
        assert kind.task.__class__ is cls
        seen.add(type(kind))
    assert seen == {ProgramKind, PromptKind, RepositoryKind}
    prompt = task_kind(_bare(registered_entry("gsm8k/v1")[0].load()))
    assert isinstance(prompt, PromptKind) and isinstance(prompt.task, PromptTask)
    training = task_kind(_bare(registered_entry("nanogpt/v2")[0].load()))
    assert isinstance(training, RepositoryKind) and isinstance(training.task, TrainingTask)


class _SaysPrompt(ToyTask):
    candidate_kind = "prompt"  # a plugin that declares the kind without being a PromptTask


class _SaysRepository(ToyTask):
    candidate_kind = "repository"


class _SaysNothingKnown(ToyTask):
    candidate_kind = "spreadsheet"  # type: ignore[assignment]


@pytest.mark.parametrize("cls, needs", [(_SaysPrompt, "a PromptTask"), (_SaysRepository, "a TrainingTask"),
                                        (_SaysNothingKnown, "one of program, prompt or repository")])
def test_a_declared_kind_the_type_does_not_have_is_one_clear_error(cls: type[Task], needs: str) -> None:
    with pytest.raises(ConfigError, match=f"declares candidate_kind=.* but is a program task: .* must be {needs}"):
        task_kind(cls())


def test_a_prompt_task_that_says_it_is_a_program_is_refused_too() -> None:
    liar = type("Liar", (registered_entry("gsm8k/v1")[0].load(),), {"candidate_kind": "program"})
    with pytest.raises(ConfigError, match="declares candidate_kind='program' but is a prompt task"):
        task_kind(liar())


def test_experiment_options_read_from_the_wire_refuse_what_they_do_not_know() -> None:
    assert ExperimentOptions.from_dict({}) == ExperimentOptions()
    assert ExperimentOptions.from_dict({"experiment_dir": "/tmp/x"}).to_dict() == {"experiment_dir": "/tmp/x"}
    with pytest.raises(ConfigError, match=r"unknown experiment options \['executor'\]"):
        ExperimentOptions.from_dict({"experiment_dir": "/tmp/x", "executor": None})
    with pytest.raises(ConfigError, match="experiment_dir must be a folder path"):
        ExperimentOptions.from_dict({"experiment_dir": ["/", "etc"]})


def test_request_options_for_a_program_task_are_refused_not_splatted_into_evaluate() -> None:
    # Before, a request's options were splatted into evaluate's keywords: a stray key ended in a TypeError, and
    # "seed" or "executor" collided with the executor's own arguments.
    task = ToyTask(dim=2)
    with pytest.raises(ConfigError, match=r"is a program task: its evaluations take no options, not \['executor'\]"):
        evaluate_with(task, task.seed_program(), seed=0, executor=StaticRunner(), options={"executor": None})
    with LocalExecutor(1, pool=StaticRunner()) as ex:
        req = EvalRequest(task.spec, task.seed_program(), 0, {"seed": 5})
        with pytest.raises(ConfigError, match="its evaluations take no options"):
            ex.evaluate(req)


def test_prompt_tasks_take_their_split_and_caller_as_one_options_object() -> None:
    task = registered_entry("gsm8k/v1")[0].load()()
    with pytest.raises(TypeError):
        task.evaluate("a prompt", split="test")  # type: ignore[call-arg]  # the old loose keyword is gone
    res = task.evaluate("", options=PromptOptions("test"))  # an empty prompt: INVALID before any data or call
    assert res.status.value == "INVALID"


def _compares_candidate_kind(node: ast.AST) -> bool:
    if isinstance(node, ast.Compare):
        return any(isinstance(n, ast.Attribute) and n.attr == "candidate_kind" for n in [node.left, *node.comparators])
    return isinstance(node, ast.Match) and isinstance(node.subject, ast.Attribute) and node.subject.attr == \
        "candidate_kind"


def test_no_module_switches_on_the_candidate_kind_string() -> None:
    sites = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "kinds.py" and path.parent.name == "evaluators":
            continue  # the one narrowing point
        where = path.relative_to(PACKAGE.parent)
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if _compares_candidate_kind(n) or (isinstance(n, ast.FunctionDef) and n.name == "is_prompt_task"):
                sites.append(f"{where}:{n.lineno}")
    assert not sites, f"narrow with reasearch.evaluators.kinds.task_kind instead: {sites}"
