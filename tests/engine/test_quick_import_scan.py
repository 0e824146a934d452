"""The trusted side's cheap import scan never finds less than the full parse, among the names it is asked.

It decides a request's warm image only (a larger image is slower, never wrong), yet a candidate must
not reach a smaller image than the full scan would give it by writing its imports in an odd way.
"""

from __future__ import annotations

import pytest

from reasearch.engine import _fit, fit_profile
from reasearch.engine.protocol import RunRequest

WANTED = {"numpy", "scipy", "numba", "reasearch"}
PAD = "def pad_%d(grid):\n    return [row[:] for row in grid]\n"


def _padded(body: str, n: int = 120) -> str:
    """``body`` inside a DSL-sized file (past the size where the cheap scan is used)."""
    return "".join(PAD % i for i in range(n // 2)) + body + "".join(PAD % i for i in range(n // 2, n))


TRICKY = [
    "import numpy\n",
    "import os, numpy as np\n",
    "import os, \\\n    numpy\n",  # a backslash continues the import onto the next line
    "import os, \\\r\n    numba\n",
    "from \\\n numpy import array\n",
    "# see \\\nimport numpy\n",  # a comment's backslash continues nothing: a real import below it
    "from numpy import (\n    array,\n    zeros,\n)\n",
    "if x:\n    pass\nelse: import numba\n",
    "try: import scipy.optimize\nexcept ImportError: pass\n",
    "class A: import numba\n",
    "x = 1; import numpy\n",
    "x = 1\rimport numba\r",  # a lone CR ends a line
    's = """\nimport numpy\n"""\n',  # in a string: the full scan says no; more is allowed
    '"""doc\nend"""; import numpy\n',
    "def f():\n    exec('import numba')\n",
    "import importlib\nm = importlib.import_module('num' + 'ba')\n",
    "ｉｍｐｏｒｔ numpy\nimport ｎｕｍｐｙ\n",  # NFKC: fullwidth letters name the same module
    "from reasearch.native import geometry\n",
    "import numpyx, mynumba\nfrom .numba import x\n",
    "x = 'numba'  # scipy in a string or a comment is not an import\n",
    "# important: numpy is not imported here\n",
    "import numpy.linalg as la\n",
    "async def f():\n    import numba\n",
    "match x:\n    case 1: import numba\n",
    "with a: import numpy\n",
    "lambda: __import__('numpy')\n",
]


@pytest.mark.parametrize("body", TRICKY)
def test_the_cheap_scan_finds_at_least_what_the_full_one_finds(body: str) -> None:
    text = _padded(body)
    full = _fit._scan_imports(text) & WANTED
    quick = _fit._quick_tops(text, WANTED)
    assert quick is None or quick >= full, (quick, full)
    preload = ("numpy", "scipy.optimize", "numba", "reasearch.native")
    old = tuple(sorted(m for m in preload if m.partition(".")[0] in full))
    assert set(fit_profile(RunRequest(source=text), preload)) >= set(old)


def test_the_cheap_scan_is_exact_on_plain_imports_and_silent_on_mentions() -> None:
    assert _fit._quick_tops(_padded("import numpy as np\nfrom scipy import optimize\n"), WANTED) == {
        "numpy",
        "scipy",
    }
    assert _fit._quick_tops(_padded("x = 'numba'  # scipy is not an import\n"), WANTED) == set()
    assert _fit._quick_tops(_padded("# important numpy note\n"), WANTED) == set()
    assert _fit._quick_tops(_padded("y = 1\n"), WANTED) == set()


def test_a_large_new_candidate_is_not_parsed_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    def full_parse(text: str) -> set[str]:
        raise AssertionError("parsed whole")

    monkeypatch.setattr(_fit, "_scan_imports", full_parse)
    text = "import numpy as np\n" + _padded("", 600)
    assert len(text) > 30_000
    assert fit_profile(RunRequest(source=text), ("numpy", "scipy.optimize", "numba")) == ("numpy",)
