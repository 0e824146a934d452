"""Trusted scoring of what the harness sent back: per pair, per attempt, and the feedback text.

Rule (documented in the task's description): a malformed output (ragged rows, values outside 0-9,
non-integers, None, a grid over 30x30) or an exception fails *that attempt* with a reason in the
feedback; the evaluation stays ``OK`` as long as at least one attempt produced a valid grid. When no
attempt on any input produced a valid grid, the evaluation is ``CRASH`` (every failure was an
exception) or ``INVALID`` (otherwise): a candidate that never answers earns no score.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reasearch.evaluators.arc_agi_2._grid import (
    AttemptScore,
    AttemptStatus,
    Grid,
    check_output,
    compare,
)

__all__ = ["PairScore", "score_attempts", "submit_feedback", "train_feedback", "verdict"]

_MARKER_KINDS = {"error": AttemptStatus.ERROR, "missing": AttemptStatus.MISSING, "malformed": AttemptStatus.MALFORMED}
_DIFF_MAP_MAX_WRONG = 60  # draw the diff map only when it helps more than it floods
_FEEDBACK_LIMIT = 12_000


@dataclass(frozen=True, slots=True)
class PairScore:
    """Both attempts on one input, compared with its expected output.

    Attributes:
        index: the pair's position in the task.
        expected_shape: ``(rows, cols)`` of the expected output.
        attempts: the two attempts' scores.
        outputs: the two attempts' valid grids (None where there is none).
        tracebacks: traceback tails of attempts that raised ("" otherwise).
    """

    index: int
    expected_shape: tuple[int, int]
    attempts: tuple[AttemptScore, AttemptScore]
    outputs: tuple[Grid | None, Grid | None]
    tracebacks: tuple[str, str] = ("", "")

    @property
    def solved(self) -> bool:
        return any(a.correct for a in self.attempts)

    @property
    def best(self) -> AttemptScore:
        """The attempt closest to the answer (correct, then shape match and accuracy)."""
        return max(self.attempts, key=lambda a: (a.correct, a.status is AttemptStatus.WRONG_CELLS, a.accuracy))

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "solved": self.solved,
            "expected_shape": list(self.expected_shape),
            "shape_match": any(a.status in (AttemptStatus.CORRECT, AttemptStatus.WRONG_CELLS) for a in self.attempts),
            "accuracy": self.best.accuracy,
            "attempts": [a.to_dict() for a in self.attempts],
        }


def _attempt(raw: Any, expected: Grid) -> tuple[AttemptScore, Grid | None, str]:
    total = len(expected) * len(expected[0])
    if isinstance(raw, Mapping):  # a harness marker (or a dict the candidate returned: no grid either way)
        status = _MARKER_KINDS.get(raw.get("kind"), AttemptStatus.MALFORMED)  # type: ignore[arg-type]
        reason = str(raw.get("error", "returned a dict, not a list of rows"))[:300]
        tb = str(raw.get("traceback", ""))[-1500:] if status is AttemptStatus.ERROR else ""
        return AttemptScore(status, None, 0, total, reason=reason), None, tb
    grid, reason = check_output(raw)
    if grid is None:
        return AttemptScore(AttemptStatus.MALFORMED, None, 0, total, reason=reason), None, ""
    return compare(expected, grid), grid, ""


def score_attempts(value: Any, expected: Sequence[Grid]) -> tuple[list[PairScore] | None, str]:
    """Scores the harness's ``{"attempts": [[out_1, out_2], ...]}`` against ``expected`` outputs.

    Returns:
        ``(pairs, "")``, or ``(None, reason)`` when the structure itself is wrong.
    """
    if not isinstance(value, Mapping) or "attempts" not in value:
        return None, f"the harness result is {type(value).__name__}, not {{'attempts': [...]}}"
    rows = value["attempts"]
    if not isinstance(rows, (list, tuple)) or len(rows) != len(expected):
        n = len(rows) if isinstance(rows, (list, tuple)) else type(rows).__name__
        return None, f"expected attempts for {len(expected)} inputs, got {n}"
    pairs = []
    for i, (row, exp) in enumerate(zip(rows, expected, strict=True)):
        if not isinstance(row, (list, tuple)) or len(row) != 2:
            return None, f"input {i}: expected two attempts, got {row!r:.80}"
        (s1, g1, t1), (s2, g2, t2) = _attempt(row[0], exp), _attempt(row[1], exp)
        pairs.append(PairScore(i, (len(exp), len(exp[0])), (s1, s2), (g1, g2), (t1, t2)))
    return pairs, ""


def verdict(pairs: Sequence[PairScore]) -> tuple[str, str]:
    """``("OK", "")`` when some attempt produced a grid, else ``("CRASH" | "INVALID", reason)``."""
    if any(a.produced_grid for p in pairs for a in p.attempts):
        return "OK", ""
    failed = [(p, k, a) for p in pairs for k, a in enumerate(p.attempts) if a.status is not AttemptStatus.MISSING]
    if failed and all(a.status is AttemptStatus.ERROR for _, _, a in failed):
        p, k, a = failed[0]
        tb = p.tracebacks[k]
        return "CRASH", f"every attempt raised; input {p.index}, attempt {k + 1}: {a.reason}" + (
            f"\n{tb}" if tb else ""
        )
    if not failed:
        return "INVALID", "no attempt function produced any output"
    p, k, a = next((x for x in failed if x[2].status is AttemptStatus.MALFORMED), failed[0])
    return "INVALID", f"no attempt produced a valid grid; input {p.index}, attempt {k + 1}: {a.reason}"


def _shape_text(shape: Sequence[int] | None) -> str:
    return f"{shape[0]}x{shape[1]}" if shape else "-"


def _diff_map(expected: Grid, got: Grid) -> list[str]:
    """Rows where '.' is a right cell and a digit is the expected colour of a wrong one."""
    return [
        "".join("." if g == e else str(e) for e, g in zip(erow, grow, strict=False))
        for erow, grow in zip(expected, got, strict=False)
    ]


def _attempt_line(k: int, a: AttemptScore) -> str:
    head = f"  attempt {k + 1}: "
    if a.status is AttemptStatus.CORRECT:
        return head + "correct"
    if a.status is AttemptStatus.WRONG_SHAPE:
        return head + f"wrong shape {_shape_text(a.shape)}"
    if a.status is AttemptStatus.WRONG_CELLS:
        cells = ", ".join(f"({r},{c}) {e}->{g}" for r, c, e, g in a.wrong)
        more = f" (+{a.n_wrong - len(a.wrong)} more)" if a.n_wrong > len(a.wrong) else ""
        return head + (
            f"shape right, {a.cells_right}/{a.cells_total} cells right ({a.accuracy:.1%}); "
            f"wrong (row,col) expected->got: {cells}{more}"
        )
    return head + f"{a.status.value}: {a.reason}"


def train_feedback(pairs: Sequence[PairScore], expected: Sequence[Grid]) -> str:
    """Per-pair feedback: shape match, exact match, cell accuracy and a compact diff of wrong cells."""
    solved = sum(p.solved for p in pairs)
    lines = [f"train pairs solved: {solved}/{len(pairs)} (score {solved / len(pairs):.4f})"]
    # An attempt function that is not defined is said once, not on every pair.
    undefined = {k for k in range(2) if all(p.attempts[k].status is AttemptStatus.MISSING for p in pairs)}
    for k in sorted(undefined):
        lines.append(f"transform_grid_attempt_{k + 1} is not defined: it answers no pair")
    for p, exp in zip(pairs, expected, strict=False):
        state = "SOLVED" if p.solved else "not solved"
        lines.append(f"pair {p.index} (expected {_shape_text(p.expected_shape)}): {state}")
        for k, a in enumerate(p.attempts):
            if k in undefined:
                continue
            lines.append(_attempt_line(k, a))
            if p.tracebacks[k]:
                last = p.tracebacks[k].strip().splitlines()[-3:]
                lines.extend("    " + t for t in last)
        if not p.solved:
            best_k = max(
                range(2), key=lambda k: (p.attempts[k].status is AttemptStatus.WRONG_CELLS, p.attempts[k].accuracy)
            )
            best, got = p.attempts[best_k], p.outputs[best_k]
            if best.status is AttemptStatus.WRONG_CELLS and got is not None and best.n_wrong <= _DIFF_MAP_MAX_WRONG:
                lines.append(f"  diff of attempt {best_k + 1} ('.' right, digit = expected colour where wrong):")
                lines.extend("    " + row for row in _diff_map(exp, got))
    text = "\n".join(lines)
    if len(text) > _FEEDBACK_LIMIT:
        text = text[: _FEEDBACK_LIMIT - 40] + "\n... (feedback truncated)"
    return text


def submit_feedback(pairs: Sequence[PairScore]) -> str:
    """Submit feedback: solved or not per test input, and the candidate's own shapes (no hidden cells)."""
    solved = sum(p.solved for p in pairs)
    lines = [f"test inputs solved (pass@2): {solved}/{len(pairs)}"]
    for p in pairs:
        parts = []
        for k, a in enumerate(p.attempts):
            if a.produced_grid:
                parts.append(f"attempt {k + 1}: {_shape_text(a.shape)} grid")
            else:
                parts.append(f"attempt {k + 1}: {a.status.value}: {a.reason}")
        lines.append(f"test {p.index}: {'SOLVED' if p.solved else 'not solved'} ({'; '.join(parts)})")
    return "\n".join(lines)
