"""What the agent may learn when candidate code fails inside a scoring jail: a bounded, checked summary.

Trust boundary. In a scoring jail (``img``'s and ``nanogpt``'s ``_infer.py``, ``rl``'s ``_policy_server.py``)
candidate code runs on held-out inputs, so anything it prints or raises may carry held-out bytes. None of that
text reaches the agent: the log stays on disk for a person, and the feedback is built here from a small JSON
report the jail's harness writes when candidate code raises (``{"step", "type", "subclass", "where"}``, by
:func:`reasearch.evaluators._scoring_jail.write_report`).
That file lives in a folder candidate code can write, so every field is checked against what the trusted
side knows: ``step`` must be one of the harness's steps, ``type`` the name of a built-in exception class,
``where`` a file of the candidate's repository (as the trusted side wrote it) and a line inside that file.
Anything else reads as "unknown". What a hostile model can still signal is which of those few values it
picks (a few bits per evaluation), not the held-out text.
"""

from __future__ import annotations

import builtins
import json
import os
from collections.abc import Mapping
from pathlib import Path

from reasearch.engine.files import UntrustedFileError, read_untrusted

__all__ = ["BUILTIN_EXCEPTIONS", "REPORT_NAME", "WITHHELD", "describe_failure"]

REPORT_NAME = "error.json"
# Names a report may give for an exception's type: the built-in exception classes, nothing candidate-made.
BUILTIN_EXCEPTIONS = frozenset(
    n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)
)
WITHHELD = ("Messages and output of your code during scoring are withheld (it runs on held-out data); "
            "reproduce the failure on the training data with python_exec.")
_MAX_REPORT_BYTES = 4096


def _read_report(path: Path) -> dict[str, object] | None:
    """The report, or None (absent, too big, not a JSON object). Candidate code can write this file."""
    try:  # the one trusted reader: no symlink, a regular file (never a FIFO), at most the cap
        doc = json.loads(read_untrusted(path.parent, path.name, max_bytes=_MAX_REPORT_BYTES))
    except (UntrustedFileError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _where(repo_dir: Path, where: object) -> str | None:
    """``file:line`` when it names a line of a file in the candidate's repository, else None."""
    if not (isinstance(where, list) and len(where) == 2 and isinstance(where[0], str) and isinstance(where[1], int)
            and not isinstance(where[1], bool)):
        return None
    rel, line = where
    root = Path(os.path.realpath(repo_dir))
    target = root / rel
    if ".." in Path(rel).parts or Path(rel).is_absolute() or target.is_symlink() or not target.is_file():
        return None
    if not Path(os.path.realpath(target)).is_relative_to(root):
        return None
    try:
        n_lines = target.read_bytes().count(b"\n") + 1
    except OSError:
        return None
    if not 1 <= line <= n_lines:
        return None
    return f"{Path(rel).as_posix()}:{line}"


def describe_failure(folder: Path, repo_dir: Path, steps: Mapping[str, str], what: str) -> tuple[str | None, str]:
    """One line for the agent about a scoring jail that failed, and the step it failed in (None: unknown).

    Args:
        folder: the jail's writable folder (holding :data:`REPORT_NAME` when the harness caught an exception).
        repo_dir: the candidate's repository as the trusted side wrote it.
        steps: the harness's steps (name -> words, e.g. ``"forward": "during model(idx)"``).
        what: the process, in words (``the scoring run``).
    """
    doc = _read_report(folder / REPORT_NAME)
    if doc is None:
        return None, (f"{what} ended without an exception report (it exited, was killed, or crashed in native "
                      f"code). {WITHHELD}")
    step, name = doc.get("step"), doc.get("type")
    step = step if isinstance(step, str) and step in steps else None
    name = name if isinstance(name, str) and name in BUILTIN_EXCEPTIONS else None
    kind = "an exception" if name is None else f"{name}{' (a subclass of it)' if doc.get('subclass') is True else ''}"
    where = _where(repo_dir, doc.get("where"))
    place = f"raised at {where}" if where else "raised outside your repository's files (in library code, or exec'd)"
    during = steps[step] if step is not None else "at an unknown step"
    return step, f"{what} failed: {kind} {place}, {during}. {WITHHELD}"
