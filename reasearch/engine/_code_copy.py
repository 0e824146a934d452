"""The code copy: the part of the ``reasearch`` package that jailed code imports, copied and verified.

``reasearch`` is never bound from the checkout: the jail gets a copy holding only what jailed code
imports: ``reasearch/__init__.py``, ``errors.py``, ``ast_lock.py`` (engine modules parse through it),
``py.typed``, ``engine/``, ``native/`` (candidates use the kernels), and from ``evaluators/`` only
modules whose leading comment lines carry :data:`JAIL_MARKER` (task harnesses and what they import),
with the ``__init__.py`` files on their way. Trusted-only modules (scoring, workload generators, data
loaders, task classes) and all data files stay out. The engine reads the marker from the files: it
never imports the evaluators.

Trust: trusted side. The copy lives in the private runtime folder (:mod:`reasearch.engine._runtime_root`)
and is re-hashed in full on every use: its sources must hash as the checkout's do now.
"""

from __future__ import annotations

import compileall
import hashlib
import os
import shutil
import sys
from pathlib import Path

from reasearch.engine._runtime_root import _CODE_PREFIX, _prune, _reuse_or_build, _sha256, runtime_root

__all__ = ["JAIL_MARKER", "code_copy_files"]

# The first comment lines of an evaluator module that jailed code imports (a harness and its imports).
JAIL_MARKER = "# reasearch: jail"

_CODE_SUFFIXES = (".py", ".so", ".pyd")


def _package_root() -> Path:
    """The folder of the ``reasearch`` package (the source tree for an editable install)."""
    return Path(__file__).resolve().parents[1]


def _code_files(root: Path) -> list[Path]:
    """The code files below ``root`` (no data, no caches), sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        for fn in sorted(filenames):
            if fn.endswith(_CODE_SUFFIXES) or fn == "py.typed":
                out.append(Path(dirpath) / fn)
    return out


def _has_marker(path: Path) -> bool:
    """True if the leading comment lines of a module include :data:`JAIL_MARKER`."""
    try:
        with open(path, encoding="utf-8") as f:
            for _ in range(20):
                line = f.readline()
                if not line:
                    return False
                text = line.strip()
                if text == JAIL_MARKER or text.startswith(JAIL_MARKER + " "):
                    return True
                if text and not text.startswith("#"):
                    return False
    except (OSError, UnicodeDecodeError):
        return False
    return False


def code_copy_files(root: Path | None = None) -> list[Path]:
    """The files of the ``reasearch`` package that enter the jail (see the module docstring), sorted."""
    root = _package_root() if root is None else Path(root)
    files = [root / n for n in ("__init__.py", "errors.py", "ast_lock.py", "py.typed") if (root / n).is_file()]
    for sub in ("engine", "native"):
        files += _code_files(root / sub)
    evaluators = root / "evaluators"
    marked = [f for f in _code_files(evaluators) if f.suffix == ".py" and _has_marker(f)]
    for f in marked:
        files.append(f)
        for d in f.relative_to(root).parents[:-1]:  # the packages on the way: evaluators/, evaluators/x/
            init = root / d / "__init__.py"
            if init.is_file():
                files.append(init)
    return sorted(dict.fromkeys(files))


def _code_copy() -> Path:
    """A verified, code-only, world-readable copy of what jailed code imports; returns the folder for PYTHONPATH."""
    root = _package_root()
    files = code_copy_files(root)
    expect = {f"reasearch/{f.relative_to(root)}": _sha256(f) for f in files}
    key = hashlib.sha256(f"{sys.version}\0{sys.implementation.cache_tag}\n".encode())
    for rel, digest in expect.items():
        key.update(f"{rel}\0{digest}\n".encode())
    final = runtime_root() / f"{_CODE_PREFIX}{key.hexdigest()[:16]}"

    def build(work: Path) -> None:
        for f in files:
            t = work / "reasearch" / f.relative_to(root)
            for d in reversed(t.relative_to(work).parents[:-1]):
                (work / d).mkdir(mode=0o755, exist_ok=True)
            shutil.copyfile(f, t)
            os.chmod(t, 0o755 if f.suffix in (".so", ".pyd") else 0o644)
        # Byte-compile once here: the jail cannot write __pycache__, and workers start faster.
        compileall.compile_dir(str(work / "reasearch"), quiet=2, workers=1)
        for d in (work, *[p for p in work.rglob("*") if p.is_dir()]):
            os.chmod(d, 0o755)
        for f in work.rglob("*.pyc"):
            os.chmod(f, 0o644)

    _reuse_or_build(final, build, full=True, expect=expect)
    _prune()
    return final
