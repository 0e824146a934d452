"""A method run in its own process, for the kill -9 tests: its model blocks at the K-th call after
writing a marker, so the test kills it mid-run at a known point (after K-1 replies were recorded)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from reasearch.methods import start_method
from reasearch.methods.testing import MutatingModel
from reasearch.models import ModelSpec
from reasearch.runs import open_store


class _Blocking(MutatingModel):
    def __init__(self, block_at: int, marker: Path) -> None:
        super().__init__(7)
        self.block_at, self.marker = block_at, marker

    def complete(self, request):  # type: ignore[no-untyped-def]
        if self.calls + 1 == self.block_at:
            self.marker.write_text("blocked")
            time.sleep(3600)
        return super().complete(request)


def main() -> None:
    method, task, store_dir, run_id, block_at, marker, budget = sys.argv[1:8]
    store = open_store(store_dir)
    runner = start_method(method, task, budget={"evaluations": float(budget)}, store=store,
                          model_spec=ModelSpec(provider="scripted", name=""), run_id=run_id,
                          model=_Blocking(int(block_at), Path(marker)),
                          config={"num_islands": 2} if method == "evolve" else None)
    runner.optimize()


if __name__ == "__main__":
    main()
