"""A peer optimizer's parallel workers through the run's metering proxy: OpenEvolve with 4 against 1.

The same OpenEvolve run (``circle_packing/n26-v1``, whole-program rewrites, the same seed and evaluation
budget) with ``parallel_evaluations`` 4 and with 1 (the reference), its model the demo model behind the
proxy: instant, and delayed by a fixed latency per call (a sleep: what a remote model's answer costs in
wall time, not in CPU). Figures: evaluations recorded per second and wall time to the budget (OpenEvolve's
start included: it is part of every run); the ratio is the 4-worker run's over the reference's (above 1:
4 workers are faster). The rate counts paid evaluations (the budget spent; a free repeat or a refused
program does not count); a run may end before its budget is spent (OpenEvolve's iterations run out).

Trust boundary: the project's own code, OpenEvolve (installed by the user) and the demo model;
candidates run only in the sandbox.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
import time
from pathlib import Path

from reasearch._bench import BenchRow
from reasearch.models.messages import ModelReply, ModelRequest

__all__ = ["DelayedModel", "openevolve_run", "run"]

TASK = "circle_packing/n26-v1"
WORKERS = 4


class DelayedModel:
    """The demo model answering after ``latency_s`` (a sleep), like a remote model's round trip."""

    def __init__(self, latency_s: float) -> None:
        from reasearch.models.demo import DemoModel

        self._demo = DemoModel()
        self.latency_s = latency_s

    @property
    def name(self) -> str:
        return self._demo.name

    def complete(self, request: ModelRequest) -> ModelReply:
        time.sleep(self.latency_s)
        return self._demo.complete(request)


def openevolve_run(workers: int, budget: int, latency_s: float, workdir: Path) -> tuple[float, int, int]:
    """(wall seconds, evaluations paid, model calls) of one OpenEvolve run with ``workers`` worker processes
    (paid: the run's evaluation budget spent; free repeats and refused programs do not count)."""
    from reasearch.methods import start_method
    from reasearch.models import ModelSpec
    from reasearch.runs import Unit, open_store

    with open_store(workdir) as store:
        runner = start_method("openevolve", TASK, budget={"evaluations": budget}, store=store,
                              model_spec=ModelSpec.parse("demo"), model=DelayedModel(latency_s),
                              config={"diff_based_evolution": False, "parallel_evaluations": workers})
        t0 = time.perf_counter()
        result = runner.optimize()
        elapsed = time.perf_counter() - t0
        return elapsed, int(store.usage(result.run_id).get(Unit.EVALUATIONS, 0)), result.model_calls


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} CPUs"


def run(quick: bool) -> list[BenchRow]:
    if importlib.util.find_spec("openevolve") is None:
        from reasearch._bench import MissingExtra

        raise MissingExtra("the peers bench needs OpenEvolve: pip install 'reasearch[openevolve]'")
    budget = 12 if quick else 32
    rows: list[BenchRow] = []
    with tempfile.TemporaryDirectory(prefix="reasearch-bench-peers-") as tmp:
        root = Path(tmp)
        openevolve_run(1, 2, 0.0, root / "warm-up")  # imports and this process's pool, untimed
        for latency in (0.0, 0.5):
            got = {w: openevolve_run(w, budget, latency, root / f"w{w}-{latency}") for w in (1, WORKERS)}
            (ref_s, ref_n, ref_calls), (s, n, calls) = got[1], got[WORKERS]
            what = "instant demo model" if not latency else f"demo model + {latency:g} s per call"
            note = (f"budget {budget} evaluations; paid {n} evaluations, "
                    f"{calls} model calls (4 workers) and {ref_n}, {ref_calls} (1); {_load()}")
            rows.append(BenchRow("peers", f"openevolve {WORKERS} workers, {what}: evaluations/s", n / s, "1/s",
                                 reference="1 worker", reference_value=ref_n / ref_s, ratio=(n / s) / (ref_n / ref_s),
                                 note=note))
            rows.append(BenchRow("peers", f"openevolve {WORKERS} workers, {what}: wall time to the run's end", s, "s",
                                 reference="1 worker", reference_value=ref_s, ratio=ref_s / s, note=note))
    return rows
