"""``openevolve`` and ``gepa``: the published packages' own loops as methods of a run (``shinka``: shinka_loop.py).

* ``openevolve`` runs OpenEvolve's ``run_evolution`` with its published defaults but for these
  settings: its LLM is this run's :class:`~reasearch.methods._proxy.MeteringProxy` (every call reserved,
  journaled and debited on the run's ledger), its ``max_iterations`` is the run's evaluation budget less
  the initial program's evaluation plus ``MAX_IDLE`` (an iteration whose reply holds no usable diff, or
  repeats a stored program, spends nothing: the loop goes on until the budget is spent or that allowance
  is used up, its stall rule; once the budget is spent its model calls are refused), and its LLM
  ``retries`` are 0 (our model client retries behind the proxy; a refused call must fail at once), and its
  system message is the task's description (as OpenEvolve's examples write it; every method's model is told
  the problem). Its ``evaluator.py`` posts each program path to the proxy,
  which evaluates it through :meth:`Run.evaluate` (sandbox, budget, cache, store) and answers in
  OpenEvolve's shape (:func:`~reasearch.adapters.openevolve.openevolve_fields`); once the budget is
  spent a program gets a failed result (``combined_score`` 0.0) without running.
* ``gepa`` runs ``gepa.optimize`` with its published defaults on :func:`~reasearch.adapters.gepa_run.gepa_for_run`
  (student calls on the run's ledger, a stop at its cap); its reflection model is a callable that
  calls this run's model through :meth:`MethodDriver.ask` (the same accounting). Every full validation
  GEPA makes is validated through the run too (its calls are repeats, free), so each is a run evaluation
  on the curve at the spend it happened; GEPA's best prompt is validated last, so the run's final
  candidate is GEPA's.

A package that is not installed is a ``ConfigError`` naming the install line, raised before a run exists.

Trust boundary: the peer packages are trusted code the user installed; the programs and prompts they
propose are not (sandbox and metered student only, as every method's).
"""

from __future__ import annotations

import importlib.util
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasearch.errors import BudgetExceededError, ConfigError
from reasearch.evaluators.base import CandidateKind
from reasearch.evaluators.kinds import ProgramKind, PromptKind
from reasearch.methods._driver import MAX_IDLE, MethodDriver
from reasearch.methods._peer_common import continue_after_record, evaluate_program, kill_groups, prestart_sandbox
from reasearch.methods._proxy import MeteringProxy
from reasearch.runs.ledger import Unit

__all__ = ["KINDS", "PACKAGES", "GepaConfig", "OpenEvolveConfig", "gepa_method", "openevolve_method", "require_package"]

# method -> (import name, the extra that installs it); shinka's runs in a Python of its own (methods.shinka_loop)
PACKAGES = {"openevolve": ("openevolve", "openevolve"), "gepa": ("gepa", "gepa"), "shinka": ("shinka", "shinka")}
# the kind of task each peer optimizes, by its name (``TaskKind.name``)
KINDS: dict[str, CandidateKind] = {"openevolve": ProgramKind.name, "gepa": PromptKind.name, "shinka": ProgramKind.name}


def require_package(method: str) -> None:
    """Raises ConfigError with the install line when ``method``'s package is not importable."""
    if method == "shinka":
        from reasearch.methods.shinka_loop import shinka_python

        shinka_python()
        return
    module, extra = PACKAGES[method]
    if importlib.util.find_spec(module) is None:
        raise ConfigError(f"the {method} method needs its package: pip install 'reasearch[{extra}]'")


@dataclass(frozen=True, slots=True)
class OpenEvolveConfig:
    """Settings of ``openevolve`` (everything else is OpenEvolve's published default).

    Attributes:
        diff_based_evolution: None keeps OpenEvolve's default (diffs); False asks for whole programs.
        parallel_evaluations: OpenEvolve's worker processes (its ``evaluator.parallel_evaluations``; None
            keeps its default, 1). Their model calls and evaluations reach the run's proxy at once, each
            reserved against the run's caps.
    """

    diff_based_evolution: bool | None = None
    parallel_evaluations: int | None = None

    def __post_init__(self) -> None:
        n = self.parallel_evaluations
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 256):
            raise ConfigError(f"openevolve parallel_evaluations is a whole number from 1 to 256, not {n!r}")
        require_package("openevolve")

    def to_dict(self) -> dict[str, Any]:
        return {"diff_based_evolution": self.diff_based_evolution, "parallel_evaluations": self.parallel_evaluations}


@dataclass(frozen=True, slots=True)
class GepaConfig:
    """Settings of ``gepa`` (none: GEPA's published defaults, the run's budget as its stop)."""

    def __post_init__(self) -> None:
        require_package("gepa")

    def to_dict(self) -> dict[str, Any]:
        return {}


_EVALUATOR = '''"""OpenEvolve evaluator of a reasearch run: each program is evaluated by the run \
(its sandbox and budget)."""

import json
import urllib.request

URL = {url!r}
TOKEN = {token!r}


def evaluate(program_path):
    request = urllib.request.Request(URL, data=json.dumps({{"program_path": str(program_path)}}).encode(),
                                     headers={{"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"}})
    with urllib.request.urlopen(request, timeout=3600) as response:
        data = json.loads(response.read())
    from openevolve.evaluation_result import EvaluationResult

    return EvaluationResult(metrics=data["metrics"], artifacts=data["artifacts"])
'''


# OpenEvolve installs a SIGINT handler (main thread only) and forks workers: its loop runs in a process of
# its own, reaching the run only through the proxy.
_OPENEVOLVE_MAIN = """
import sys
from openevolve import run_evolution
run_evolution("initial_program.py", "evaluator.py", config="config.yaml", output_dir="out", cleanup=False)
"""


def _run_peer(folder: Path, code: str, procs: list[Any]) -> None:
    """Runs ``code`` in a fresh interpreter in ``folder`` (its output in ``peer.log``); a failure raises with
    its tail."""
    import subprocess
    import sys

    log = folder / "peer.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=folder, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)  # its workers: one group
        procs.append(proc)
        rc = proc.wait()
    if rc != 0:
        tail = log.read_text(encoding="utf-8", errors="replace")[-800:]
        raise RuntimeError(f"the peer's loop exited {rc}: {tail}")


def openevolve_method(driver: MethodDriver, config: OpenEvolveConfig) -> str:
    """Runs OpenEvolve's own loop on ``driver``'s run; returns why it stopped."""
    from reasearch.adapters.openevolve import openevolve_fields

    if not isinstance(driver.kind, ProgramKind):
        raise ConfigError(f"the openevolve method drives program tasks; {driver.spec.id} is a {driver.kind.name} task")
    continue_after_record(driver)
    left = driver.run.remaining().get(driver.unit)
    spent_reason = f"the {driver.unit.value} budget is spent"
    iterations: int | None = None  # uncapped: OpenEvolve's own max_iterations
    if left is not None:
        budget = int(left // max(driver.needed, 1e-9))
        if budget < 1:
            return spent_reason
        # The initial program is one evaluation, unless a resumed run already holds it (a repeat is free).
        # Iterations that spend nothing (no usable diff, a repeat) are not the budget: MAX_IDLE more of them.
        iterations = (budget if driver.seen(driver.task.seed_program()) is not None else budget - 1) + MAX_IDLE
    evaluated: list[int] = []

    def spent() -> str | None:
        return spent_reason if driver.stop_reason() == spent_reason else None

    def evaluate(program_path: str) -> dict[str, Any]:
        result = evaluate_program(driver, program_path, note="openevolve", spent=spent, evaluated=evaluated)
        metrics, artifacts = openevolve_fields(result, driver.spec)
        return {"metrics": metrics, "artifacts": artifacts}

    proxy = MeteringProxy(driver, evaluate=evaluate, note="openevolve", refuse=spent)
    prestart_sandbox(driver)  # the jail starts while OpenEvolve imports and forks its workers
    with tempfile.TemporaryDirectory(prefix="reasearch-openevolve-") as tmp:
        folder = Path(tmp)
        (folder / "evaluator.py").write_text(_EVALUATOR.format(url=f"http://127.0.0.1:{proxy.port}/reasearch/evaluate",
                                                               token=proxy.token), encoding="utf-8")
        (folder / "initial_program.py").write_text(driver.task.seed_program(), encoding="utf-8")
        settings: dict[str, Any] = {
            "random_seed": int(driver.run.seed),
            "llm": {"api_base": proxy.url, "api_key": proxy.token, "retries": 0, "timeout": 600,
                    "models": [{"name": proxy.model_name, "weight": 1.0}]}}
        # The task's description as OpenEvolve's system message (as its own examples do): the problem every other
        # method's model is told.
        settings["prompt"] = {"system_message": driver.task.describe()}
        if iterations is not None:
            settings["max_iterations"] = iterations
        if config.diff_based_evolution is not None:
            settings["diff_based_evolution"] = bool(config.diff_based_evolution)
        if config.parallel_evaluations is not None:
            settings["evaluator"] = {"parallel_evaluations": int(config.parallel_evaluations)}
        (folder / "config.yaml").write_text(json.dumps(settings), encoding="utf-8")  # JSON is YAML
        procs: list[Any] = []
        try:
            proxy.serve(lambda: _run_peer(folder, _OPENEVOLVE_MAIN, procs))
        finally:  # interrupted, or the model failed: the peer's process (and its workers' parent) ends with us
            kill_groups(procs)  # the whole group: OpenEvolve's forked workers outlive a killed parent
    reason = driver.stop_reason()
    if reason is not None:
        return reason
    return (f"stopped: openevolve ran out of iterations (the budget + {MAX_IDLE} for replies with no usable or new "
            f"program) after {len(evaluated)} evaluations, {proxy.calls} model calls, {proxy.refused} refused")


class _DriverCaller:
    """The run's student ledger at the driver's next step (one step sequence for model and student calls)."""

    def __init__(self, driver: MethodDriver) -> None:
        self.driver = driver

    def call_batch(self, requests: Any) -> Any:
        from reasearch.runs.students import StudentLedger

        return StudentLedger(self.driver.run, step=self.driver.next_step()).call_batch(requests)


class _RecordingAdapter:
    """GEPA's adapter, and each full validation GEPA makes becomes a run evaluation at the spend it happened (its
    student calls were just made: the run's validation of the same prompt repeats them, free), so GEPA's curve
    has every validation score, not only its final candidate's."""

    def __init__(self, adapter: Any, driver: MethodDriver, valset_size: int) -> None:
        from reasearch.adapters.gepa import ValidationItem

        self.adapter, self.driver, self.valset_size, self._item = adapter, driver, valset_size, ValidationItem
        self.propose_new_texts = adapter.propose_new_texts

    def evaluate(self, batch: Any, candidate: Any, capture_traces: bool = False) -> Any:
        from reasearch.adapters.gepa import COMPONENT

        out = self.adapter.evaluate(batch, candidate, capture_traces)
        if self.valset_size and len(batch) == self.valset_size and all(isinstance(i, self._item) for i in batch):
            self.driver.evaluate(str(candidate[COMPONENT]), parent=None, note="gepa validation")
        return out

    def make_reflective_dataset(self, candidate: Any, eval_batch: Any, components_to_update: Any) -> Any:
        return self.adapter.make_reflective_dataset(candidate, eval_batch, components_to_update)


def gepa_method(driver: MethodDriver, config: GepaConfig) -> str:
    """Runs GEPA's own loop on ``driver``'s run (a prompt task); returns why it stopped."""
    import gepa  # type: ignore[import-not-found,unused-ignore]

    from reasearch.adapters.gepa import COMPONENT
    from reasearch.adapters.gepa_run import gepa_for_run

    if not isinstance(driver.kind, PromptKind):
        raise ConfigError(f"the gepa method drives prompt tasks; {driver.spec.id} is a {driver.kind.name} task")
    continue_after_record(driver)
    kwargs = gepa_for_run(driver.run, caller=_DriverCaller(driver))
    kwargs["adapter"] = _RecordingAdapter(kwargs["adapter"], driver, len(kwargs["valset"]))
    refused: list[str] = []

    def reflection_lm(prompt: Any) -> str:
        try:
            return driver.ask("", prompt if isinstance(prompt, str) else json.dumps(prompt, default=str),
                              note="gepa reflection")
        except BudgetExceededError as exc:
            refused.append(str(exc))
            raise

    def money_spent(gepa_state: Any = None) -> bool:
        left = driver.run.remaining()
        caps = [left.get(u) for u in (Unit.MODEL_CALLS, Unit.TOKENS, Unit.DOLLARS)]
        return bool(refused) or any(v is not None and v <= 0 for v in caps)

    spent: list[float] = []

    def idle(gepa_state: Any = None) -> bool:  # GEPA iterations that spend no student call (repeats are free)
        spent.append(float(driver.run.used().get(driver.unit) or 0.0))
        return len(spent) > MAX_IDLE and spent[-1] == spent[-1 - MAX_IDLE]

    seed = driver.task.seed_program()
    kwargs["stop_callbacks"] = [*kwargs["stop_callbacks"], money_spent, idle]
    best = seed
    try:
        result = gepa.optimize(seed_candidate={COMPONENT: seed}, reflection_lm=reflection_lm, seed=int(driver.run.seed),
                               **kwargs)
        chosen: Any = result.best_candidate
        best = str(chosen[COMPONENT])
    except BudgetExceededError:
        pass
    driver.evaluate(best, parent=None, note="gepa best")
    if refused:
        return refused[0]
    if len(spent) > MAX_IDLE and spent[-1] == spent[-1 - MAX_IDLE]:
        return f"{MAX_IDLE} GEPA iterations in a row spent nothing (no new candidate)"
    return driver.stop_reason() or "gepa stopped"
