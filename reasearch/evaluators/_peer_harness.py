# reasearch: jail (imported inside the sandbox: see reasearch/engine/_runtime.py)
"""The harness of a peer's task folder (:mod:`reasearch.evaluators.peer_folder`); runs inside the sandbox.

An OpenEvolve or ShinkaEvolve folder's evaluator is code that itself imports and runs the candidate, so it runs
here, in the candidate's jail, with the task's limits, never on the host. The worker has already written the
candidate to ``<scratch>/candidate.py`` and the folder's top-level files (the evaluator among them) beside it.

* OpenEvolve: ``evaluate(program_path)`` of ``evaluator.py``, or its cascade ``evaluate_stage1/2/3`` with the
  thresholds of ``config.yaml`` (as OpenEvolve runs them); the value handed back is what the evaluator *returned*
  (a dict, or an object with ``metrics`` and ``artifacts``, OpenEvolve's ``EvaluationResult``).
* ShinkaEvolve: ``main(program_path, results_dir)`` of ``evaluate.py`` with a fresh results folder. Its
  ``shinka.core.run_shinka_eval`` is provided here (ShinkaEvolve's documented contract: load the program, call
  the experiment function ``num_runs`` times, validate, aggregate, write ``metrics.json``/``correct.json``); the
  value handed back is what that call *returned*. Only an evaluator that never calls it is read back from the
  two files it wrote into the fresh folder.

Trust boundary: none between the evaluator and the candidate (same process, same jail): a candidate can patch
the evaluator, and every result says so. What goes back is cut to plain data of bounded size; the trusted side
(:mod:`reasearch.evaluators.peer_folder`) checks it again before anything becomes a score.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import time
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["peer_harness"]

MAX_KEYS = 64  # metrics and artifacts handed back
MAX_TEXT = 2000  # characters per text value
MAX_FILE = 256 * 1024  # bytes of metrics.json / correct.json read back


def _plain(value: Any, depth: int = 0) -> Any:
    """A bounded, JSON-shaped copy: numbers, booleans, short text, small lists and dicts (nothing else)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if abs(value) < 2**63 else float(value)
    if isinstance(value, float):
        return value
    if isinstance(value, str):
        return value[:MAX_TEXT]
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    item = getattr(value, "item", None)  # a NumPy scalar
    if callable(item) and type(value).__module__ == "numpy" and getattr(value, "ndim", 1) == 0:
        return _plain(item(), depth)
    if depth >= 3:
        return str(type(value).__name__)
    if isinstance(value, Mapping):
        return {str(k)[:100]: _plain(v, depth + 1) for k, v in list(value.items())[:MAX_KEYS]}
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in list(value)[:MAX_KEYS]]
    return repr(value)[:200]


def _load(path: str, name: str) -> types.ModuleType:
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------ OpenEvolve


@dataclass
class EvaluationResult:
    """OpenEvolve's result type, as ``openevolve.evaluation_result`` documents it (metrics and artifacts)."""

    metrics: dict[str, Any]
    artifacts: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, metrics: dict[str, Any]) -> EvaluationResult:
        return cls(metrics=metrics)

    def to_dict(self) -> dict[str, Any]:
        return self.metrics


def _provide_openevolve() -> None:
    """``from openevolve.evaluation_result import EvaluationResult`` works in the jail (the package is not there)."""
    if "openevolve.evaluation_result" in sys.modules:
        return
    package = sys.modules.get("openevolve") or types.ModuleType("openevolve")
    if not hasattr(package, "__path__"):
        package.__path__ = []
    module = types.ModuleType("openevolve.evaluation_result")
    module.EvaluationResult = EvaluationResult  # type: ignore[attr-defined]
    package.evaluation_result = module  # type: ignore[attr-defined]
    sys.modules.setdefault("openevolve", package)
    sys.modules["openevolve.evaluation_result"] = module


def _split(result: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metrics, artifacts) of what an OpenEvolve evaluator returned."""
    if isinstance(result, Mapping):
        return dict(result), {}
    metrics = getattr(result, "metrics", None)
    if isinstance(metrics, Mapping):
        artifacts = getattr(result, "artifacts", None)
        return dict(metrics), dict(artifacts) if isinstance(artifacts, Mapping) else {}
    raise TypeError(f"evaluate() returned {type(result).__name__}; OpenEvolve evaluators return a dict of metrics "
                    "or an EvaluationResult")


def _fitness(metrics: Mapping[str, Any]) -> float | None:
    """OpenEvolve's threshold rule: ``combined_score``, else the average of the numeric metrics but ``error``."""
    score = metrics.get("combined_score")
    if isinstance(score, (int, float)) and not isinstance(score, bool):
        return float(score)
    values = [float(v) for k, v in metrics.items()
              if k != "error" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    return sum(values) / len(values) if values else None


def _openevolve(program: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    _provide_openevolve()
    module = _load(os.path.abspath(str(payload["evaluator"])), "evaluation_module")
    stages = [getattr(module, f"evaluate_stage{i}", None) for i in (1, 2, 3)]
    if payload.get("cascade", True) and callable(stages[0]):
        thresholds = [float(t) for t in payload.get("thresholds") or ()]
        metrics, artifacts = _split(stages[0](program))
        ran = 1
        for i, stage in enumerate(stages[1:]):
            if not callable(stage) or i >= len(thresholds):
                break
            passed = _fitness(metrics)
            if passed is None or not passed >= thresholds[i]:
                break
            more, more_artifacts = _split(stage(program))
            metrics = {k: v for k, v in metrics.items() if k != "error"}
            metrics.update({k: v for k, v in more.items() if k != "error"})
            if "error" in more:
                metrics["error"] = more["error"]
            artifacts.update(more_artifacts)
            ran += 1
        stage_text = f"cascade: {ran} of {sum(callable(s) for s in stages)} stages"
    else:
        evaluate = getattr(module, "evaluate", None)
        if not callable(evaluate):
            raise AttributeError(f"{payload['evaluator']} defines no evaluate(program_path)")
        metrics, artifacts = _split(evaluate(program))
        stage_text = "evaluate()"
    return {"metrics": _plain(metrics), "artifacts": _plain(artifacts), "ran": stage_text}


# ------------------------------------------------------------------------------------------ ShinkaEvolve


class _Shinka:
    """``shinka.core.run_shinka_eval`` as ShinkaEvolve documents it; remembers what its last call returned."""

    def __init__(self) -> None:
        self.returned: tuple[Any, Any, Any] | None = None

    def run_shinka_eval(self, program_path: str, results_dir: str, experiment_fn_name: str, num_runs: int = 1,
                        get_experiment_kwargs: Callable[[int], dict[str, Any]] | None = None,
                        aggregate_metrics_fn: Callable[[list[Any]], dict[str, Any]] | None = None,
                        validate_fn: Callable[[Any], tuple[bool, str | None]] | None = None,
                        default_metrics_on_error: dict[str, Any] | None = None) -> tuple[dict[str, Any], bool, Any]:
        correct, error = True, None
        results: list[Any] = []
        times: list[float] = []
        errors: list[str] = []
        try:
            fn = getattr(_load(program_path, "program"), experiment_fn_name, None)
            if not callable(fn):
                raise AttributeError(f"experiment function {experiment_fn_name!r} not found in {program_path}")
            for i in range(int(num_runs)):
                kwargs = ({**get_experiment_kwargs(i), "file_path": program_path} if get_experiment_kwargs
                          else {"seed": i + 1})
                start = time.perf_counter()
                out = fn(**kwargs)
                times.append(time.perf_counter() - start)
                results.append(out)
                if validate_fn is not None:
                    ok, why = validate_fn(out)
                    if not ok:
                        correct = False
                        if why and error is None:
                            error = f"Validation failed: {why}"
                        if why and why not in errors:
                            errors.append(str(why))
            metrics: dict[str, Any] = (dict(aggregate_metrics_fn(results)) if aggregate_metrics_fn
                                       else {"num_successful_runs": len(results)})
            metrics["execution_time_mean"] = sum(times) / len(times) if times else 0.0
            if validate_fn is not None:
                metrics["all_validation_errors"] = errors
        except Exception as exc:  # noqa: BLE001 - the documented contract: an error is a result, not a raise
            metrics = dict(default_metrics_on_error or {"combined_score": 0.0})
            correct, error = False, f"{type(exc).__name__}: {exc}"
        metrics.pop("extra_data", None)  # ShinkaEvolve pickles it; nothing is pickled here
        os.makedirs(results_dir, exist_ok=True)
        for name, data in (("correct.json", {"correct": correct, "error": error}), ("metrics.json", metrics)):
            with open(os.path.join(results_dir, name), "w", encoding="utf-8") as f:
                json.dump(_plain(data), f)
        self.returned = (metrics, correct, error)
        return metrics, correct, error


def _provide_shinka(shinka: _Shinka) -> None:
    for name in ("shinka", "shinka.core", "shinka.core.wrap_eval"):
        module = types.ModuleType(name)
        module.__path__ = []
        module.run_shinka_eval = shinka.run_shinka_eval  # type: ignore[attr-defined]
        sys.modules[name] = module
    sys.modules["shinka"].core = sys.modules["shinka.core"]  # type: ignore[attr-defined]
    sys.modules["shinka.core"].wrap_eval = sys.modules["shinka.core.wrap_eval"]  # type: ignore[attr-defined]


def _read_json(path: str) -> Any:
    with open(path, "rb") as f:
        data = f.read(MAX_FILE + 1)
    if len(data) > MAX_FILE:
        raise ValueError(f"{os.path.basename(path)} is over {MAX_FILE} bytes")
    return json.loads(data)


def _shinka(program: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    shinka = _Shinka()
    _provide_shinka(shinka)
    results_dir = os.path.abspath(f"results_{os.urandom(8).hex()}")
    os.mkdir(results_dir)  # fresh and empty: a file the candidate wrote before does not exist here
    module = _load(os.path.abspath(str(payload["evaluator"])), "evaluate_module")
    main = getattr(module, "main", None)
    if not callable(main):
        raise AttributeError(f"{payload['evaluator']} defines no main(program_path, results_dir)")
    main(program, results_dir)
    if shinka.returned is not None:  # what the evaluator's run_shinka_eval returned, not the files
        metrics, correct, error = shinka.returned
        source = "returned"
    else:
        try:
            metrics = _read_json(os.path.join(results_dir, "metrics.json"))
            verdict = _read_json(os.path.join(results_dir, "correct.json"))
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"evaluate.py's main() wrote no readable metrics.json and correct.json: {exc}") from None
        correct = verdict.get("correct") if isinstance(verdict, dict) else None
        error = verdict.get("error") if isinstance(verdict, dict) else "correct.json is not an object"
        source = "files"
    return {"metrics": _plain(metrics), "correct": correct is True, "error": _plain(error), "ran": source}


def peer_harness(entry: Callable[..., Any], payload: Mapping[str, Any]) -> Any:
    """Runs the folder's own evaluator on ``candidate.py`` (``entry``, the candidate's first function, is unused)."""
    program = os.path.abspath("candidate.py")
    if payload.get("kind") == "openevolve":
        return _openevolve(program, payload)
    return _shinka(program, payload)
