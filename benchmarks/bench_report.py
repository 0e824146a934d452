"""Report generation: time and file size for a run of 500 real evaluations.

Run: ``pytest benchmarks/bench_report.py --benchmark-group-by=group -s``. The run is circle packing
n=26 with 500 candidates evaluated in the sandbox (jittered row layouts with LP radii, one in ten
crashing, one in seven invalid), each the child of an earlier one. Groups:

* ``report_500``: ``load_run`` (read everything from the store) alone, and ``build_report`` (read +
  figures + sections + the HTML with plotly.js inlined), side by side.

The file size (total, and without the inlined plotly.js, which is a fixed ~4.8 MB) is printed and kept
in the benchmark's ``extra_info``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from reasearch.engine import SandboxConfig, SandboxPool
from reasearch.evaluators.base import candidate_sha256
from reasearch.reports import build_report, load_run
from reasearch.reports._page import plotly_js
from reasearch.runs import Run, open_store
from reasearch.runs.executor import LocalExecutor
from reasearch.runs.store import Store

N_EVALUATIONS = 500
TEMPLATE = '''import numpy as np
from reasearch.native.lp import optimal_radii

ROWS = (5, 5, 6, 5, 5)


def run():
    rng = np.random.default_rng({seed})
    pts = [((c + 0.5) / n, (r + 0.5) / len(ROWS)) for r, n in enumerate(ROWS) for c in range(n)]
    centers = np.clip(np.array(pts) + rng.normal(0.0, {sigma}, size=(26, 2)), 0.02, 0.98)
    radii = optimal_radii(centers)
    {tail}
    return centers, radii
'''


def _source(i: int) -> str:
    tail = "raise RuntimeError('boom')" if i % 10 == 9 else "radii = radii * 1.5" if i % 7 == 6 else "pass"
    return TEMPLATE.format(seed=i, sigma=0.002 + 0.01 * (i % 5), tail=tail)


@pytest.fixture(scope="module")
def big_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, str]]:
    d = tmp_path_factory.mktemp("report-bench")
    store = open_store(d)
    rng = random.Random(0)
    with SandboxPool(SandboxConfig(workers=2)) as pool, LocalExecutor(2, pool=pool) as ex:
        run = Run.create(store, task_id="circle_packing/n26-v1", budget={"evaluations": N_EVALUATIONS}, executor=ex)
        sources = [_source(i) for i in range(N_EVALUATIONS)]
        parents = [None] + [candidate_sha256(sources[rng.randrange(i)]) for i in range(1, N_EVALUATIONS)]
        with ThreadPoolExecutor(2) as threads:
            list(threads.map(lambda i: run.evaluate(sources[i], step=i, parent=parents[i], note=f"jitter {i}"),
                             range(N_EVALUATIONS)))
        run.finish()
    try:
        yield store, run.id
    finally:
        store.close()


def test_load_run(benchmark, big_run: tuple[Store, str]) -> None:
    benchmark.group = "report_500"
    store, run_id = big_run
    view = benchmark(load_run, store, run_id)
    assert len(view.evaluations) == N_EVALUATIONS and len(view.candidates) == N_EVALUATIONS


def test_build_report(benchmark, big_run: tuple[Store, str], tmp_path: Path) -> None:
    benchmark.group = "report_500"
    store, run_id = big_run
    plotly_js()  # the bundle is read once per process; measured apart from the report
    html = benchmark(build_report, store, run_id)
    size = len(html.encode())
    rest = size - len(plotly_js().encode())
    benchmark.extra_info.update({"evaluations": N_EVALUATIONS, "file_bytes": size, "bytes_without_plotly_js": rest})
    print(f"\nreport of {N_EVALUATIONS} evaluations: {size / 1e6:.2f} MB ({rest / 1e6:.2f} MB without plotly.js)")
    assert html.count('"x":') > 0 and size > 1e6
