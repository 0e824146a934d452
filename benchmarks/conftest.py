"""Benchmark fixtures: warm pools shared by a benchmark module (run with ``pytest benchmarks/``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reasearch.engine import SandboxConfig, SandboxPool


@pytest.fixture(scope="module")
def nsjail_pool() -> Iterator[SandboxPool]:
    with SandboxPool(SandboxConfig(mode="nsjail", workers=2)) as pool:
        yield pool


@pytest.fixture(scope="module")
def process_pool() -> Iterator[SandboxPool]:
    with SandboxPool(SandboxConfig(mode="process", workers=2)) as pool:
        yield pool
