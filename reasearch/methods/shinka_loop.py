"""``shinka``: ShinkaEvolve's own evolution loop as a method of a run.

ShinkaEvolve (shinka-evolve 0.0.7) pins httpx and pillow against this project's own pins, so it lives in a
virtual environment of its own; its loop runs in a subprocess of that environment's Python, found as
:func:`shinka_python` says. That process runs ``ShinkaEvolveRunner`` with the package's published defaults
(``EvolutionConfig``, ``DatabaseConfig``, ``LocalJobConfig``) except:

* its one LLM is this run's :class:`~reasearch.methods._proxy.MeteringProxy`, named as ShinkaEvolve names
  an OpenAI-compatible endpoint (``local/<model>@<url>?api_key_env=...``): every call is reserved,
  journaled and debited on the run's ledger;
* ``num_generations`` is the evaluation budget left (generation 0 is the initial program);
* ``random``, ``numpy.random`` and its model bandit are seeded with the run's seed;
* ``embedding_model`` is None: the default calls OpenAI's embedding API, which the proxy does not serve
  (ShinkaEvolve then skips its embedding-similarity novelty filter, as it does without one);
* the job scheduler is local, its ``evaluate.py`` a stdlib-only script that posts the program path to the
  proxy, which evaluates it through :meth:`Run.evaluate` (sandbox, budget, cache, store) and answers the
  ``correct.json`` and ``metrics.json`` contents of :func:`~reasearch.adapters.shinka.shinka_files`;
* the seed program is wrapped in ``EVOLVE-BLOCK-START``/``END`` comments (ShinkaEvolve edits only inside
  them; a comment changes no score).

Once the run's model budget is spent, ShinkaEvolve's client would retry a refused call for minutes: after
the first refusal the loop is stopped as soon as no evaluation has been asked for or served for
:data:`GRACE_S` (ShinkaEvolve asks for its next proposal while the last paid one is still to be
evaluated; the grace lets that evaluation arrive). Every paid call is recorded. Once the evaluation
budget is spent, a program gets an incorrect result without running.

Trust boundary: ShinkaEvolve is trusted code the user installed; the programs it proposes are not (they
run only in the task's sandbox). Its process reaches the run only through the token-guarded proxy.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasearch.errors import ConfigError
from reasearch.evaluators.kinds import ProgramKind
from reasearch.methods._driver import MethodDriver
from reasearch.methods._peer_common import continue_after_record, evaluate_program, kill_groups, prestart_sandbox
from reasearch.methods._proxy import MeteringProxy
from reasearch.runs.ledger import Unit

__all__ = ["PYTHON_ENV", "SHINKA_VENV_HINT", "ShinkaConfig", "shinka_method", "shinka_python"]

PYTHON_ENV = "REASEARCH_SHINKA_PYTHON"
SHINKA_VENV_HINT = (f"python3 -m venv ~/.venvs/shinka && ~/.venvs/shinka/bin/pip install 'shinka-evolve==0.0.7' "
                    f"&& export {PYTHON_ENV}=~/.venvs/shinka/bin/python")
_TOKEN_ENV = "REASEARCH_PROXY_TOKEN"
_PROBE = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('shinka') else 3)"
_START, _END = "# EVOLVE-BLOCK-START\n", "# EVOLVE-BLOCK-END\n"
GRACE_S = 3.0  # after a refused model call: quiet seconds on the evaluation endpoint before the loop is stopped


class _Stopper:
    """When to stop ShinkaEvolve's process: a model call was refused and the evaluation endpoint has been
    quiet (nothing in flight) for ``grace_s``. Written on the proxy's request threads (several at once), read
    by the watcher."""

    def __init__(self, grace_s: float = GRACE_S) -> None:
        self.grace_s = grace_s
        self.refused = threading.Event()
        self.busy = 0
        self.last = time.monotonic()
        self._lock = threading.Lock()

    def refuse(self) -> None:
        with self._lock:
            if not self.refused.is_set():
                self.last = max(self.last, time.monotonic())
                self.refused.set()

    def begin(self) -> None:
        with self._lock:
            self.busy += 1

    def end(self) -> None:
        with self._lock:
            self.busy -= 1
            self.last = time.monotonic()

    def due(self) -> bool:
        with self._lock:
            return self.refused.is_set() and self.busy == 0 and time.monotonic() - self.last >= self.grace_s


def shinka_python() -> str:
    """The Python that runs ShinkaEvolve's loop: ``$REASEARCH_SHINKA_PYTHON``, else this interpreter if it
    imports ``shinka``.

    Raises:
        ConfigError: the variable names no Python that imports shinka, or it is unset and this one lacks it.
    """
    given = os.environ.get(PYTHON_ENV, "").strip()
    if not given:
        if importlib.util.find_spec("shinka") is not None:
            return sys.executable
        raise ConfigError(f"the shinka method needs a Python with shinka-evolve (its pins conflict with ours): "
                          f"{SHINKA_VENV_HINT}")
    path = shutil.which(os.path.expanduser(given))
    if path is None:
        raise ConfigError(f"{PYTHON_ENV}={given} is not an executable Python; {SHINKA_VENV_HINT}")
    try:
        probe = subprocess.run([path, "-c", _PROBE], capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"{PYTHON_ENV}={given} could not be run ({exc}); {SHINKA_VENV_HINT}") from None
    if probe.returncode != 0:
        raise ConfigError(f"{PYTHON_ENV}={given} does not import shinka; {SHINKA_VENV_HINT}")
    return path


@dataclass(frozen=True, slots=True)
class ShinkaConfig:
    """Settings of ``shinka`` (none: ShinkaEvolve's published defaults, the run's budget and seed)."""

    def __post_init__(self) -> None:
        shinka_python()

    def to_dict(self) -> dict[str, Any]:
        return {}


# The evaluate.py ShinkaEvolve's local scheduler runs per program: stdlib only (it runs under the shinka venv's
# Python, which need not have reasearch); the run evaluates, this only writes what the proxy answered.
_EVALUATE = '''"""ShinkaEvolve evaluate.py of a reasearch run: each program is evaluated by the run (its sandbox
and budget); this script writes the verdict the run answers."""

import argparse
import json
import os
import urllib.request

URL = {url!r}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--program_path", required=True)
    parser.add_argument("--results_dir", required=True)
    args = parser.parse_args()
    body = json.dumps({{"program_path": os.path.abspath(args.program_path)}}).encode()
    request = urllib.request.Request(URL, data=body, headers={{
        "Authorization": "Bearer " + os.environ["{token_env}"], "Content-Type": "application/json"}})
    with urllib.request.urlopen(request, timeout=86400) as response:
        data = json.loads(response.read())
    os.makedirs(args.results_dir, exist_ok=True)
    for name in ("metrics", "correct"):
        with open(os.path.join(args.results_dir, name + ".json"), "w", encoding="utf-8") as fh:
            json.dump(data[name], fh)


if __name__ == "__main__":
    main()
'''

# The loop: ShinkaEvolve's runner with its published defaults but for the settings in settings.json.
_MAIN = """
import json, random, sys
import numpy as np
from shinka.core import EvolutionConfig, ShinkaEvolveRunner
from shinka.database import DatabaseConfig
from shinka.defaults import default_llm_dynamic_selection_kwargs
from shinka.launch import LocalJobConfig

s = json.load(open("settings.json", encoding="utf-8"))
random.seed(s["seed"])
np.random.seed(s["seed"])
evo = EvolutionConfig(llm_models=[s["model"]], embedding_model=None, init_program_path="initial.py",
                      results_dir="results", job_type="local",
                      llm_dynamic_selection_kwargs={**default_llm_dynamic_selection_kwargs(), "seed": s["seed"]},
                      **({"num_generations": s["generations"]} if s["generations"] is not None else {}))
job = LocalJobConfig(eval_program_path="evaluate.py", python_executable=sys.executable)
ShinkaEvolveRunner(evo, job, DatabaseConfig(), verbose=True).run()
"""


def marked(seed: str) -> str:
    """The seed program with ShinkaEvolve's editable-region markers around all of it."""
    return f"{_START}{seed if seed.endswith(chr(10)) else seed + chr(10)}{_END}"


def _generations(driver: MethodDriver, seed: str) -> int | None:
    """ShinkaEvolve's ``num_generations`` from the budget left (None: uncapped, its default); 0: none left."""
    left = driver.run.remaining().get(driver.unit)
    if left is None:
        return None
    budget = int(left // max(driver.needed, 1e-9))
    if budget < 1:
        return 0
    # Generation 0 is the initial program: one evaluation, unless a resumed run already holds it (free).
    return budget + 1 if driver.seen(seed) is not None else budget


def _run(python: str, folder: Path, token: str, stop: _Stopper, procs: list[subprocess.Popen[bytes]]) -> None:
    """ShinkaEvolve's loop in ``folder`` (its output in ``peer.log``) until it ends or ``stop`` is due."""
    log = folder / "peer.log"
    env = {**os.environ, _TOKEN_ENV: token, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as out:
        proc = subprocess.Popen([python, "-c", _MAIN], cwd=folder, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        procs.append(proc)
        while True:
            try:
                rc = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if stop.due():
                    kill_groups([proc])
                    return
    if rc != 0 and not stop.refused.is_set():
        tail = log.read_text(encoding="utf-8", errors="replace")[-800:]
        raise RuntimeError(f"ShinkaEvolve's loop exited {rc}: {tail}")


def shinka_method(driver: MethodDriver, config: ShinkaConfig) -> str:
    """Runs ShinkaEvolve's own loop on ``driver``'s run; returns why it stopped."""
    from reasearch.adapters.shinka import shinka_files

    if not isinstance(driver.kind, ProgramKind):
        raise ConfigError(f"the shinka method drives program tasks; {driver.spec.id} is a {driver.kind.name} task")
    python = shinka_python()
    continue_after_record(driver)
    seed = marked(driver.task.seed_program())
    generations = _generations(driver, seed)
    spent_reason = f"the {driver.unit.value} budget is spent"
    if generations == 0:
        return spent_reason
    evaluated: list[int] = []
    stop = _Stopper()

    def evaluate(program_path: str) -> dict[str, Any]:
        stop.begin()
        try:
            return answer(program_path)
        finally:
            stop.end()

    def spent() -> str | None:
        left = driver.run.remaining().get(driver.unit)
        return spent_reason if left is not None and left + 1e-9 < driver.needed else None

    def answer(program_path: str) -> dict[str, Any]:
        result = evaluate_program(driver, program_path, note="shinka", spent=spent, evaluated=evaluated)
        correct, metrics = shinka_files(result, driver.spec)
        return {"correct": correct, "metrics": metrics}

    proxy = MeteringProxy(driver, evaluate=evaluate, note="shinka", on_refused=stop.refuse)
    prestart_sandbox(driver)  # the jail starts while ShinkaEvolve starts
    with tempfile.TemporaryDirectory(prefix="reasearch-shinka-") as tmp:
        folder = Path(tmp)
        (folder / "evaluate.py").write_text(
            _EVALUATE.format(url=f"http://127.0.0.1:{proxy.port}/reasearch/evaluate", token_env=_TOKEN_ENV),
            encoding="utf-8")
        (folder / "initial.py").write_text(seed, encoding="utf-8")
        model = f"local/{proxy.model_name}@{proxy.url}?api_key_env={_TOKEN_ENV}"
        settings = {"seed": int(driver.run.seed), "model": model, "generations": generations}
        (folder / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
        procs: list[subprocess.Popen[bytes]] = []
        try:
            proxy.serve(lambda: _run(python, folder, proxy.token, stop, procs))
        finally:  # interrupted, or the model failed: ShinkaEvolve's process group ends with us
            kill_groups(procs)
    reason = driver.stop_reason()
    if reason is not None:
        return reason
    if stop.refused.is_set():
        return "a model call was refused: the run's model budget is spent"
    left = driver.run.remaining().get(Unit.MODEL_CALLS)
    return (f"shinka finished its generations ({len(evaluated)} evaluations, {proxy.calls} model calls, "
            f"{proxy.refused} refused{'' if left is None else f', {left:g} model calls left'})")
