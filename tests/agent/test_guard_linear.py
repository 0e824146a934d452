"""The agent tools' command guard reads a model's hostile tool argument in linear time (issue 36 item 4).

The earlier patterns were quadratic on an option run or a ``[^\\n]*`` gap: 8,000 repeats (24 KB) of
``dd `` took 6.5 s, so a 1.6 MB argument would hold the GIL for hours. The rules block what those patterns
blocked (a property test against them, kept here as the reference), and take half-cap (512 KiB) hostile
arguments under a timeout the old patterns would overrun (their quadratic ``dd `` and ``rm -R`` cases: ~0.16 s
at 8 KB, so ~11 minutes of CPU each at 512 KiB, against the 240 s timeout); a detection at the very end of an
argument just under the cap shows every rule reads all of it; an argument over the cap is refused unread.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasearch.agent.tools.guard import BLOCKED_PATTERNS, MAX_CHECKED_CHARS, check_command, check_python
from reasearch.agent.tools.schema import ToolError

_END = r"(?=$|[\s;&|)'\"`])"
_OLD_SHELL = [re.compile(p, re.MULTILINE) for p in [  # the quadratic patterns the rules replace
    r"\brm\s+(?:-\S+\s+)*-[a-zA-Z]*[rRf][a-zA-Z]*\s+(?:-\S+\s+)*(?:/|/\*|~/?|\$HOME/?|\.\./?|\*)" + _END,
    r"--no-preserve-root",
    r"\bchmod\s+(?:-\S+\s+)*(?:0?777|a\+rwx|ugo\+rwx)\b",
    r"\bchown\s+(?:-\S+\s+)*-[a-zA-Z]*R[a-zA-Z]*\s+\S+\s+/" + _END,
    r"\|\s*(?:sudo\s+)?(?:/usr)?(?:/bin/)?(?:ba|z|da|k|c)?sh\b",
    r"\b(?:curl|wget)\b[^\n|]*\|\s*(?:sudo\s+)?(?:/usr/bin/)?(?:python3?|perl|ruby|node)\b",
    r"\bmkfs(?:\.\w+)?\b",
    r"\bdd\b[^\n]*\bof=/dev/",
    r">\s*/dev/(?:sd|nvme|hd|vd|xvd)\w*",
    r":\s*\(\s*\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:",
    r"(?:^|[;&|(`]\s*|\$\(\s*)(?:/sbin/|/usr/sbin/)?(?:shutdown|reboot|poweroff|halt)\b",
    r"\bsudo\b",
]]
_OLD_CHMOD_PY = re.compile(r"\bos\s*\.\s*chmod\s*\([^)]*0o?777\b")

_WORDS = ["rm", "-rf", "-r", "-x", "-R", "-f", "/", "/*", "~", "~/", "$HOME", "..", "*", "x", "chmod", "777",
          "0777", "a+rwx", "chown", "root", "curl", "wget", "|", "python3", "sh", "bash", "dd", "of=/dev/sda",
          "if=/dev/zero", "mkfs.ext4", ">", "/dev/sda", ";", "&&", "shutdown", "sudo", "\n", "-rm", "/bin/rm",
          "os.chmod(", ")", "0o777", "'x',", "-/rm", "ls"]


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(_WORDS), max_size=14), st.lists(st.sampled_from([" ", "", "  ", "\t", "\n"]),
                                                              min_size=14, max_size=14))
def test_each_rule_blocks_what_its_old_pattern_blocked(words: list[str], gaps: list[str]) -> None:
    text = "".join(w + g for w, g in zip(words, gaps, strict=False))
    for rule, old in zip(BLOCKED_PATTERNS, _OLD_SHELL, strict=True):
        assert (rule.find(text) is not None) == (old.search(text) is not None), (rule.why, text)
    from reasearch.agent.tools.guard import _PYTHON_PATTERNS

    chmod = next(r for r in _PYTHON_PATTERNS if "chmod" in r.why)
    assert (chmod.find(text) is not None) == (_OLD_CHMOD_PY.search(text) is not None), text


_UNITS = ["rm -r ", "rm -rm ", "rm -/rm ", "os.chmod(", "curl ", "dd ", "chown -R ", "chmod -chmod ", "wget x "]
_HALF = MAX_CHECKED_CHARS // 2  # long enough that one quadratic rule overruns the timeout many times (module doc)
_HOSTILE = [u * ((_HALF - 100) // len(u)) for u in _UNITS]
_HOSTILE += [cmd + " -R" * ((_HALF - 100) // 3) for cmd in ("rm", "chown", "chmod")]  # one long run


@pytest.mark.timeout(240)  # the old patterns: hours on any one of these
def test_hostile_arguments_are_checked_in_bounded_work() -> None:
    for text in _HOSTILE:
        assert _HALF - 200 <= len(text) <= _HALF
        for check in (check_python, check_command):
            try:
                check(text)
            except ToolError as exc:
                assert "blocked pattern" in str(exc)
    end = "| python3"  # found at the end of a line just under the cap: the rule reads all of it
    line = "wget x " * ((MAX_CHECKED_CHARS - len(end)) // 7) + end
    assert MAX_CHECKED_CHARS - 7 < len(line) <= MAX_CHECKED_CHARS
    with pytest.raises(ToolError, match="piping a download"):
        check_command(line)


def test_an_argument_over_the_cap_is_refused_unread() -> None:
    with pytest.raises(ToolError, match="over the 1,048,576 the guard reads"):
        check_python("x = 1\n" * (MAX_CHECKED_CHARS // 6 + 1))
    check_python("x = 1\n" * (MAX_CHECKED_CHARS // 6 - 1))  # under it: checked, and ordinary code passes
    for text in _HOSTILE:  # 1.5 MiB of any hostile kind: over the cap, refused unread
        longer = text * 3
        assert len(longer) > MAX_CHECKED_CHARS
        with pytest.raises(ToolError, match="over the"):
            check_command(longer)
