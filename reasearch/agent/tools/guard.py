"""A blocklist of destructive shell and Python patterns: a second layer behind the sandbox, never the only one."""

from __future__ import annotations

import re

from reasearch.agent.tools.schema import ToolError

__all__ = ["BLOCKED_PATTERNS", "check_command", "check_python"]

_END = r"(?=$|[\s;&|)'\"`])"
# (pattern, why) pairs; matched case-sensitively on the whole command text.
BLOCKED_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.MULTILINE), why)
    for p, why in [
        (
            r"\brm\s+(?:-\S+\s+)*-[a-zA-Z]*[rRf][a-zA-Z]*\s+(?:-\S+\s+)*(?:/|/\*|~/?|\$HOME/?|\.\./?|\*)" + _END,
            "recursive or forced removal of /, ~, .. or everything",
        ),
        (r"--no-preserve-root", "rm --no-preserve-root"),
        (r"\bchmod\s+(?:-\S+\s+)*(?:0?777|a\+rwx|ugo\+rwx)\b", "chmod 777 (world-writable)"),
        (r"\bchown\s+(?:-\S+\s+)*-[a-zA-Z]*R[a-zA-Z]*\s+\S+\s+/" + _END, "recursive chown of /"),
        (r"\|\s*(?:sudo\s+)?(?:/usr)?(?:/bin/)?(?:ba|z|da|k|c)?sh\b", "piping into a shell"),
        (
            r"\b(?:curl|wget)\b[^\n|]*\|\s*(?:sudo\s+)?(?:/usr/bin/)?(?:python3?|perl|ruby|node)\b",
            "piping a download into an interpreter",
        ),
        (r"\bmkfs(?:\.\w+)?\b", "making a file system"),
        (r"\bdd\b[^\n]*\bof=/dev/", "dd onto a device"),
        (r">\s*/dev/(?:sd|nvme|hd|vd|xvd)\w*", "writing onto a block device"),
        (r":\s*\(\s*\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:", "a fork bomb"),
        (
            r"(?:^|[;&|(`]\s*|\$\(\s*)(?:/sbin/|/usr/sbin/)?(?:shutdown|reboot|poweroff|halt)\b",
            "shutting the machine down",
        ),
        (r"\bsudo\b", "sudo"),
    ]
)
_PYTHON_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), why) for p, why in [
        (r"\bshutil\s*\.\s*rmtree\s*\(\s*(?:r?['\"](?:/|~|\.\.)/?['\"]|os\.path\.expanduser|Path\s*\(\s*['\"]/['\"]\s*\))",
         "shutil.rmtree of /, ~ or .."),
        (r"\bos\s*\.\s*chmod\s*\([^)]*0o?777\b", "chmod 777 (world-writable)"),
        (r"\bos\s*\.\s*(?:kill|killpg)\s*\(\s*(?:-1|0)\s*,", "killing every process"),
    ]
)


def _check(text: str, patterns: tuple[tuple[re.Pattern[str], str], ...], what: str) -> None:
    for pattern, why in patterns:
        m = pattern.search(text)
        if m:
            raise ToolError(f"refused: this {what} matches a blocked pattern ({why}: {m.group(0).strip()!r}); "
                            "work inside the workspace with ordinary commands")


def check_command(command: str) -> None:
    """Raises ToolError when a shell command matches a destructive pattern."""
    _check(command, BLOCKED_PATTERNS, "command")


def check_python(code: str) -> None:
    """Raises ToolError when Python code matches a destructive pattern (shell strings included)."""
    _check(code, _PYTHON_PATTERNS, "code")
    _check(code, BLOCKED_PATTERNS, "code")
