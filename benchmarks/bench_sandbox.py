"""Per-evaluation overhead of the warm sandbox pool, side by side with its references.

Run: ``pytest benchmarks/bench_sandbox.py --benchmark-group-by=group``. Group ``sandbox-overhead``
holds, in one run: a trivial candidate through the warm pool (nsjail and process mode), served by
a worker whose warm image fits it (NumPy only) and, beside it, by the full image (NumPy, SciPy,
numba: what every worker forked before images were fitted), a fresh nsjail
``python -c "import numpy"`` per evaluation, and a plain ``subprocess`` doing the same.
Goals (issue 16, 2 cores): trivial evaluation <= 2 ms median and p95, >= 50x below the fresh jailed
interpreter. ``reasearch bench --section sandbox`` adds throughput, the circle-packing
``evaluate()``, the step-by-step breakdown and the fork floors.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch.engine import SandboxPool, exec_in_sandbox
from reasearch.engine.protocol import Limits, RunRequest
from reasearch.evaluators.result import Status

TRIVIAL = RunRequest(source="def run():\n    return 1\n")
TRIVIAL_FULL_IMAGE = RunRequest(source="def run():\n    return 1\n",
                                preload=("numba", "numpy", "reasearch.native", "scipy.optimize"))
GROUP = "sandbox-overhead"


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="reasearch-bench-") as d:
        yield Path(d)


@pytest.mark.benchmark(group=GROUP)
def test_warm_pool_nsjail(benchmark, nsjail_pool: SandboxPool) -> None:  # type: ignore[no-untyped-def]
    out = benchmark(nsjail_pool.run, TRIVIAL)
    assert out.status is Status.OK and out.value == 1 and out.sandbox_mode == "nsjail"


@pytest.mark.benchmark(group=GROUP)
def test_warm_pool_nsjail_full_image(benchmark, nsjail_pool: SandboxPool) -> None:  # type: ignore[no-untyped-def]
    out = benchmark(nsjail_pool.run, TRIVIAL_FULL_IMAGE)
    assert out.status is Status.OK and out.value == 1 and out.sandbox_mode == "nsjail"


@pytest.mark.benchmark(group=GROUP)
def test_warm_pool_process(benchmark, process_pool: SandboxPool) -> None:  # type: ignore[no-untyped-def]
    out = benchmark(process_pool.run, TRIVIAL)
    assert out.status is Status.OK and out.value == 1


@pytest.mark.benchmark(group=GROUP)
def test_fresh_nsjail_python_numpy(benchmark, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    lim = Limits(wall_s=30.0, memory_mb=2048)
    out = benchmark.pedantic(exec_in_sandbox, args=(["python3", "-c", "import numpy"],),
                             kwargs={"workdir": workdir, "limits": lim, "mode": "nsjail"}, rounds=15, iterations=1)
    assert out.ok, out.stderr


@pytest.mark.benchmark(group=GROUP)
def test_plain_subprocess_python_numpy(benchmark) -> None:  # type: ignore[no-untyped-def]
    cp = benchmark.pedantic(subprocess.run, args=([sys.executable, "-c", "import numpy"],),
                            kwargs={"check": True}, rounds=15, iterations=1)
    assert cp.returncode == 0
