"""The one home of the score rules: better, best so far, since the best, and score text."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from reasearch.engine.protocol import Status
from reasearch.evaluators.scores import (
    best_index,
    fmt_score,
    is_better,
    ok_score,
    running_best,
    since_best,
)


def test_is_better_follows_the_direction_and_none_loses() -> None:
    assert is_better("maximize", 2.0, 1.0) and not is_better("maximize", 1.0, 1.0)
    assert is_better("minimize", 1.0, 2.0) and not is_better("minimize", 2.0, 1.0)
    assert is_better("minimize", 5.0, None)


def test_only_ok_scores_count_as_enum_or_stored_string() -> None:
    assert ok_score(Status.OK, 3.0) == 3.0 and ok_score("OK", 3.0) == 3.0
    assert ok_score("CRASH", 3.0) is None and ok_score(Status.TIMEOUT, 1.0) is None and ok_score("OK", None) is None


def test_best_is_the_first_to_reach_it_and_since_counts_after_it() -> None:
    scores = [5.0, 7.0, None, 7.0, 6.0]
    assert best_index(scores, "maximize") == 1 and since_best(scores, "maximize") == 3
    assert best_index(scores, "minimize") == 0 and since_best(scores, "minimize") == 4
    assert best_index([None, None], "maximize") is None and since_best([None, None], "maximize") == 2
    assert since_best([], "maximize") == 0
    assert running_best(scores, "maximize") == [5.0, 7.0, 7.0, 7.0, 7.0]
    assert running_best([None, 3.0, 2.0], "minimize") == [None, 3.0, 2.0]


def test_score_text_agent_and_report_forms() -> None:
    assert fmt_score(None) == "-" and fmt_score(-0.0) == "0"
    assert fmt_score(1 / 3) == "0.333333333333"
    assert fmt_score(1 / 3, digits=10, small=1e-3) == "0.3333333333"
    assert fmt_score(1.23456e-5, digits=10, small=1e-3) == "1.2346e-05"
    assert fmt_score(0.0, digits=10, small=1e-3) == "0" and fmt_score(1.23456e-5) == "1.23456e-05"


def test_the_rules_load_no_engine_on_the_specs_cold_path() -> None:
    # spec.py imports scores.py; both sit on the CLI's cold-start path and in the jail.
    code = (
        "import sys, reasearch.evaluators.spec; "
        "print(sorted(m for m in sys.modules if m.startswith('reasearch.engine')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2]).stdout.strip()
    assert out == "[]"
