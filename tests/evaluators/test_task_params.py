"""Families whose parameters are one frozen declaration (issue 42 item 5): a bad value is one ConfigError naming
the parameter, the value and what it takes, whether it comes through the constructor, ``make()``, the
declaration itself or the command line (exit 2); ``--params`` lists the declaration."""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest

from reasearch import cli
from reasearch.errors import ConfigError
from reasearch.evaluators import make
from reasearch.evaluators.arc_agi_2.set_task import ArcSetParams, ArcSetTask
from reasearch.evaluators.arc_agi_2.task import ArcParams, ArcTask
from reasearch.evaluators.atari.task import AtariParams, AtariTask
from reasearch.evaluators.circle_packing.task import CirclePackingParams, CirclePackingTask
from reasearch.evaluators.eplb.task import EplbParams, EplbTask
from reasearch.evaluators.heilbronn.task import HeilbronnParams, HeilbronnTask
from reasearch.evaluators.img.task import ImageFolderParams, ImageFolderTask
from reasearch.evaluators.nanogpt.task import NanoGPTParams, NanoGPTTask
from reasearch.evaluators.params import Parametrized, Range, TaskParams, meta, spec_params
from reasearch.evaluators.prompt.task import Gsm8kParams, Gsm8kTask, JsonlParams, JsonlPromptTask
from reasearch.evaluators.rl.task import RLParams, RLTask
from reasearch.evaluators.tabular.task import TabularParams, TabularTask
from reasearch.evaluators.txn_scheduling.task import TxnSchedulingParams, TxnSchedulingTask

# family -> (task class, a registered id, its declaration, {parameter: a value out of its range})
FAMILIES: dict[str, tuple[type[Parametrized[Any]], str, type[TaskParams], dict[str, Any]]] = {
    "txn_scheduling": (TxnSchedulingTask, "txn_scheduling/v1", TxnSchedulingParams,
                       {"time_limit_s": 0, "num_seqs": 0, "memory_mb": 255, "score": "fastest"}),
    "circle_packing": (CirclePackingTask, "circle_packing/n26-v1", CirclePackingParams,
                       {"n": 1, "time_limit_s": -1.5, "memory_mb": 0}),
    "heilbronn": (HeilbronnTask, "heilbronn/n12-v1", HeilbronnParams, {"n": 2, "time_limit_s": 0.0, "memory_mb": -3}),
    "eplb": (EplbTask, "eplb/v1", EplbParams, {"num_windows": 1, "window_size": 0, "weight_type": "jax",
                                               "score": "fastest", "time_limit_s": 0, "memory_mb": 0}),
    "gsm8k": (Gsm8kTask, "gsm8k/v1", Gsm8kParams, {"concurrency": 0, "temperature": -0.5, "max_tokens": 0,
                                                   "timeout_s": 0, "retries": -1, "price_in": -1, "n_test": 0}),
    "prompt/jsonl": (JsonlPromptTask, "prompt/jsonl-v1", JsonlParams, {"metric": "bleu", "n_train": 0,
                                                                       "split_seed": -1, "backoff_s": -0.1}),
    "nanogpt/v2": (NanoGPTTask, "nanogpt/v2", NanoGPTParams, {"eval_tokens": 255, "grace_s": -1, "slot": "tpu",
                                                              "sandbox_mode": "docker", "time_budget_s": 0}),
    "img/folder-v2": (ImageFolderTask, "img/folder-v2", ImageFolderParams, {"image_size": 513, "test_frac": 0.9,
                                                                            "val_frac": 0.001}),
    "tabular/csv-v2": (TabularTask, "tabular/csv-v2", TabularParams, {"metric": "r2", "val_frac": 0.6,
                                                                      "max_submissions": 1001}),
    "rl": (RLTask, "rl/Hopper-v5-v2", RLParams, {"episodes": 0, "max_episode_steps": 100_001}),
    "atari": (AtariTask, "atari/pong-v1", AtariParams, {"episodes": 101, "max_frames": 99, "sticky": 1.0,
                                                        "frameskip": 9}),
}
# family -> (a parameter that takes a number, one that takes an integer)
NUMBER_AND_INTEGER = {"txn_scheduling": ("time_limit_s", "memory_mb"), "circle_packing": ("time_limit_s", "memory_mb"),
                      "heilbronn": ("time_limit_s", "memory_mb"), "eplb": ("time_limit_s", "memory_mb"),
                      "gsm8k": ("timeout_s", "max_tokens"), "prompt/jsonl": ("timeout_s", "max_tokens"),
                      **dict.fromkeys(("nanogpt/v2", "img/folder-v2", "tabular/csv-v2", "rl", "atari"),
                                      ("time_budget_s", "memory_mb"))}

# What --params listed before the move (`reasearch tasks ID --params --json` at 2d54822): (name, default, range).
# A range may only have become stricter where the task refused the value anyway (its hand checks, now declared).
BEFORE: dict[str, list[tuple[str, Any, str]]] = {
    "txn_scheduling": [("time_limit_s", 60.0, "> 0"), ("num_seqs", 10, ""), ("memory_mb", 1024, "> 0"),
                       ("score", "makespan", "")],
    "circle_packing": [("n", 26, ">= 2"), ("time_limit_s", 60.0, "> 0"), ("memory_mb", 2048, "> 0")],
    "heilbronn": [("n", 12, ">= 3"), ("time_limit_s", 60.0, "> 0"), ("memory_mb", 2048, "> 0")],
    "eplb": [("trace_path", None, ""), ("num_windows", None, ""), ("trace_seed", 0, ""), ("window_size", 100, ""),
             ("weight_type", "auto", ""), ("time_limit_s", 60.0, "> 0"), ("memory_mb", 4096, "> 0"),
             ("score", "combined", "")],
    "gsm8k": [("student", None, ""), ("base_url", None, ""), ("api_key_env", None, ""), ("concurrency", 8, ">= 1"),
              ("temperature", 0.0, ">= 0"), ("max_tokens", 1024, ">= 1"), ("timeout_s", 60.0, "> 0"),
              ("retries", 4, ">= 0"), ("backoff_s", 1.0, ">= 0"), ("price_in", None, ">= 0"),
              ("price_out", None, ">= 0"), ("n_train", 500, ">= 1"), ("n_validation", 500, ">= 1"),
              ("n_test", None, ">= 1"), ("split_seed", 0, ">= 0"), ("data_dir", None, ""), ("answer", None, "")],
    "prompt/jsonl": [("path", None, ""), ("input_field", "input", ""), ("answer_field", "answer", ""),
                     ("metric", "normalized_exact", ""), ("answer_prefix", "Answer:", ""), ("test_path", None, ""),
                     ("student", None, ""), ("base_url", None, ""), ("api_key_env", None, ""),
                     ("concurrency", 8, ">= 1"), ("temperature", 0.0, ">= 0"), ("max_tokens", 1024, ">= 1"),
                     ("timeout_s", 60.0, "> 0"), ("retries", 4, ">= 0"), ("backoff_s", 1.0, ">= 0"),
                     ("price_in", None, ">= 0"), ("price_out", None, ">= 0"), ("n_train", 100, ">= 1"),
                     ("n_validation", 100, ">= 1"), ("n_test", None, ">= 1"), ("split_seed", 0, ">= 0"),
                     ("answer", None, ""), ("context_field", None, "")],
    "nanogpt/v2": [("corpus", "generated", ""), ("time_budget_s", 300.0, "> 0"), ("max_time_budget_s", 1800.0, "> 0"),
                   ("grace_s", 30.0, ">= 0"), ("eval_tokens", 65536, ">= 256 and <= 4194304"),
                   ("eval_time_limit_s", 300.0, "> 0"), ("slot", "auto", "one of 'auto', 'gpu', 'cpu'"),
                   ("memory_mb", 8192, "> 0"), ("sandbox_mode", "auto", "one of 'auto', 'nsjail', 'process'")],
    "img/folder-v2": [("data", "glyphs", ""), ("image_size", 0, ""), ("test_frac", 0.2, ""), ("val_frac", 0.1, ""),
                      ("split_seed", 0, ""), ("time_budget_s", 60.0, "> 0"), ("max_time_budget_s", 1800.0, "> 0"),
                      ("grace_s", 10.0, ">= 0"), ("eval_time_limit_s", 120.0, "> 0"),
                      ("slot", "auto", "one of 'auto', 'gpu', 'cpu'"), ("memory_mb", 8192, "> 0"),
                      ("sandbox_mode", "auto", "one of 'auto', 'nsjail', 'process'")],
    "tabular/csv-v2": [("data", "default", ""), ("target", "", ""), ("time", "", ""), ("metric", "rmse", ""),
                       ("val_frac", 0.2, ""), ("test_frac", 0.2, ""), ("time_budget_s", 60.0, "> 0"),
                       ("max_time_budget_s", 1800.0, "> 0"), ("grace_s", 10.0, ">= 0"),
                       ("slot", "auto", "one of 'auto', 'gpu', 'cpu'"), ("memory_mb", 8192, "> 0"),
                       ("sandbox_mode", "auto", "one of 'auto', 'nsjail', 'process'"), ("max_submissions", 5, "")],
    "rl": [("time_budget_s", 600.0, "> 0"), ("max_time_budget_s", 1800.0, "> 0"), ("grace_s", 30.0, ">= 0"),
           ("episodes", 10, ""), ("max_episode_steps", None, ""), ("eval_time_limit_s", 600.0, "> 0"),
           ("slot", "auto", "one of 'auto', 'gpu', 'cpu'"), ("memory_mb", 8192, "> 0"),
           ("sandbox_mode", "auto", "one of 'auto', 'nsjail', 'process'")],
    "atari": [("time_budget_s", 600.0, "> 0"), ("max_time_budget_s", 1800.0, "> 0"), ("grace_s", 30.0, ">= 0"),
              ("episodes", 10, ""), ("max_frames", 108000, ""), ("sticky", 0.25, ""), ("frameskip", 4, ""),
              ("eval_time_limit_s", 900.0, "> 0"), ("slot", "auto", "one of 'auto', 'gpu', 'cpu'"),
              ("memory_mb", 8192, "> 0"), ("sandbox_mode", "auto", "one of 'auto', 'nsjail', 'process'")],
}
NOW_RANGES: dict[str, dict[str, str]] = {  # what the declaration adds to BEFORE's ranges (the old hand checks)
    "txn_scheduling": {"time_limit_s": "> 0 and <= 86400", "num_seqs": ">= 1", "memory_mb": ">= 256",
                       "score": "one of 'makespan', 'adrs'"},
    "circle_packing": {"n": ">= 2", "time_limit_s": "> 0", "memory_mb": "> 0"},
    "heilbronn": {"n": ">= 3", "time_limit_s": "> 0", "memory_mb": "> 0"},
    "eplb": {"num_windows": ">= 2", "window_size": ">= 1", "weight_type": "one of 'auto', 'numpy', 'torch'",
             "score": "one of 'combined', 'adrs', 'bal_gpu', 'bal_expert'", "time_limit_s": "> 0", "memory_mb": "> 0"},
    "gsm8k": {"concurrency": ">= 1", "temperature": ">= 0", "max_tokens": ">= 1", "timeout_s": "> 0", "retries": ">= 0",
              "price_in": ">= 0", "n_test": ">= 1"},
    "prompt/jsonl": {"metric": "one of 'exact', 'normalized_exact', 'numeric', 'token_f1'", "n_train": ">= 1",
                     "split_seed": ">= 0", "backoff_s": ">= 0"},
    "nanogpt/v2": {"eval_tokens": ">= 256 and <= 4194304", "grace_s": ">= 0", "slot": "one of 'auto', 'gpu', 'cpu'",
                   "sandbox_mode": "one of 'auto', 'nsjail', 'process'", "time_budget_s": "> 0"},
    "img/folder-v2": {"image_size": ">= 0 and <= 512", "test_frac": ">= 0.01 and <= 0.5",
                      "val_frac": ">= 0.01 and <= 0.5"},
    "tabular/csv-v2": {"metric": "one of 'pearson', 'rmse', 'mae', 'accuracy'", "val_frac": ">= 0.01 and <= 0.5",
                       "test_frac": ">= 0.01 and <= 0.5", "max_submissions": ">= 0 and <= 1000"},
    "rl": {"episodes": ">= 1 and <= 1000", "max_episode_steps": ">= 1 and <= 100000"},
    "atari": {"episodes": ">= 1 and <= 100", "max_frames": ">= 100 and <= 1000000", "sticky": ">= 0 and < 1",
              "frameskip": ">= 1 and <= 8"},
}

KINDS = {  # a bad value of each kind, for the family's number (0) or integer (1) parameter
    "nan": (0, math.nan, "finite"),
    "inf": (0, math.inf, "finite"),
    "-inf": (0, -math.inf, "finite"),
    "huge int": (1, 2**64, "finite"),
    "bool where int": (1, True, "takes an integer"),
    "text where number": (0, "fast", "takes a number"),
    "float where int": (1, 512.5, "takes an integer"),
    "null": (1, None, "takes an integer"),
}


def _builds(family: str, given: dict[str, Any]) -> list[Any]:
    """The three doors a value comes in by: the task's constructor, make() of a registered id, the declaration."""
    cls, task_id, declaration, _ = FAMILIES[family]
    return [lambda: cls(**given), lambda: make(task_id, **given), lambda: declaration(**given)]


def _one_line(exc: pytest.ExceptionInfo[ConfigError], name: str) -> str:
    text = str(exc.value)
    assert "\n" not in text and len(text) < 400 and name in text, text
    return text


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_bad_value_of_any_kind_is_one_config_error(family: str, kind: str) -> None:
    which, value, words = KINDS[kind]
    name = NUMBER_AND_INTEGER[family][which]
    for build in _builds(family, {name: value}):
        with pytest.raises(ConfigError) as exc:
            build()
        assert words in _one_line(exc, name)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_value_out_of_range_names_the_parameter_the_value_and_the_range(family: str) -> None:
    for name, value in FAMILIES[family][3].items():
        rng = NOW_RANGES[family][name]
        for build in _builds(family, {name: value}):
            with pytest.raises(ConfigError) as exc:
                build()
            text = _one_line(exc, name)
            assert rng in text and repr(value) in text, text


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_unknown_and_repeated_names_and_extra_positions_are_config_errors(family: str) -> None:
    cls, task_id, _, _ = FAMILIES[family]
    for build in (lambda: cls(no_such_param=1), lambda: make(task_id, no_such_param=1)):
        with pytest.raises(ConfigError, match="no parameter 'no_such_param'") as exc:
            build()
        _one_line(exc, NUMBER_AND_INTEGER[family][0])  # the message lists the parameters there are
    with pytest.raises(ConfigError, match="positional"):
        cls(1, 2, 3, 4, 5)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_task_keeps_checked_values_in_their_declared_type(family: str) -> None:
    cls, task_id, declaration, _ = FAMILIES[family]
    name = NUMBER_AND_INTEGER[family][0]
    task = cls(**{name: 7})
    # a family that recorded numbers as given before its declaration keeps doing so (its identity pins say so)
    kept = int if declaration.keep_given_numbers else float
    assert getattr(task.params, name) == 7 and type(getattr(task.params, name)) is kept
    assert task.spec.params[name] == 7 and type(task.spec.params[name]) is kept
    assert set(task.spec.params) <= {f.name for f in dataclasses.fields(declaration)}
    assert task.get_params() == dict(task.spec.params)
    again = pickle.loads(pickle.dumps(task))
    assert again.params == task.params and again.spec == task.spec
    assert make(task.spec).spec == task.spec  # rebuilt from the spec alone
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(task.params, name, 1.0)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_params_listing_has_the_names_defaults_and_ranges_of_before(family: str,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    _, task_id, _, _ = FAMILIES[family]
    assert cli.main(["tasks", task_id, "--params", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"]: r["default"] for r in rows} == {n: d for n, d, _ in BEFORE[family]}  # (prompt's order moved)
    now = {r["name"]: r["range"] for r in rows}
    assert now == {n: NOW_RANGES[family].get(n, rng) for n, _, rng in BEFORE[family]}
    assert all(r["meaning"] for r in rows)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize(("text", "words"), [("NUMBER=NaN", "finite"), ("INTEGER=true", "takes an integer"),
                                             ("INTEGER=1e400", "finite"), (f"INTEGER={2**70}", "finite"),
                                             ("no_such_param=1", "no parameter"), ("NUMBER=fast", "takes")])
def test_the_cli_refuses_a_bad_value_with_exit_2(family: str, text: str, words: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    _, task_id, _, out_of_range = FAMILIES[family]
    number, integer = NUMBER_AND_INTEGER[family]
    text = text.replace("NUMBER", number).replace("INTEGER", integer)
    for arg in (text, *(f"{k}={json.dumps(v)}" for k, v in out_of_range.items())):
        code = cli.main(["seed", task_id, "-o", str(tmp_path / "seed.py"), "-p", arg])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert arg.split("=")[0] in err and (words in err or arg is not text), err
        assert not (tmp_path / "seed.py").exists()


@pytest.mark.parametrize(("cls", "n"), [(CirclePackingTask, 26), (HeilbronnTask, 12)])
def test_the_size_goes_by_position_or_by_name_once(cls: type[CirclePackingTask], n: int) -> None:
    assert cls(n + 1).spec.params == cls(n=n + 1).spec.params and cls(n + 1).n == n + 1
    assert cls().n == n
    with pytest.raises(ConfigError, match="parameter n given twice"):
        cls(n, n=n + 1)



@pytest.mark.parametrize(("task_id", "given", "words"), [
    ("nanogpt/v2", {"time_budget_s": 2000}, "above max_time_budget_s"),
    ("rl/Hopper-v5-v2", {"time_budget_s": 100, "max_time_budget_s": 50}, "above max_time_budget_s"),
    ("tabular/csv-v2", {"data": "/tmp/some.csv"}, "needs -p target=COLUMN"),
    ("gsm8k/v1", {"answer": "bogus"}, "answer must be one of"),
])
def test_rules_across_parameters_are_one_line_config_errors(task_id: str, given: dict[str, Any], words: str,
                                                            tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=words):
        make(task_id, **given)
    argv = ["seed", task_id, "-o", str(tmp_path / "out")]
    for k, v in given.items():
        argv += ["-p", f"{k}={v}"]
    err = (cli.main(argv), capsys.readouterr().err)
    assert err[0] == 2 and words in err[1] and err[1].count("\n") == 1, err


def test_every_built_in_family_declares_its_parameters_once() -> None:
    """ARC too (its spec records the split its data resolve, and the set's leaves workers out: declared options)."""
    from reasearch.evaluators.registry import _load_builtins, family_entries, list_tasks

    _load_builtins()
    families = {task_id.split("/", 1)[0] for task_id in list_tasks(include_families=True, expand=False)}
    undeclared = sorted({entry.id for family in families for entry in family_entries(family)
                         if not issubclass(entry.load(), Parametrized)})
    assert not undeclared, undeclared
    declared = {entry.load().params_type.family for family in families for entry in family_entries(family)}
    assert declared == set(FAMILIES) | {"arc_agi_2"}, declared  # and every one of them is tested (ARC below)
    arc = {entry.load().params_type for entry in family_entries("arc_agi_2")}
    assert arc == set(ARC_DECLARATIONS.values())


# ARC-AGI-2: a task (arc_agi_2/{task_id}-v1) and the set tasks (eval-v1, training-v1). Its parameters are text,
# one choice and one integer, so its cases are listed here rather than taken from KINDS.
ARC_ID = {"task": "arc_agi_2/0934a4d8-v1", "set": "arc_agi_2/eval-v1"}
ARC_DECLARATIONS: dict[str, type[TaskParams]] = {"task": ArcParams, "set": ArcSetParams}
ARC_CLASSES: dict[str, type[Parametrized[Any]]] = {"task": ArcTask, "set": ArcSetTask}
ARC_REQUIRED = {"task": {"task_id": "0934a4d8"}, "set": {}}  # what the constructor needs besides the bad value
# (which, parameter, bad value, words of the message: the range or the type it takes)
ARC_BAD: list[tuple[str, str, Any, str]] = [
    ("set", "workers", 0, ">= 1 and <= 1024"),
    ("set", "workers", -1, ">= 1 and <= 1024"),
    ("set", "workers", 1025, ">= 1 and <= 1024"),
    ("set", "workers", 10**9, ">= 1 and <= 1024"),
    ("set", "workers", 2**64, "finite"),
    ("set", "workers", True, "takes an integer or null"),
    ("set", "workers", "2", "takes an integer or null"),
    ("set", "workers", 2.5, "takes an integer or null"),
    ("set", "workers", math.nan, "finite"),
    ("set", "progress", 1, "takes true or false"),
    ("set", "progress", None, "takes true or false"),
    ("set", "split", "test", "one of 'evaluation', 'training'"),
    ("set", "split", None, "one of 'evaluation', 'training'"),
    ("set", "data_dir", 3, "takes text or null"),
    ("set", "data_dir", ["/tmp"], "takes text or null"),
    ("task", "split", "test", "one of 'training', 'evaluation'"),
    ("task", "split", "Training", "one of 'training', 'evaluation'"),
    ("task", "split", 0, "one of 'training', 'evaluation'"),
    ("task", "data_dir", 3, "takes text or null"),
    ("task", "data_dir", Path("/tmp"), "takes text or null"),
    ("task", "task_id", "", "an ARC task id"),
    ("task", "task_id", "../0934a4d8", "an ARC task id"),
    ("task", "task_id", "0934a4d8\x00", "an ARC task id"),
    ("task", "task_id", 934, "takes text"),
    ("task", "task_id", None, "takes text"),
    ("task", "task_id", "x" * 5000 + "/", "an ARC task id"),  # shown cut to 60 characters
]


def _arc_builds(which: str, name: str, value: Any) -> list[Any]:
    """The three doors: the constructor, make() of a registered id (task_id comes from the id), the declaration."""
    given = {**ARC_REQUIRED[which], name: value}
    return [lambda: ARC_CLASSES[which](**given), lambda: make(ARC_ID[which], **{name: value}),
            lambda: ARC_DECLARATIONS[which](**given)]


@pytest.mark.parametrize(("which", "name", "value", "words"), ARC_BAD,
                         ids=[f"{w}-{n}-{str(v)[:12]}" for w, n, v, _ in ARC_BAD])
def test_arc_a_bad_value_is_one_config_error_naming_parameter_value_and_range(which: str, name: str, value: Any,
                                                                               words: str) -> None:
    for build in _arc_builds(which, name, value):
        with pytest.raises(ConfigError) as exc:
            build()
        text = _one_line(exc, name)
        assert words in text, text
        shown = repr(value)
        assert (shown if len(shown) <= 60 else shown[:57]) in text or words == "finite", text


@pytest.mark.parametrize("which", sorted(ARC_ID))
def test_arc_unknown_and_repeated_names_and_extra_positions_are_config_errors(which: str) -> None:
    cls = ARC_CLASSES[which]
    for build in (lambda: cls(**ARC_REQUIRED[which], no_such_param=1), lambda: make(ARC_ID[which], no_such_param=1)):
        with pytest.raises(ConfigError, match="no parameter 'no_such_param'") as exc:
            build()
        _one_line(exc, "data_dir")  # the message lists the parameters there are
    with pytest.raises(ConfigError, match="positional"):
        cls("0934a4d8", "evaluation")
    with pytest.raises(ConfigError, match="given twice"):
        cls("evaluation", split="training") if which == "set" else cls("0934a4d8", task_id="0934a4d8")


def test_arc_task_id_is_required_and_the_signature_says_so() -> None:
    with pytest.raises(ConfigError, match="parameter task_id is required") as exc:
        ArcTask()
    _one_line(exc, "task_id")
    sig = inspect.signature(ArcTask)
    assert list(sig.parameters) == ["task_id", "split", "data_dir"]
    assert sig.parameters["task_id"].default is inspect.Parameter.empty
    assert sig.parameters["task_id"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert sig.parameters["split"].kind is inspect.Parameter.KEYWORD_ONLY
    assert list(inspect.signature(ArcSetTask).parameters) == ["split", "data_dir", "workers", "progress"]


def test_an_arc_task_records_the_split_its_data_resolve_and_rebuilds_from_its_spec() -> None:
    found = ArcTask("0934a4d8")
    given = ArcTask("0934a4d8", split="evaluation")
    assert found.params.split is None and found.split is None and found.params.task_id == "0934a4d8"
    assert found.spec.params == given.spec.params == {"task_id": "0934a4d8", "split": "evaluation", "data_dir": None}
    assert found.get_params() == {"task_id": "0934a4d8", "split": None, "data_dir": None}  # as given
    assert repr(found) == "ArcTask(task_id='0934a4d8', split=None, data_dir=None)"  # as before the declaration
    rebuilt = make(found.spec)
    assert rebuilt.spec == found.spec and rebuilt.params.split == "evaluation"
    again = pickle.loads(pickle.dumps(found))
    assert again.params == found.params and again.spec == found.spec
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.params.split = "training"  # type: ignore[misc]
    with pytest.raises(ConfigError, match="no ARC-AGI-2 task"):  # a split that does not hold the id: the data say so
        _ = ArcTask("0934a4d8", split="training").spec


def test_a_set_task_leaves_workers_and_progress_out_of_its_spec_but_keeps_them() -> None:
    plain = ArcSetTask()
    busy = ArcSetTask("evaluation", workers=3, progress=False)
    assert busy.params.workers == 3 and busy.workers == 3 and busy.progress is False
    assert busy.spec == plain.spec and busy.spec.params == {"split": "evaluation", "data_dir": None}
    assert busy.get_params() == {"split": "evaluation", "data_dir": None, "workers": 3, "progress": False}
    assert repr(busy) == "ArcSetTask(split='evaluation', data_dir=None, workers=3, progress=False)"
    assert make("arc_agi_2/eval-v1", **busy.get_params()).workers == 3  # what was given rebuilds it
    assert make(busy.spec).spec == busy.spec and make(busy.spec).workers is None  # the spec rebuilds its identity
    assert make("arc_agi_2/training-v1", workers=1024).spec.params == {"split": "training", "data_dir": None}
    again = pickle.loads(pickle.dumps(busy))
    assert again.params == busy.params and again.spec == busy.spec


# What --params listed before ARC's declaration (`reasearch tasks ID --params --json` at 15b309f): (name, default).
ARC_BEFORE = {"task": [("split", None), ("data_dir", None)],
              "set": [("split", "evaluation"), ("data_dir", None), ("workers", None), ("progress", True)]}
ARC_RANGES = {"task": {"split": "one of 'training', 'evaluation'"},
              "set": {"split": "one of 'evaluation', 'training'", "workers": ">= 1 and <= 1024"}}


@pytest.mark.parametrize("which", sorted(ARC_ID))
def test_arc_params_listing_has_the_names_and_defaults_of_before(which: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["tasks", ARC_ID[which], "--params", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["default"]) for r in rows] == ARC_BEFORE[which]
    assert {r["name"]: r["range"] for r in rows} == {n: ARC_RANGES[which].get(n, "") for n, _ in ARC_BEFORE[which]}
    assert all(r["meaning"] for r in rows)
    assert cli.main(["tasks", ARC_ID[which], "--params"]) == 0
    out = capsys.readouterr().out
    assert all(n in out for n, _ in ARC_BEFORE[which])


@pytest.mark.parametrize(("which", "arg", "words"), [
    ("set", "workers=0", ">= 1"), ("set", "workers=-1", ">= 1"), ("set", "workers=true", "takes an integer"),
    ("set", 'workers="2"', "takes an integer"), ("set", "workers=1e400", "finite"),
    ("set", f"workers={2**70}", "finite"), ("set", "workers=NaN", "finite"), ("set", "workers=100000", "<= 1024"),
    ("set", "progress=3", "true or false"), ("set", "split=test", "one of"), ("set", "no_such_param=1", "no parameter"),
    ("set", "data_dir=3", "text or null"), ("task", "split=test", "one of"), ("task", "split=7", "one of"),
    ("task", "data_dir=[1]", "text or null"), ("task", "task_id=", "an ARC task id"),
    ("task", "task_id=a/b", "an ARC task id"), ("task", "no_such_param=1", "no parameter"),
])
def test_the_cli_refuses_a_bad_arc_value_with_exit_2(which: str, arg: str, words: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["seed", ARC_ID[which], "-o", str(tmp_path / "seed.py"), "-p", arg])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert arg.split("=")[0] in err and words in err, err
    assert not (tmp_path / "seed.py").exists()


# The two general options ARC needed, on a declaration of their own (what any family may declare).
@dataclass(frozen=True, slots=True)
class _ResolvingParams(TaskParams):
    family: ClassVar[str] = "resolving"

    name: str = field(metadata=meta("a required name."))
    mode: str | None = field(default=None, kw_only=True, metadata=meta("None: resolved.", Range(choices=("a", "b"))))
    threads: int = field(default=1, kw_only=True, metadata=meta("how it runs.", Range(ge=1), in_spec=False))


def test_spec_params_records_resolved_values_checked_and_never_a_value_kept_out_of_the_spec() -> None:
    p = _ResolvingParams("x", threads=4)
    assert spec_params(p) == {"name": "x", "mode": None}  # threads: in_spec=False, whatever its value
    assert spec_params(p, mode="b") == {"name": "x", "mode": "b"}
    with pytest.raises(ConfigError, match=r"parameter mode of resolving takes one of 'a', 'b'.*not 'c'"):
        spec_params(p, mode="c")  # a resolved value is checked like a given one
    for name in ("threads", "nothing"):  # only a declared parameter that the spec records can be resolved
        with pytest.raises(ValueError, match="resolves only declared parameters"):
            spec_params(p, **{name: 2})
