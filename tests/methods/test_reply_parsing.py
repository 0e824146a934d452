"""Model replies are parsed in linear work with a size cap (issue 36 item 4).

A 1.6 MB reply of unclosed ``<<<<<<< SEARCH`` openers took the regular expression evolve used about half
an hour (extrapolated from 0.1 and 0.2 MB: 7.6 s and 35 s) holding the GIL. The parsers in
:mod:`reasearch.models.reply_text` scan forward with ``str.find``; here their work is counted (characters
examined by every ``find``) on hostile replies of n and 2n openers: it is at most a small multiple of the
reply's length and doubles, not quadruples. The public entry points (evolve's edits and blocks, the
agent's code extraction, the demo and mutating models) take the 1.6 MB replies under a generous timeout
that the old code would overrun by far. The matches are those of the old patterns (a property test).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasearch.models import reply_text
from reasearch.models.reply_text import (
    MAX_EDITS,
    MAX_REPLY_CHARS,
    apply_search_replace,
    fenced_blocks,
    search_replace_edits,
    tagged_fences,
)

MB = 1_600_000
_OLD_BLOCK = re.compile(r"```([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:\n```|\Z)", re.DOTALL)
_OLD_CLOSED = re.compile(r"```([A-Za-z0-9_+-]*)[ \t]*\n(.*?)\n```", re.DOTALL)
_OLD_DEMO = re.compile(r"```(python|text)[^\n]*\n(.*?)```", re.DOTALL)
_OLD_EDIT = re.compile(r"<<<<<<< SEARCH\n(.*?)\n=======\n(.*?)\n>>>>>>> REPLACE", re.DOTALL)


class CountingText(str):
    """A str whose ``find`` counts the characters it examines (the parsers' only scanning operation)."""

    work = 0

    def find(self, sub: str, start: int | None = None, end: int | None = None) -> int:  # type: ignore[override]
        at = str.find(self, sub, start, end)  # type: ignore[arg-type]
        begin = 0 if start is None else start
        CountingText.work += ((len(self) if at < 0 else at) - begin) + len(sub)
        return at


def _work(parse, text: str) -> int:  # type: ignore[no-untyped-def]
    CountingText.work = 0
    parse(CountingText(text))
    return CountingText.work


_HOSTILE = {  # name: (parser, one opener that never closes)
    "edits": (search_replace_edits, "<<<<<<< SEARCH\nx\n"),
    "edits with dividers": (search_replace_edits, "<<<<<<< SEARCH\nx\n=======\ny\n"),
    "closed blocks": (lambda t: fenced_blocks(t, closed=True), "```\nx"),
    "blocks": (fenced_blocks, "```" + "a" * 40),
    "demo blocks": (lambda t: tagged_fences(t, ("python", "text")), "```python"),
    "demo blocks, one line": (lambda t: tagged_fences(t, ("python", "text")), "```python x"),
}


@pytest.mark.parametrize("name", sorted(_HOSTILE))
def test_the_work_on_a_hostile_reply_is_linear(name: str) -> None:
    parse, opener = _HOSTILE[name]
    n = MB // len(opener) // 2 + 1
    small, big = opener * n, opener * (2 * n)
    w_small, w_big = _work(parse, small), _work(parse, big)
    assert len(small) // 4 <= w_small <= 3 * len(small)  # every opener is looked at, each char a few times
    assert w_big <= 2.2 * w_small  # twice the reply, twice the work (quadratic would be 4x)
    assert len(big) >= MB


def test_more_edits_than_the_cap_make_the_reply_unusable_not_slow() -> None:
    edit = "<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n"
    assert search_replace_edits(edit * MAX_EDITS) == [("x", "y")] * MAX_EDITS
    many = edit * (MB // len(edit))
    assert _work(search_replace_edits, many) <= 3 * len(edit) * (MAX_EDITS + 1)  # stops at the cap
    assert search_replace_edits(many) is None


def test_a_reply_over_the_cap_is_not_parsed() -> None:
    huge = "```python\nx = 1\n```\n" + "#" * MAX_REPLY_CHARS
    assert fenced_blocks(huge) == [] and tagged_fences(huge, ("python",)) == []
    assert search_replace_edits("<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE" + " " * MAX_REPLY_CHARS) is None


def test_applying_edits_stops_at_the_size_cap() -> None:
    assert apply_search_replace("a = 1\n", [("1", "2")], max_chars=100) == "a = 2\n"
    assert apply_search_replace("a = 1\n", [("1", "2" * 200)], max_chars=100) is None  # would grow past the cap
    assert apply_search_replace("a = 1\n", [("1", "2"), ("zzz", "")], max_chars=100) is None  # no partial edit
    grow = [("x", "x" * 100)] * 40  # 3,961 characters without the cap
    assert apply_search_replace("x", grow, max_chars=1000) is None
    assert apply_search_replace("x", grow, max_chars=4000) == "x" * 3961


@pytest.mark.timeout(120)  # the old patterns: 10-100 minutes each on these replies
def test_every_reply_parser_takes_a_hostile_1_6_mb_reply() -> None:
    from reasearch.agent.tools.program import extract_code
    from reasearch.methods._driver import apply_edits, last_block
    from reasearch.methods.testing import MutatingModel
    from reasearch.models.demo import DemoModel
    from reasearch.models.messages import ModelRequest

    edits = "<<<<<<< SEARCH\nx\n" * (MB // 17)
    assert apply_edits("x = 1\n", edits) is None
    assert apply_edits("x = 1\n", edits + "<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE") is None
    assert apply_edits("x = 1\n", "<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE\n" + edits) == "x = 2\n"
    fences = "```\nx" * (MB // 5)
    assert last_block(fences, "python") == fences[4:].rstrip() + "\n"  # one unclosed block: the rest
    assert extract_code(fences) is not None and extract_code("```py" + "```py " * (MB // 6)) is None
    for text in ("```python" * (MB // 9), "```python x" * (MB // 11)):
        request = ModelRequest("s", [{"role": "user", "content": text}])
        assert DemoModel().complete(request).text.startswith("```text\n")  # no block: nothing to mutate
    request = ModelRequest("s", [{"role": "user", "content": "```\nx" * (MB // 5)}])
    assert MutatingModel(0).complete(request).text == "(nothing to mutate)"


_PIECES = ["```", "```python", "```text", "```py", "```js x", "\n", "\n```", " ", "\t", "a", "1 = 2", "x",
           "<<<<<<< SEARCH\n", "\n=======\n", "\n>>>>>>> REPLACE", "=======", "`"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=40))
def test_the_matches_are_those_of_the_old_patterns(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert fenced_blocks(text) == _OLD_BLOCK.findall(text)
    assert fenced_blocks(text, closed=True) == _OLD_CLOSED.findall(text)
    assert tagged_fences(text, ("python", "text")) == _OLD_DEMO.findall(text)
    assert search_replace_edits(text) == _OLD_EDIT.findall(text)


def test_the_module_scans_with_find_only() -> None:
    """The counting above sees every scan: the parsers use no regular expression that searches."""
    tree = ast.parse(Path(reply_text.__file__).read_text())
    calls = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    assert "find" in calls and not calls & {"findall", "finditer", "search", "sub", "split", "fullmatch"}
