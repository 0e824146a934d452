"""A blocklist of destructive shell and Python patterns: a second layer behind the sandbox, never the only one.

The text checked is a model's tool argument (a command line, a program): hostile, of any size. Every rule
runs in linear time: a regular expression with a run of option words (``rm -x -y ... /``) or a ``[^\n]*``
gap was quadratic (a 24 KB line of ``dd dd dd ...`` took 6 s, a 1.6 MB one would take hours, holding the
GIL), so option runs are taken whole (possessive, found with ``finditer`` so a start inside a consumed run
is never tried again) and gaps are searched once per line or pipe segment (:class:`BlockRule`). What is
blocked is what the earlier patterns blocked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from reasearch.agent.tools.schema import ToolError

__all__ = ["BLOCKED_PATTERNS", "BlockRule", "check_command", "check_python"]

_END = r"(?=$|[\s;&|)'\"`])"
_FLAGS = r"((?:-\S+\s+)*+)"  # a run of option words, taken whole (possessive: never re-split)


@dataclass(frozen=True, slots=True)
class BlockRule:
    """One blocked pattern, found in linear time (see the module docstring).

    A rule is ``head`` (found with ``finditer``: a match consumes its option run, so no start inside it is
    tried again), then ``tail`` matched right after it; ``flag`` (when set) must fully match one option word
    of the run (``owner``: the word after the run is an owner, as chown's). Segment rules (``segment`` set)
    instead find ``head``, then ``tail`` later in the same segment (up to the first of the ``segment``
    characters) or, with ``at_end``, at that segment's end; a segment is searched once, whatever number of
    heads it holds.
    """

    head: re.Pattern[str]
    why: str
    tail: re.Pattern[str] | None = None
    flag: re.Pattern[str] | None = None
    owner: bool = False
    segment: str = ""  # segment rules: the characters that end a segment ("\n", "\n|", ")")
    at_end: bool = False  # segment rules: the tail must match where the segment ends, not inside it

    def find(self, text: str) -> str | None:
        """The text that matched (for the refusal), or None."""
        if self.segment:
            return self._find_in_segments(text)
        for m in self.head.finditer(text):
            if self.tail is None:
                return m.group(0)
            words = m.group(1).split() if m.groups() else []
            at = m.end()
            if self.owner:  # chown -R OWNER /: the owner word follows the run (or is its last word)
                t = self.tail.match(text, at)
                if t and any(self.flag.fullmatch(w) for w in words):  # type: ignore[union-attr]
                    return text[m.start():t.end()]
                t = _SLASH.match(text, at)
                if t and len(words) >= 2 and any(self.flag.fullmatch(w) for w in words[:-1]):  # type: ignore[union-attr]
                    return text[m.start():t.end()]
                continue
            t = self.tail.match(text, at)
            if t is None:
                continue
            if self.flag is None or any(self.flag.fullmatch(w) for w in words):
                return text[m.start():t.end()]
        return None

    def _find_in_segments(self, text: str) -> str | None:
        assert self.tail is not None
        pos = 0
        while True:
            m = self.head.search(text, pos)
            if m is None:
                return None
            end = min((i for i in (text.find(c, m.end()) for c in self.segment) if i >= 0), default=len(text))
            if self.at_end:  # the tail opens at the segment's end (curl ... | python: the first pipe)
                t = self.tail.match(text, end) if end < len(text) else None
            else:  # the tail lies inside the segment
                t = self.tail.search(text, m.end(), end)
            if t is not None:
                return text[m.start():t.end()]
            pos = end + 1  # every later start in this segment sees the same rest of it: none matches


_SLASH = re.compile(r"/" + _END, re.MULTILINE)

# Matched case-sensitively on the whole command text.
BLOCKED_PATTERNS: tuple[BlockRule, ...] = (
    BlockRule(re.compile(r"\brm\s+" + _FLAGS), "recursive or forced removal of /, ~, .. or everything",
              tail=re.compile(r"(?:/|/\*|~/?|\$HOME/?|\.\./?|\*)" + _END, re.MULTILINE),
              flag=re.compile(r"-[a-zA-Z]*[rRf][a-zA-Z]*")),
    BlockRule(re.compile(r"--no-preserve-root"), "rm --no-preserve-root"),
    BlockRule(re.compile(r"\bchmod\s+" + _FLAGS), "chmod 777 (world-writable)",
              tail=re.compile(r"(?:0?777|a\+rwx|ugo\+rwx)\b")),
    BlockRule(re.compile(r"\bchown\s+" + _FLAGS), "recursive chown of /",
              tail=re.compile(r"\S+\s+/" + _END, re.MULTILINE), flag=re.compile(r"-[a-zA-Z]*R[a-zA-Z]*"), owner=True),
    BlockRule(re.compile(r"\|\s*(?:sudo\s+)?(?:/usr)?(?:/bin/)?(?:ba|z|da|k|c)?sh\b"), "piping into a shell"),
    BlockRule(re.compile(r"\b(?:curl|wget)\b"), "piping a download into an interpreter",
              tail=re.compile(r"\|\s*(?:sudo\s+)?(?:/usr/bin/)?(?:python3?|perl|ruby|node)\b"), segment="\n|",
              at_end=True),
    BlockRule(re.compile(r"\bmkfs(?:\.\w+)?\b"), "making a file system"),
    BlockRule(re.compile(r"\bdd\b"), "dd onto a device", tail=re.compile(r"\bof=/dev/"), segment="\n"),
    BlockRule(re.compile(r">\s*/dev/(?:sd|nvme|hd|vd|xvd)\w*"), "writing onto a block device"),
    BlockRule(re.compile(r":\s*\(\s*\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:"), "a fork bomb"),
    BlockRule(re.compile(r"(?:^|[;&|(`]\s*|\$\(\s*)(?:/sbin/|/usr/sbin/)?(?:shutdown|reboot|poweroff|halt)\b",
                         re.MULTILINE), "shutting the machine down"),
    BlockRule(re.compile(r"\bsudo\b"), "sudo"),
)
_PYTHON_PATTERNS: tuple[BlockRule, ...] = (
    BlockRule(re.compile(r"\bshutil\s*\.\s*rmtree\s*\(\s*(?:r?['\"](?:/|~|\.\.)/?['\"]|os\.path\.expanduser|"
                         r"Path\s*\(\s*['\"]/['\"]\s*\))"), "shutil.rmtree of /, ~ or .."),
    BlockRule(re.compile(r"\bos\s*\.\s*chmod\s*\("), "chmod 777 (world-writable)", tail=re.compile(r"0o?777\b"),
              segment=")"),
    BlockRule(re.compile(r"\bos\s*\.\s*(?:kill|killpg)\s*\(\s*(?:-1|0)\s*,"), "killing every process"),
)


MAX_CHECKED_CHARS = 1 << 20  # a longer command or program is refused unchecked (write it to a file instead)


def _check(text: str, rules: tuple[BlockRule, ...], what: str) -> None:
    if len(text) > MAX_CHECKED_CHARS:
        raise ToolError(f"refused: this {what} is {len(text):,} characters, over the {MAX_CHECKED_CHARS:,} the "
                        "guard reads; write the program to a file with write_file and run that file")
    for rule in rules:
        found = rule.find(text)
        if found is not None:
            shown = found.strip()
            shown = shown if len(shown) <= 200 else shown[:200] + "..."
            raise ToolError(f"refused: this {what} matches a blocked pattern ({rule.why}: {shown!r}); "
                            "work inside the workspace with ordinary commands")


def check_command(command: str) -> None:
    """Raises ToolError when a shell command matches a destructive pattern."""
    _check(command, BLOCKED_PATTERNS, "command")


def check_python(code: str) -> None:
    """Raises ToolError when Python code matches a destructive pattern (shell strings included)."""
    _check(code, _PYTHON_PATTERNS, "code")
    _check(code, BLOCKED_PATTERNS, "code")
