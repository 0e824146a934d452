"""Small real tasks for tests of the engine and of drivers (not in the registry: construct them directly).

:class:`ToyTask` asks for a vector ``x`` of ``dim`` numbers and scores ``-sum((x - target)**2)``
(maximize; 0 is the optimum). Its candidates run in the sandbox like any task's, its scoring is
exact, and it imports nothing heavy, so a test can evaluate many candidates in little time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from reasearch.engine.files import UntrustedFileError, read_untrusted
from reasearch.evaluators._toy_harness import toy_harness
from reasearch.evaluators.base import Task
from reasearch.evaluators.params import Range, meta
from reasearch.evaluators.result import EvalResult
from reasearch.evaluators.spec import TaskSpec
from reasearch.evaluators.training import TrainingParams, TrainingTask, experiments_root

__all__ = ["TOY_TRAIN", "ToyRepoTrainingTask", "ToyTask", "ToyTrainingTask", "toy_harness", "toy_candidate",
           "install_on_path", "install_task_package"]


def install_on_path(site: Path, name: str, version: str, entry_points: dict[str, dict[str, str]],
                    files: dict[str, str] | None = None) -> Path:
    """Makes ``site`` (a folder to put on ``sys.path``) hold an installed distribution: ``files`` (relative path ->
    text) and a ``.dist-info`` with its entry points (group -> name -> value), as an installer would write them."""
    for rel, text in (files or {}).items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text, encoding="utf-8")
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n" for group, eps in entry_points.items()),
        encoding="utf-8")
    return info


def install_task_package(project: Path, site: Path) -> Path:
    """Installs a task package's source tree (its ``pyproject.toml`` and the packages it names) into ``site``,
    the way ``pip install`` would for a pure-Python package (without pip: nothing enters the shared venv)."""
    import shutil
    import tomllib

    doc = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    meta = doc["project"]
    for package in doc["tool"]["setuptools"]["packages"]:
        shutil.copytree(project / package, site / package, ignore=shutil.ignore_patterns("__pycache__"))
    return install_on_path(site, meta["name"], meta["version"], meta.get("entry-points", {}))


def toy_candidate(values: list[float], *, sleep_s: float = 0.0) -> str:
    """Source of a candidate whose ``run()`` returns ``values`` (after sleeping ``sleep_s``)."""
    lines = ["import time", "", "", "def run():"]
    if sleep_s > 0:
        lines.append(f"    time.sleep({float(sleep_s)!r})")
    lines.append(f"    return {[float(v) for v in values]!r}")
    return "\n".join(lines) + "\n"


class ToyTask(Task):
    """Maximize ``-sum((x - target)**2)`` over a returned vector ``x`` of length ``dim``.

    Args:
        dim: length of the vector.
        target: the optimum's coordinate (every coordinate).
        deterministic: False declares the task nondeterministic (then it is never cached), as a
            timed task would.
        time_limit_s: wall limit of one evaluation.
    """

    harness = "reasearch.evaluators._toy_harness:toy_harness"  # the jail gets only marked modules

    def __init__(
        self, dim: int = 4, target: float = 3.0, deterministic: bool = True, time_limit_s: float = 10.0
    ) -> None:
        self.dim = dim
        self.target = target
        self.deterministic = deterministic
        self.time_limit_s = time_limit_s

    def _make_spec(self) -> TaskSpec:
        if int(self.dim) < 1:
            raise ValueError(f"dim must be >= 1, not {self.dim}")
        suffix = "" if self.deterministic else "-nondet"
        return TaskSpec(
            id=f"toy/quadratic-d{int(self.dim)}{suffix}-v1",
            version=1,
            direction="maximize",
            time_limit_s=float(self.time_limit_s),
            memory_mb=512,
            entry_point="run",
            deterministic=bool(self.deterministic),
            seed_score=-float(self.dim) * float(self.target) ** 2,
            seed_score_rtol=0.0,
            params=self.get_params(),
        )

    def describe(self) -> str:
        return (f"Define run() returning a list of {self.dim} numbers x. Score: -sum((x_i - {self.target})^2), "
                "to maximize; 0 is the optimum.")

    def seed_program(self) -> str:
        return toy_candidate([0.0] * int(self.dim))

    def score_solution(self, data: Any, *, seed: int | None = None) -> EvalResult:
        if not isinstance(data, list) or len(data) != int(self.dim):
            return self.invalid(f"run() must return a list of {self.dim} numbers, got {type(data).__name__}"
                                + (f" of length {len(data)}" if isinstance(data, list) else ""))
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in data):
            return self.invalid("every entry must be a finite number")
        score = -math.fsum((float(v) - float(self.target)) ** 2 for v in data)
        return self.result(score, metrics={"distance": math.sqrt(-score)}, solution={"x": [float(v) for v in data]},
                           feedback=f"distance to the optimum: {math.sqrt(-score):.6g}")


class ToyTrainingTask(ToyTask):
    """:class:`ToyTask` priced like a training task: each evaluation costs one experiment plus
    GPU-seconds equal to its wall time as the trusted side measured it (a stand-in for a training
    run's lease on a GPU slot). Declares ``budget_estimate`` and ``evaluation_costs``, the hooks
    through which a task tells the run ledger what its evaluations cost."""

    def _make_spec(self) -> TaskSpec:
        spec = ToyTask._make_spec(self)
        return TaskSpec(**{**spec.to_dict(), "id": spec.id.replace("toy/quadratic", "toy/training")})

    def budget_estimate(self) -> dict[str, float]:
        """Checked against the caps before an evaluation runs."""
        return {"experiments": 1.0, "gpu_seconds": 0.0}

    def evaluation_costs(self, result: EvalResult) -> dict[str, float]:
        """Debited with the result, in the same transaction."""
        return {"experiments": 1.0, "gpu_seconds": float(result.wall_s)}


TOY_TRAIN = '''"""Toy training: 'trains' x towards the target by reading settings.json, then saves it."""
import json, os, time

settings = json.load(open("settings.json"))
print(json.dumps({"step": 0, "loss": 1.0}), flush=True)
time.sleep(float(settings.get("sleep_s", 0.0)))
os.makedirs(os.environ["REASEARCH_OUT_DIR"], exist_ok=True)
with open(os.path.join(os.environ["REASEARCH_OUT_DIR"], "x.json"), "w") as fh:
    json.dump({"x": settings["x"]}, fh)
print(json.dumps({"step": 1, "loss": 0.5}), flush=True)
'''


@dataclass(frozen=True, slots=True)
class ToyRepoTrainingParams(TrainingParams):
    """The parameters of ``toy/repo-training-v1`` (constructor, ``--params`` and ``spec.params`` come from here)."""

    family: ClassVar[str] = "toy/repo-training-v1"

    target: float = field(default=3.0, metadata=meta(
        'the x that scores 0 (the best).'))
    time_budget_s: float = field(default=10.0, kw_only=True, metadata=meta(
        'training seconds of one experiment unless it asks for another budget.'))
    max_time_budget_s: float = field(default=60.0, kw_only=True, metadata=meta(
        'the most one experiment may ask for.'))
    grace_s: float = field(default=2.0, kw_only=True, metadata=meta(
        "at most this long to save after the budget's SIGTERM.", Range(ge=0)))
    memory_mb: int = field(default=1024, kw_only=True, metadata=meta(
        'address-space limit of CPU jobs.'))


class ToyRepoTrainingTask(TrainingTask[ToyRepoTrainingParams]):
    """A repository task without torch, for tests of experiments, slots and the agent's tools.

    ``train.py`` reads ``settings.json`` (``{"x": ..., "sleep_s": ...}``) and saves ``x``; the score is
    ``-(x - target)**2`` (maximize). Its data folder is an empty world-readable folder.
    """

    def _make_spec(self) -> TaskSpec:
        p = self.params
        return TaskSpec(id="toy/repo-training-v1", version=1, direction="maximize",
                        time_limit_s=float(p.max_time_budget_s) + float(p.grace_s), memory_mb=int(p.memory_mb),
                        entry_point="train.py", deterministic=False, params=self.get_params())

    def describe(self) -> str:
        return "Edit settings.json so that train.py saves x close to the target; the score is -(x - target)^2."

    def seed_files(self) -> dict[str, str]:
        return {"train.py": TOY_TRAIN, "settings.json": '{"x": 0.0, "sleep_s": 0.0}\n'}

    def train_data_dir(self) -> Path:
        path = experiments_root() / "toy-data"
        path.mkdir(mode=0o755, exist_ok=True)
        return path

    def score_solution(self, data: Any, *, seed: int | None = None) -> EvalResult:
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("x"), (int, float))
            or isinstance(data.get("x"), bool)
            or not math.isfinite(data["x"])
        ):
            return self.invalid("expected {'x': a finite number}")
        return self.result(-(float(data["x"]) - float(self.params.target)) ** 2, metrics={"x": float(data["x"])})

    def trusted_evaluation(self, *, exp_dir: Path, repo_dir: Path, ckpt_dir: Path, lease: Any) -> EvalResult:
        import json

        try:
            data = json.loads(read_untrusted(ckpt_dir, "x.json", max_bytes=4096))
        except UntrustedFileError as exc:
            return self.invalid(f"train.py saved no readable x.json: {exc}")
        except ValueError:
            return self.invalid("x.json is not JSON")
        return self.score_solution(data)
