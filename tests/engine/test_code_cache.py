"""The worker compiles a large candidate once per distinct source and hands its children the code.

Only the worker's own compile of the exact text (and file name) is reused; the bytes flow from worker
to child, never back. Each evaluation still gets a fresh module: nothing one run does to its module,
its functions or their code reaches the next, and a different text never gets another's code.
"""

from __future__ import annotations

import marshal

import pytest

from reasearch.engine import SandboxConfig, SandboxPool
from reasearch.engine._forking import _CODE_ENTRIES, _CODE_MAX_TEXT, ChildForks
from reasearch.engine._scratch import ScratchFolders
from reasearch.engine.protocol import RunRequest
from reasearch.evaluators.result import Status
from tests.engine.conftest import MODES, needs_mode

PAD = "".join(f"def helper_{i}(grid):\n    return [row[:] for row in grid]\n" for i in range(80))


def _big(body: str) -> str:
    text = PAD + body
    assert len(text) > 4096
    return text


def _cache() -> ChildForks:
    """The worker's children part on its own: making it forks nothing (the zygote starts on request)."""
    return ChildForks(ScratchFolders("/nonexistent", None), None, False, False, None, False)


def test_compiled_is_keyed_by_the_exact_text_and_file_name() -> None:
    w = _cache()
    a = _big("def run():\n    return 'A'\n")
    b = _big("def run():\n    return 'B'\n")
    code_a = w.compiled(a, "/s/eval")
    assert code_a is not None and w.compiled(a, "/s/eval") is code_a  # reused, not recompiled
    code_b = w.compiled(b, "/s/eval")
    assert code_b != code_a
    ns: dict[str, object] = {}
    exec(marshal.loads(code_b), ns)
    assert ns["run"]() == "B"  # type: ignore[operator]
    other = w.compiled(a, "/t/eval")
    assert other is not None and marshal.loads(other).co_filename == "/t/eval/candidate.py"


def test_compiled_leaves_to_the_child_what_it_should_report_or_what_is_not_worth_it() -> None:
    w = _cache()
    assert w.compiled("def run():\n    return 1\n", "/s") is None  # short: the child compiles it
    huge = "x = 1\n" * (_CODE_MAX_TEXT // 6 + 1) + "def run():\n    return x\n"
    assert w.compiled(huge, "/s") is None  # long: compiled in the child, under its CPU limit
    assert w.compiled(_big("def run(:\n"), "/s") is None  # a syntax error is the child's to report
    assert w.compiled(_big("x = 1\nok = x is 1\n"), "/s") is None  # and so is a warning
    assert w.code_cache == {}


def test_the_cache_keeps_only_the_most_recent_sources() -> None:
    w = _cache()
    texts = [_big(f"def run():\n    return {i}\n") for i in range(_CODE_ENTRIES + 3)]
    for t in texts:
        w.compiled(t, "/s")
    w.compiled(texts[3], "/s")  # used again: now the newest
    kept = [src for _, src in w.code_cache]
    assert len(kept) == _CODE_ENTRIES and kept[-1] == texts[3] and texts[0] not in kept


STATEFUL = _big(
    "COUNT = 0\n"
    "def run(tag):\n"
    "    global COUNT\n"
    "    COUNT += 1\n"
    "    run.__code__ = (lambda tag: 'tampered').__code__  # a run that rewrites its own code\n"
    "    helper_0.__defaults__ = (1,)\n"
    "    return [tag, COUNT, LETTER]\n"
)


@pytest.mark.parametrize("mode", MODES)
def test_each_evaluation_gets_a_fresh_module_from_the_cached_code(mode: str) -> None:
    needs_mode(mode)
    with SandboxPool(SandboxConfig(mode=mode, workers=1, preload=())) as pool:
        got = []
        for i in range(6):
            letter = "AB"[i % 2]
            src = STATEFUL + f"LETTER = {letter!r}\n"  # two texts that differ in one character
            out = pool.run(RunRequest(source=src, payload={"tag": i}))
            assert out.status is Status.OK, out.error
            got.append(out.value)
        assert got == [[i, 1, "AB"[i % 2]] for i in range(6)]
        bad = pool.run(RunRequest(source=_big("def run(:\n    pass\n")))
        assert bad.status is Status.CRASH and "SyntaxError" in (bad.error + bad.stderr)
        warned = pool.run(RunRequest(source=_big("def run():\n    x = 1\n    return x is 1\n")))
        assert warned.status is Status.OK and "SyntaxWarning" in warned.stderr
        failing = pool.run(RunRequest(source=_big("def run():\n    return undefined_name\n")))
        assert failing.status is Status.CRASH and "candidate.py" in (failing.error + failing.stderr)
