"""One implementation of the bench: timing loops and statistics in ``reasearch._bench``, the
``benchmarks/`` files only entry points to its sections (issue 31). Clocks and processes are faked:
nothing here depends on how busy the machine is."""

from __future__ import annotations

import ast
import math
import sys
from pathlib import Path

import pytest
from rich.console import Console

import reasearch._bench as bench
from reasearch._bench import BenchRow, FreshProcess, coldstart
from reasearch.errors import ConfigError

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


class _Clock:
    """A perf_counter that only moves when the timed function says so."""

    def __init__(self) -> None:
        self.t = 100.0
        self.calls = 0

    def __call__(self) -> float:
        return self.t

    def work(self, seconds: float) -> None:
        self.calls += 1
        self.t += seconds


def test_per_call_us_divides_each_timed_batch_by_its_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(bench.time, "perf_counter", clock)
    us = bench.per_call_us(lambda: clock.work(0.002), inner=5, repeat=3)
    assert math.isclose(us, 2000.0)
    assert clock.calls == 5 * (3 + 1)  # one untimed batch first


def test_time_calls_times_each_call_after_its_warmup(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(bench.time, "perf_counter", clock)
    steps = iter([9.0, 9.0, 1.0, 2.0, 3.0])  # the two warm-up calls are slow and not counted
    assert bench.time_calls(lambda: clock.work(next(steps)), repeat=3, warmup=2) == [1.0, 2.0, 3.0]


def test_median_and_the_percentiles_are_the_one_set_of_statistics() -> None:
    xs = [float(x) for x in range(100, 0, -1)]
    assert bench.median(xs) == 50.5
    assert bench.p95(xs) == 95.0  # nearest rank at 0.95 of the sorted timings
    assert bench.p99(xs) == 99.0  # and at 0.99 (item 1 of issue 43 has a p99 goal)
    assert bench.p95([3.0]) == bench.p99([3.0]) == 3.0
    assert bench.p99([float(x) for x in range(1000)]) == 989.0  # round(0.99 * 999) = 989
    # The agent's and the sandbox's figures used to compute it apart (int vs round of the rank):
    # the one rule agrees with both at the sizes they measure.
    for n in (39, 199, 100, 1000):
        s = list(range(n))
        assert bench.p95(s) == s[int(0.95 * (n - 1))] == s[round(0.95 * (n - 1))]


def test_fresh_processes_reports_each_exit_without_judging_it() -> None:
    procs = bench.fresh_processes([sys.executable, "-c", "import sys; print('hi'); sys.exit(3)"], runs=2)
    assert [p.returncode for p in procs] == [3, 3]
    assert all(p.stdout.strip() == "hi" and p.wall_s > 0 for p in procs)


def test_coldstarts_figures_share_the_one_fresh_process_loop(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    seen: list[list[str]] = []

    def fake(argv: list[str], *, runs: int, env: dict[str, str] | None = None) -> list[FreshProcess]:
        seen.append(list(argv))
        if "-c" in argv and argv[argv.index("-c") + 1].startswith("import json"):  # the first-evaluate child
            return [FreshProcess(1.0, 0.5, 0, f'{{"s": {s}, "status": "OK"}}\n', "") for s in (0.3, 0.1, 0.2)][:runs]
        return [FreshProcess(w, w / 2, 0, "", "") for w in (3.0, 1.0, 2.0)][:runs]

    monkeypatch.setattr(coldstart, "fresh_processes", fake)
    assert coldstart.fresh_runs(["prog"], runs=3) == (2.0, 1.0)
    assert coldstart.first_evaluate(str(tmp_path / "seed.py"), runs=3) == 0.2
    assert seen[0] == ["prog"] and coldstart.TASK_ID in seen[1]

    def failing(argv: list[str], *, runs: int, env: dict[str, str] | None = None) -> list[FreshProcess]:
        return [FreshProcess(1.0, 0.5, 4, "", "boom")]

    monkeypatch.setattr(coldstart, "fresh_processes", failing)
    with pytest.raises(RuntimeError, match="exited 4: boom"):
        coldstart.fresh_runs(["prog"], runs=1)
    with pytest.raises(RuntimeError, match=r"first-evaluate child failed \(4\): boom"):
        coldstart.first_evaluate("seed.py", runs=1)


def test_an_unknown_section_is_a_config_error_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"no bench section 'nope'.*'sandbox'"):
        bench.run_section("nope", quick=True)
    assert bench.section_names()[0] == "coldstart" and len(bench.section_names()) == len(bench.SECTIONS)


def test_the_table_shows_unmeasured_values_and_goals() -> None:
    rows = [BenchRow("s", "fast", 1.23456, "ms", reference="ref", reference_value=2.0, ratio=1.62, goal="<= 2 ms",
                     met=True),
            BenchRow("s", "missing", float("nan"), "s", reference="jail", reference_value=float("nan"), met=False)]
    console = Console(width=200, record=True)
    console.print(bench.table(rows))
    text = console.export_text()
    assert "1.235" in text and "ref 2" in text and "yes" in text
    missing = next(line for line in text.splitlines() if "missing" in line)
    assert "-" in missing.split("missing", 1)[1] and "NO" in missing


def _calls_and_fixtures(path: Path) -> tuple[set[str], set[str]]:
    """(the string arguments of ``bench_section(...)`` calls, the fixtures the tests ask for)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    sections = {n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name) and n.func.id == "bench_section"
                and n.args and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str)}
    fixtures = {a.arg for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
                for a in n.args.args}
    return sections, fixtures


@pytest.mark.parametrize("name", bench.section_names())
def test_each_sections_benchmark_file_is_an_entry_point_to_it(name: str) -> None:
    """``benchmarks/bench_<section>.py`` measures through the section's own code: no timing loop of its own
    (no pytest-benchmark fixture), one call of ``bench_section`` with its name."""
    path = BENCHMARKS / f"bench_{name}.py"
    sections, fixtures = _calls_and_fixtures(path)
    assert sections == {name}, f"{path.name} must call bench_section({name!r})"
    assert fixtures == {"bench_section"}, f"{path.name} times with its own loop: {sorted(fixtures)}"


def test_the_entry_point_check_sees_a_second_timing_loop(tmp_path: Path) -> None:
    own_loop = tmp_path / "bench_x.py"
    own_loop.write_text("def test_x(benchmark, pool):\n    benchmark(pool.run, 1)\n")
    assert _calls_and_fixtures(own_loop) == (set(), {"benchmark", "pool"})
