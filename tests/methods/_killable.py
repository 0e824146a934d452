"""A method run in its own process, for the kill -9 tests: its model blocks at the K-th call after
writing a marker, so the test kills it mid-run at a known point (after K-1 replies were recorded).

The model stands for an endpoint that logs every request it receives (one line in ``<marker>.requests``)
before it answers: the request in flight at the kill is logged too, as a real endpoint would have
received (and maybe answered) it."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from reasearch.methods import start_method
from reasearch.methods.testing import MutatingModel
from reasearch.models import ModelSpec
from reasearch.runs import open_store

MODEL_CALL_CAP = 100.0  # never reached: there to show that a call charged on resume counts against a cap


class LoggedModel(MutatingModel):
    """A :class:`MutatingModel` that appends one line to ``log`` for each request it receives."""

    def __init__(self, seed: int, log: Path) -> None:
        super().__init__(seed)
        self.log = log

    def complete(self, request):  # type: ignore[no-untyped-def]
        with self.log.open("a") as f:
            f.write("request\n")
        return super().complete(request)


def requests_file(marker: Path) -> Path:
    return marker.with_name(marker.name + ".requests")


class _Blocking(LoggedModel):
    def __init__(self, block_at: int, marker: Path) -> None:
        super().__init__(7, requests_file(marker))
        self.block_at, self.marker = block_at, marker

    def complete(self, request):  # type: ignore[no-untyped-def]
        if self.calls + 1 == self.block_at:
            with self.log.open("a") as f:  # received: the endpoint has it, the driver waits for the answer
                f.write("request\n")
            self.marker.write_text("blocked")
            time.sleep(3600)
        return super().complete(request)


def main() -> None:
    method, task, store_dir, run_id, block_at, marker, budget = sys.argv[1:8]
    store = open_store(store_dir)
    budget_caps = {"evaluations": float(budget), "model_calls": MODEL_CALL_CAP}
    runner = start_method(method, task, budget=budget_caps, store=store,
                          model_spec=ModelSpec(provider="scripted", name=""), run_id=run_id,
                          model=_Blocking(int(block_at), Path(marker)),
                          config={"num_islands": 2} if method == "evolve" else None)
    runner.optimize()


if __name__ == "__main__":
    main()
