"""Families whose parameters are one frozen declaration (issue 42 item 5): a bad value is one ConfigError naming
the parameter, the value and what it takes, whether it comes through the constructor, ``make()``, the
declaration itself or the command line (exit 2); ``--params`` lists the declaration."""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
from pathlib import Path
from typing import Any

import pytest

from reasearch import cli
from reasearch.errors import ConfigError
from reasearch.evaluators import make
from reasearch.evaluators.atari.task import AtariParams, AtariTask
from reasearch.evaluators.circle_packing.task import CirclePackingParams, CirclePackingTask
from reasearch.evaluators.eplb.task import EplbParams, EplbTask
from reasearch.evaluators.heilbronn.task import HeilbronnParams, HeilbronnTask
from reasearch.evaluators.img.task import ImageFolderParams, ImageFolderTask
from reasearch.evaluators.nanogpt.task import NanoGPTParams, NanoGPTTask
from reasearch.evaluators.params import Parametrized, TaskParams
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


def test_every_built_in_family_but_arc_declares_its_parameters_once() -> None:
    """ARC is left: its spec.params record the split its data resolve (split=None -> "evaluation"), not the one
    given, so a declaration would change its identity."""
    from reasearch.evaluators.registry import _load_builtins, family_entries, list_tasks

    _load_builtins()
    families = {task_id.split("/", 1)[0] for task_id in list_tasks(include_families=True, expand=False)}
    undeclared = sorted({entry.id for family in families for entry in family_entries(family)
                         if not issubclass(entry.load(), Parametrized)})
    assert undeclared and all(i.startswith("arc_agi_2/") for i in undeclared), undeclared
    declared = {entry.load().params_type.family for family in families - {"arc_agi_2"}
                for entry in family_entries(family)}
    assert declared == set(FAMILIES), declared  # and every one of them is tested above
