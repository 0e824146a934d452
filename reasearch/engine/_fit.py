"""Image fitting: which of a pool's preloaded modules a request's candidate imports.

A pool keeps warm images (workers with modules imported before they fork); a request is served by the
image holding just what its candidate imports, read from the import statements of its source and of its
``.py`` files (parsed, never run), plus NumPy when its payload carries arrays. A larger image is slower,
never wrong: where the reading cannot tell (dynamic imports, a text that does not parse, an oversized
source), more modules count, never fewer. :func:`fit_profile` is re-exported by
:mod:`reasearch.engine.sandbox` and :mod:`reasearch.engine`.

Trust: runs on the trusted side, on candidate text (hostile): the text is compiled to a syntax tree only,
never executed; the walks are iterative (a deep tree cannot overflow the stack), the kept answers are
bounded in number and size, and a text too large to scan gets the whole preload.
"""

from __future__ import annotations

import ast
import re
import sys
import threading
from collections.abc import Sequence
from typing import Any

from reasearch.ast_lock import parse as parse_locked
from reasearch.engine.protocol import RunRequest

__all__ = ["fit_profile"]

_ARRAY_SCAN_NODES = 4096  # payload nodes looked at for NumPy arrays; a larger payload gets NumPy unscanned
_QUICK_SCAN_MIN = 4 << 10  # shorter texts are parsed whole (a few hundred us at most) and their answer kept
_FIT_SCAN_CAP = 4 << 20  # sources larger than this (bytes) get the whole preload, unscanned
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Names through which code imports what its import statements do not show.
_DYNAMIC = frozenset({"__import__", "import_module", "exec", "eval", "run_module", "run_path", "find_spec",
                      "spec_from_file_location", "module_from_spec", "load_module", "reload"})


_DYNAMIC_WORD = re.compile(r"\b(?:" + "|".join(sorted(_DYNAMIC)) + r")\b")
_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")  # where statements nest (never in expressions)
_TOPS_CACHE: dict[str, frozenset[str]] = {}
_TOPS_LOCK = threading.Lock()
_TOPS_CACHE_MAX, _TOPS_CACHE_TEXT = 256, 64 << 10  # entries; longest text kept (bytes): at most 16 MiB


def _imported_tops(text: str) -> frozenset[str]:
    """Top-level package names a source imports, from its syntax tree (never executed).

    Where the tree cannot tell (the source does not parse, or it imports through ``__import__``,
    ``importlib``, ``exec`` and the like), every word of the text counts instead: a larger image is
    slower, never wrong.

    A text holding neither ``import`` nor one of those names is not parsed (the caller waits for
    this, on every request): it has no import statement and no dynamic import that the tree would
    show (a text that does not parse cannot import anything either). Where none of those names is a
    word of the text, only statement blocks are walked (an import is a statement; the expressions,
    most of the tree, cannot hold one). Answers for texts up to 64 KiB are kept (the last 256): the
    same program is often evaluated again.
    """
    got = _TOPS_CACHE.get(text)
    if got is not None:
        return got
    got = frozenset(_scan_imports(text))
    if len(text) <= _TOPS_CACHE_TEXT:
        with _TOPS_LOCK:  # callers of a pool run on many threads
            if len(_TOPS_CACHE) >= _TOPS_CACHE_MAX:
                _TOPS_CACHE.pop(next(iter(_TOPS_CACHE)), None)  # the oldest (dicts keep insertion order)
            _TOPS_CACHE[text] = got
    return got


def _word_at(text: str, i: int, n: int) -> bool:
    """True when ``text[i:i+n]`` is a whole word (an ASCII identifier not glued to another)."""
    before = text[i - 1] if i else " "
    after = text[i + n] if i + n < len(text) else " "
    return not (before.isalnum() or before == "_" or after.isalnum() or after == "_")


def _has_word(text: str, word: str) -> bool:
    i = text.find(word)
    while i >= 0:
        if _word_at(text, i, len(word)):
            return True
        i = text.find(word, i + 1)
    return False


def _quick_tops(text: str, wanted: set[str]) -> set[str] | None:
    """Which of ``wanted`` (top-level names) an ASCII source imports, in time that hardly grows with its
    size; None where this cannot tell cheaply (the caller then parses the whole text).

    Only the lines that hold one of the wanted names as a word and the text ``import`` are parsed,
    each on its own: an import statement names its module on the line of its ``import`` or ``from``
    keyword unless a backslash continues the line above, and a line that holds one parses alone as
    statements whose imports are exactly its own. A wanted name on a line after one ending in a
    backslash, or a line that does not parse alone (a parenthesised ``from x import (``, a statement
    after ``else:``, the tail of a string), sends the whole text to the full scan, as do non-ASCII
    text (identifiers are NFKC-normalised) and any dynamic-import name.
    So it never finds less than :func:`_scan_imports` would among ``wanted``.
    """
    if not text.isascii():
        return None
    if any(w in text and _has_word(text, w) for w in _DYNAMIC):
        return None
    if "import" not in text:
        return set()
    if "\r" in text:  # the tokenizer's other line ends, as one (a lone CR ends a line too)
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    found: set[str] = set()
    for name in wanted:
        i = text.find(name)
        while i >= 0:
            if _word_at(text, i, len(name)):
                start = text.rfind("\n", 0, i) + 1
                end = text.find("\n", i)
                end = len(text) if end < 0 else end
                if start >= 2 and text[start - 2] == "\\":
                    return None  # maybe continued from the line above: parse the whole text
                line = text[start:end]
                if "import" in line:
                    try:
                        tree = parse_locked(line.strip(), "<line>")
                    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
                        return None
                    for node in ast.walk(tree):
                        if isinstance(node, ast.Import):
                            found.update(t for t in (a.name.partition(".")[0] for a in node.names) if t in wanted)
                        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                            if node.module.partition(".")[0] in wanted:
                                found.add(node.module.partition(".")[0])
                i = end
            i = text.find(name, i + 1)
    return found


def _scan_imports(text: str) -> set[str]:
    dynamic = _DYNAMIC_WORD.search(text) is not None
    if "import" not in text and not dynamic:
        return set()
    try:
        tree = parse_locked(text, "<candidate>")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return set(_WORD.findall(text))
    tops: set[str] = set()
    if dynamic:
        nodes: Any = ast.walk(tree)  # iterative: a deep tree cannot overflow the stack here
    else:
        nodes = _statements(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            tops.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                tops.add(node.module.partition(".")[0])
        elif dynamic and ((isinstance(node, ast.Name) and node.id in _DYNAMIC) or (
                isinstance(node, ast.Attribute) and node.attr in _DYNAMIC)):
            return set(_WORD.findall(text))
    return tops


def _statements(tree: ast.AST) -> Any:
    """Every statement of ``tree`` (and the handler and case nodes that hold statements), iteratively."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for field in _BLOCKS:
            block = getattr(node, field, None)
            if block:
                stack.extend(block)


_SCALARS = frozenset({int, float, bool, str, type(None), bytes})


def _carries_arrays(payload: Any) -> bool:
    """True when ``payload`` holds a NumPy array or scalar (the child must load NumPy to decode it),
    or is too large to tell within :data:`_ARRAY_SCAN_NODES` containers (then NumPy is assumed).

    A list or tuple of plain scalars (a grid row, a schedule) is checked in one pass at C speed."""
    np = sys.modules.get("numpy")
    if np is None:  # never loaded here: no array can be in the payload
        return False
    stack, seen = [payload], 0
    while stack:
        obj = stack.pop()
        seen += 1
        if seen > _ARRAY_SCAN_NODES:
            return True
        if isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            if not set(map(type, obj)) <= _SCALARS:
                stack.extend(obj)
        elif isinstance(obj, (np.ndarray, np.generic)):
            return True
    return False


def fit_profile(request: RunRequest, preload: Sequence[str]) -> tuple[str, ...]:
    """The modules of ``preload`` a request's candidate imports (sorted).

    Read from the import statements of its source and of its ``.py`` files (parsed, never run);
    a name in a comment or a string does not count. Code that imports dynamically, or does not
    parse, counts every word it holds, and oversized sources get the whole ``preload``: a larger
    image is slower, never wrong, and whatever a candidate imports beyond its image the child
    imports on the candidate's clock. A payload holding NumPy arrays adds ``numpy`` (when it is in
    ``preload``): the child decodes them before the candidate's code runs. A candidate that
    imports nothing of ``preload`` gets the empty image, a bare interpreter with the engine.
    """
    texts = [request.source] + [bytes(v).decode("utf-8", "replace") for k, v in request.files.items()
                                 if isinstance(k, str) and k.endswith(".py") and isinstance(v, (bytes, bytearray))]
    if sum(len(t) for t in texts) > _FIT_SCAN_CAP:
        return tuple(sorted(set(preload)))
    tops: set[str] = set()
    wanted = {m.partition(".")[0] for m in preload}
    for text in texts:
        # The cheap scan first: a new large candidate (an ARC solver with its DSL) is not parsed whole on
        # the trusted side on every request; it finds at least what the full scan would among `wanted`.
        quick = _quick_tops(text, wanted) if len(text) > _QUICK_SCAN_MIN else None
        tops |= quick if quick is not None else _imported_tops(text)
    if "numpy" not in tops and _carries_arrays(request.payload):
        tops.add("numpy")
    return tuple(sorted({m for m in preload if m.partition(".")[0] in tops}))
