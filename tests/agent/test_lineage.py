"""The candidate lineage when the agent writes whole files (issue 27 item 10): a candidate's parent is
the stored candidate it was derived from (the most similar), not "the last one evaluated", so the
report's lineage tree branches where the agent went back, and a program unlike any other is a root."""

from __future__ import annotations

from typing import Any

from reasearch.evaluators.base import candidate_sha256
from reasearch.models.testing import call, say
from reasearch.reports._figures import tree_layout
from reasearch.runs.lineage import nearest_candidate
from reasearch.runs.store import CandidateRecord


def _program(values: list[float], *, extra: str = "") -> str:
    """A ToyTask candidate with some body to it: helpers, a docstring, then the values."""
    return "\n".join([
        '"""A hand-tuned vector for the toy task."""', "", "import math", "", "",
        "def clamp(x, lo=-10.0, hi=10.0):", "    return max(lo, min(hi, x))", "", "",
        "def scale(v, k):", "    return [clamp(x * k) for x in v]", "", "",
        "def run():", f"    base = {[float(v) for v in values]!r}", *([extra] if extra else []),
        "    return scale(base, 1.0)", ""])


A = _program([2.0, 2.0])
A1 = A.replace("base = [2.0, 2.0]", "base = [2.5, 2.0]")  # an edit of A
A2 = A.replace("return max(lo, min(hi, x))", "return x if lo <= x <= hi else (lo if x < lo else hi)")  # back to A
FRESH = "def run():\n    # a fresh start: nothing in common with the others\n    return [3.0, 3.0]\n"


def test_an_agent_that_writes_files_gets_a_branching_lineage(make_agent: Any) -> None:
    script = [say("", call("write_file", path="candidate.py", content=A)), say("", call("evaluate")),
              say("", call("write_file", path="candidate.py", content=A1)), say("", call("evaluate")),
              say("", call("write_file", path="candidate.py", content=A2)), say("", call("evaluate")),
              say("", call("evaluate", code=FRESH)),
              say("", call("finish", reason="done", candidate_id=candidate_sha256(FRESH)[:12]))]
    agent, run = make_agent(script)
    agent.optimize()
    parents = {c.id: c.parent for c in run.store.candidates(run.id)}
    a, a1, a2, fresh = (candidate_sha256(s) for s in (A, A1, A2, FRESH))
    assert parents[a1] == a and parents[a2] == a  # A2 went back to A: a sibling of A1, not its child
    assert parents[fresh] is None  # unlike every earlier program: a new root
    ids = list(parents)
    depth, _ = tree_layout(ids, [parents[i] for i in ids])  # the report's lineage layout
    assert [depth[ids.index(c)] for c in (a, a1, a2, fresh)] == [0, 1, 1, 0]


def test_nearest_candidate_prefers_the_closest_and_the_newest_on_a_tie() -> None:
    def rec(s: str, t: float) -> CandidateRecord:
        return CandidateRecord("r", candidate_sha256(s), s, None, "", t)

    old, same = rec(A, 1.0), rec(A + "", 2.0)
    assert nearest_candidate(A2, [rec(A1, 1.0), old]) == old.id
    twin = CandidateRecord("r", "twin", A, None, "", 3.0)  # the same text under another id, stored later
    assert nearest_candidate(A2, [old, twin]) == "twin"
    assert nearest_candidate(A, [same], exclude=same.id) is None
    assert nearest_candidate(FRESH, [old]) is None
    assert nearest_candidate("x\n" * 100_000, [old]) is None  # a huge hostile source is compared within caps
    assert nearest_candidate(A + "#" * 300_000, [old]) is None  # over 200k characters: not compared at all
