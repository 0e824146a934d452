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
