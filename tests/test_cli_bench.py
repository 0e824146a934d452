"""``reasearch bench``: sections run, figures land in the JSON file, bad input is a one-line error."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from reasearch.cli import main


def test_bench_sections_write_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--section", "txn", "--section", "agent", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert {r["section"] for r in rows} == {"txn", "agent"}
    by_name = {r["name"]: r for r in rows}
    native = by_name["get_opt_seq_cost workload_1 (full schedule)"]
    assert native["unit"] == "us" and 0 < native["value"] < native["reference_value"]
    assert math.isclose(native["ratio"], native["reference_value"] / native["value"], rel_tol=1e-9)
    assert all(r["met"] in (True, False, None) for r in rows)
    printed = capsys.readouterr().out
    assert "reasearch bench" in printed and f"wrote {len(rows)} figures" in printed


def test_unknown_section_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--section", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no bench section" in err[0] and "sandbox" in err[0]


def test_bench_explains_its_columns_sums_up_the_missed_goals_and_shows_each_figure(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import reasearch._cli.bench as bench_cli
    from reasearch._bench import BenchRow

    def fake_section(name: str, *, quick: bool) -> list[BenchRow]:  # rows made one by one, as a section does
        return [BenchRow(name, "fast thing", 1.0, "ms", "ref", 3.0, 3.0, ">= 2x", True),
                BenchRow(name, "slow thing", 9.0, "ms", "ref", 3.0, 1 / 3, "<= 5 ms", False),
                BenchRow(name, "plain figure", 7.0, "us")]

    monkeypatch.setattr(bench_cli, "run_section", fake_section)
    assert main(["bench", "--section", "txn"]) == 0  # a missed goal is reported, not an error by default
    out, err = capsys.readouterr()
    flat = " ".join(out.split())
    assert "ratio: the reference's figure over ours" in flat and "goal: the figure this project aims for" in flat
    assert flat.endswith("3 figures; 1 of 2 goals met; NOT met (1): txn / slow thing")
    progress = [ln for ln in err.splitlines() if ln.startswith("bench: txn (1/1): ")]
    assert len(progress) == 3 and "slow thing = 9 ms (goal <= 5 ms: NO)" in progress[1]  # one line per figure
    assert main(["bench", "--section", "txn", "--strict"]) == 1


def test_a_plain_bench_runs_the_chaos_soak_short_and_in_full_only_when_named(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's first command must end in minutes: the long soak (hours) runs only with --section chaos."""
    import reasearch._cli.bench as bench_cli
    from reasearch._bench import BenchRow

    calls: dict[str, bool] = {}

    def fake_section(name: str, *, quick: bool) -> list[BenchRow]:
        calls[name] = quick
        return [BenchRow(name, "figure", 1.0, "ms")]

    monkeypatch.setattr(bench_cli, "run_section", fake_section)
    assert main(["bench"]) == 0
    assert calls["chaos"] is True and calls["sandbox"] is False  # only the hours-long section is made short
    calls.clear()
    assert main(["bench", "--section", "chaos"]) == 0
    assert calls == {"chaos": False}
    capsys.readouterr()


def test_a_section_whose_extra_is_missing_is_skipped_in_a_plain_run_and_an_error_when_named(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`pip install -e . && reasearch bench` (no extras) must finish: the peers section needs OpenEvolve."""
    import reasearch._cli.bench as bench_cli
    from reasearch._bench import BenchRow, MissingExtra

    def fake_section(name: str, *, quick: bool) -> list[BenchRow]:
        if name == "peers":
            raise MissingExtra("the peers bench needs OpenEvolve: pip install 'reasearch[openevolve]'")
        return [BenchRow(name, "figure", 1.0, "ms")]

    monkeypatch.setattr(bench_cli, "run_section", fake_section)
    assert main(["bench"]) == 0
    out, err = capsys.readouterr()
    assert "skipped: the peers bench needs OpenEvolve" in err and "fleet" in out  # the sections after it ran
    assert main(["bench", "--section", "peers"]) == 2
    assert "needs OpenEvolve" in capsys.readouterr().err
