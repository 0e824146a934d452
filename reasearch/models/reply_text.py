"""Reading a model's reply: fenced blocks and SEARCH/REPLACE edits, in linear time, with size caps.

A model reply is untrusted text of any shape. The regular expressions these parsers replace were
quadratic on hostile input (a 1.6 MB reply of unclosed ``<<<<<<< SEARCH`` openers made the lazy body
scan to the end once per opener, holding the GIL long enough to starve a driver's heartbeat). Here every
parser is a forward scan with ``str.find``: a failed search for a closer ends the scan (no later opener
can find one either), so each character is examined a bounded number of times. Matches are the ones the
regular expressions gave (each function names its pattern).

Caps: a reply longer than :data:`MAX_REPLY_CHARS` yields nothing (refused whole, never parsed cut), at
most :data:`MAX_EDITS` edits are read, and applying them stops when the text would pass
``max_chars``: applying ``k`` edits costs at most ``k`` scans of a capped text.

Trust boundary: the text is only scanned and sliced, never executed or evaluated.
"""

from __future__ import annotations

import re

__all__ = ["MAX_EDITS", "MAX_REPLY_CHARS", "apply_search_replace", "fenced_blocks", "search_replace_edits",
           "tagged_fences"]

MAX_REPLY_CHARS = 4 * 1024 * 1024  # a longer reply is not parsed at all (a candidate is capped at 2 MiB)
MAX_EDITS = 256  # SEARCH/REPLACE edits read from one reply; more make the reply unusable, not slower

_OPEN, _FENCE = "```", "\n```"
_HEADER = re.compile(r"([A-Za-z0-9_+-]*)[ \t]*\n")  # after ```: a tag, blanks, a newline (linear: disjoint sets)
_SEARCH, _DIVIDER, _REPLACE = "<<<<<<< SEARCH\n", "\n=======\n", "\n>>>>>>> REPLACE"


def fenced_blocks(text: str, *, closed: bool = False, max_chars: int = MAX_REPLY_CHARS) -> list[tuple[str, str]]:
    """``(tag, body)`` of every fenced block, as ``re.findall(r"```([A-Za-z0-9_+-]*)[ \\t]*\\n(.*?)(?:\\n```|\\Z)",
    text, re.DOTALL)`` gives them; with ``closed`` an unclosed last block is not one (the pattern without
    ``|\\Z``). Empty when ``text`` is longer than ``max_chars``."""
    if len(text) > max_chars:
        return []
    out: list[tuple[str, str]] = []
    pos = 0
    while True:
        o = text.find(_OPEN, pos)
        if o < 0:
            return out
        m = _HEADER.match(text, o + 3)  # scans a tag run that ends before the next ``` (no overlap)
        if m is None:
            pos = o + 1  # "````": the next backtick may open a block
            continue
        start = m.end()
        end = text.find(_FENCE, start)
        if end < 0:
            if not closed:
                out.append((m.group(1), text[start:]))
            return out  # no later opener can be closed either
        out.append((m.group(1), text[start:end]))
        pos = end + len(_FENCE)


def tagged_fences(text: str, tags: tuple[str, ...], *, max_chars: int = MAX_REPLY_CHARS) -> list[tuple[str, str]]:
    """``(tag, body)`` as ``re.findall(r"```(TAG1|TAG2)[^\\n]*\\n(.*?)```", text, re.DOTALL)`` gives them: a
    block opens with one of ``tags`` (the first that matches, in order), the rest of that line is ignored, and
    it ends at the next ```. Empty when ``text`` is longer than ``max_chars``."""
    if len(text) > max_chars:
        return []
    out: list[tuple[str, str]] = []
    pos = 0
    while True:
        o = text.find(_OPEN, pos)
        if o < 0:
            return out
        tag = next((t for t in tags if text.startswith(t, o + 3)), None)
        if tag is None:
            pos = o + 1
            continue
        nl = text.find("\n", o + 3 + len(tag))
        if nl < 0:
            return out  # no newline after this opener: none after any later one
        end = text.find(_OPEN, nl + 1)
        if end < 0:
            return out  # nothing closes this block: nothing closes a later one
        out.append((tag, text[nl + 1:end]))
        pos = end + 3


def search_replace_edits(text: str, *, max_chars: int = MAX_REPLY_CHARS,
                         max_edits: int = MAX_EDITS) -> list[tuple[str, str]] | None:
    """``(old, new)`` of every edit, as ``re.findall(r"<<<<<<< SEARCH\\n(.*?)\\n=======\\n(.*?)\\n>>>>>>> REPLACE",
    text, re.DOTALL)`` gives them; None when ``text`` is longer than ``max_chars`` or holds more than
    ``max_edits`` edits (the reply is unusable, never applied in part)."""
    if len(text) > max_chars:
        return None
    out: list[tuple[str, str]] = []
    pos = 0
    while True:
        o = text.find(_SEARCH, pos)
        if o < 0:
            return out
        start = o + len(_SEARCH)
        div = text.find(_DIVIDER, start)
        if div < 0:
            return out  # no divider after this opener: none after any later one
        end = text.find(_REPLACE, div + len(_DIVIDER))
        if end < 0:
            return out
        if len(out) >= max_edits:
            return None
        out.append((text[start:div], text[div + len(_DIVIDER):end]))
        pos = end + len(_REPLACE)


def apply_search_replace(source: str, edits: list[tuple[str, str]], *, max_chars: int) -> str | None:
    """``source`` with ``edits`` applied in order, each replacing the first occurrence of its ``old`` text;
    None when one does not match or the text would pass ``max_chars`` (a partial edit is never used)."""
    if len(source) > max_chars:
        return None
    out = source
    for old, new in edits:
        at = out.find(old)
        if at < 0:
            return None
        if len(out) - len(old) + len(new) > max_chars:
            return None
        out = out[:at] + new + out[at + len(old):]
    return out
