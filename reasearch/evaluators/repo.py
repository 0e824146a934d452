"""Repository candidates: a training task's candidate is a small repository, stored as one text.

The text is canonical JSON (``{"format": "reasearch-repo/1", "files": {path: text}}``, sorted keys),
so its SHA-256 -- the candidate id every store uses -- addresses the exact files that ran: resume,
replay and export reproduce them. An optional ``time_budget_s`` records the budget the experiment
asked for. A plain Python source (not a manifest) is read as a repository holding only ``train.py``.

Paths are relative POSIX paths of letters, digits, ``._-`` and ``/``: no ``..``, no absolute paths, no
``.git``. Files are UTF-8 text; sizes are capped. Reading a folder goes through the guarded reader
(:mod:`reasearch.hostfs.guarded_path`): no symlink in any component (one is an error), regular files only, so a
candidate cannot smuggle a host file into the manifest. Which files a folder with a ``.git`` holds is
asked of git without its own config (:func:`_git_listed`), so the folder's config runs nothing.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reasearch.errors import ConfigError
from reasearch.hostfs.guarded_path import Root, UnsafePathError
from reasearch.hostfs.host_git import check_work_tree, git_argv, git_env

__all__ = ["MAX_FILES", "MAX_TOTAL_BYTES", "RepoCandidate", "decode_repo", "encode_repo", "read_repo_dir", "write_repo"]

FORMAT = "reasearch-repo/1"
MAX_FILES = 200
MAX_TOTAL_BYTES = 4 << 20
_PATH = re.compile(r"^[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)*$")
_SKIP_DIRS = {".git", "__pycache__", ".ipynb_checkpoints"}
_MAX_INDEX_BYTES = 64 << 20


class RepoCandidate:
    """The files of a repository candidate, and the time budget its experiment asked for."""

    __slots__ = ("files", "time_budget_s")

    def __init__(self, files: Mapping[str, str], time_budget_s: float | None = None) -> None:
        self.files = dict(sorted(_check_files(files).items()))
        if time_budget_s is not None and not (
            isinstance(time_budget_s, (int, float))
            and not isinstance(time_budget_s, bool)
            and math.isfinite(time_budget_s)
            and time_budget_s > 0
        ):
            raise ConfigError(f"time_budget_s must be a positive number, not {time_budget_s!r}")
        self.time_budget_s = None if time_budget_s is None else float(time_budget_s)

    def encode(self) -> str:
        return encode_repo(self.files, time_budget_s=self.time_budget_s)


def check_path(path: str) -> str:
    """``path`` if it is an acceptable repository path; ConfigError otherwise."""
    if not isinstance(path, str) or not _PATH.match(path):
        raise ConfigError(f"bad repository path {path!r}: use relative paths of letters, digits, '._-' and '/'")
    parts = path.split("/")
    if any(p in (".", "..") for p in parts) or any(p in _SKIP_DIRS for p in parts):
        raise ConfigError(f"bad repository path {path!r}: no '.', '..', .git or __pycache__ components")
    return path


def _check_files(files: Mapping[str, Any]) -> dict[str, str]:
    if not isinstance(files, Mapping):
        raise ConfigError("a repository's files must be a mapping of path -> text")
    if len(files) > MAX_FILES:
        raise ConfigError(f"a repository candidate holds at most {MAX_FILES} files, not {len(files)}")
    total = 0
    out: dict[str, str] = {}
    for path, text in files.items():
        check_path(path)
        if not isinstance(text, str):
            raise ConfigError(f"{path}: file content must be text")
        total += len(text.encode("utf-8", "surrogatepass"))
        out[path] = text
    if total > MAX_TOTAL_BYTES:
        raise ConfigError(f"a repository candidate holds at most {MAX_TOTAL_BYTES} bytes of files, not {total}")
    for path in out:  # a file may not also be a folder (a/b beside a)
        parent = path.rsplit("/", 1)[0] if "/" in path else ""
        while parent:
            if parent in out:
                raise ConfigError(f"{parent} is both a file and a folder of {path}")
            parent = parent.rsplit("/", 1)[0] if "/" in parent else ""
    return out


def encode_repo(files: Mapping[str, str], *, time_budget_s: float | None = None) -> str:
    """The canonical text of a repository candidate (its SHA-256 is the candidate id)."""
    doc: dict[str, Any] = {"format": FORMAT, "files": dict(sorted(_check_files(files).items()))}
    if time_budget_s is not None:
        doc["time_budget_s"] = float(time_budget_s)
    return json.dumps(doc, sort_keys=True, ensure_ascii=False, indent=1)


def decode_repo(text: str, *, entry_file: str = "train.py") -> RepoCandidate:
    """The repository a candidate text stands for; a plain source becomes ``{entry_file: text}``.

    Raises:
        ConfigError: a manifest that is malformed, too large or has bad paths.
    """
    if not isinstance(text, str):
        raise ConfigError(f"a candidate must be text, not {type(text).__name__}")
    doc: Any = None
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None  # not JSON: a Python source that starts with a dict literal
    if isinstance(doc, dict) and "format" in doc:
        if doc.get("format") != FORMAT:
            raise ConfigError(f"unknown repository manifest format {doc.get('format')!r}; expected {FORMAT!r}")
        unknown = set(doc) - {"format", "files", "time_budget_s"}
        if unknown:
            raise ConfigError(f"unknown keys in the repository manifest: {sorted(unknown)}")
        return RepoCandidate(doc.get("files") or {}, doc.get("time_budget_s"))
    return RepoCandidate({entry_file: text})


def _git_listed(root: Path) -> list[str] | None:
    """Tracked and untracked-but-not-ignored files, as git sees them (None without a git repository).

    The folder's own git directory is never handed to git (its config could name a filter, an fsmonitor
    or a work tree elsewhere): its index and ``info/exclude`` are copied, through the guarded reader,
    into a fresh git directory whose only config is the pinned one (:mod:`reasearch.hostfs.host_git`)."""
    fs = Root(root)
    try:
        st = fs.lstat(".git")
        if st is None or not stat.S_ISDIR(st.st_mode):
            return None
        copied = {}
        for name in ("index", "info/exclude"):
            try:
                copied[name] = fs.read_bytes(f".git/{name}", cap=_MAX_INDEX_BYTES)
            except FileNotFoundError:
                continue
    except UnsafePathError as exc:
        raise ConfigError(f"{root}/.git cannot be read safely: {exc}") from None
    finally:
        fs.close()
    check_work_tree(root, own_git_dir=root / ".git")
    with tempfile.TemporaryDirectory(prefix="reasearch-ls-") as tmp:
        git_dir = Path(tmp) / "git"
        env = git_env(home=Path(tmp) / "home", git_dir=git_dir, work_tree=Path(os.path.realpath(root)))
        try:
            init = subprocess.run(git_argv(["init", "-q"]), cwd=tmp, env=env, capture_output=True, timeout=30,
                                  check=False)
            if init.returncode != 0:
                return None
            for name, data in copied.items():
                (git_dir / name).parent.mkdir(parents=True, exist_ok=True)
                (git_dir / name).write_bytes(data)
            cp = subprocess.run(git_argv(["ls-files", "-z", "--cached", "--others", "--exclude-standard"]),
                                cwd=env["GIT_WORK_TREE"], env=env, capture_output=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
    if cp.returncode != 0:
        return None
    return sorted({p for p in cp.stdout.decode("utf-8", "surrogateescape").split("\0") if p})


def read_repo_dir(root: str | Path, *, listed: list[str] | None = None) -> dict[str, str]:
    """The files of a folder as a repository candidate's files (``.git``, caches and ignored files left out).

    Every read goes through the guarded reader (:class:`~reasearch.hostfs.guarded_path.Root`): a
    symlink in any component of a path (``sub`` -> ``/proc/self`` for ``sub/environ``) is refused, only
    regular files are read, and no more than the size cap.

    Args:
        root: the folder.
        listed: the relative paths to read (default: what git lists in ``root/.git``, else every file).

    Raises:
        ConfigError: a symlink, a non-UTF-8 file, a bad path, too much data, or (with a ``.git``) a nested
            repository or a driver attribute.
    """
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"{root} is not a directory")
    if listed is None:
        listed = _git_listed(root)
    fs = Root(root)
    try:
        return _read_listed(fs, root, listed)
    except UnsafePathError as exc:
        raise ConfigError(f"{exc}; repository candidates hold regular files only") from None
    finally:
        fs.close()


def _read_listed(fs: Root, root: Path, listed: list[str] | None) -> dict[str, str]:
    if listed is None:
        listed = []
        pruned: tuple[str, ...] = ()
        for e in fs.walk():
            if pruned and e.rel.startswith(pruned):
                continue
            if stat.S_ISLNK(e.st.st_mode):
                raise ConfigError(f"{e.rel} is a symlink; repository candidates hold regular files only")
            if e.is_dir:
                if e.rel.rsplit("/", 1)[-1] in _SKIP_DIRS:
                    pruned = (*pruned, e.rel + "/")
                continue
            listed.append(e.rel)
    files: dict[str, str] = {}
    total = 0
    for rel in sorted(listed):
        if any(p in _SKIP_DIRS for p in rel.split("/")) or rel.endswith((".pyc", ".pyo")):
            continue
        st = fs.lstat(rel)  # no component is followed: a symlinked parent is refused here
        if st is None:  # listed by git but deleted in the working tree
            continue
        if stat.S_ISLNK(st.st_mode):
            raise ConfigError(f"{rel} is a symlink; repository candidates hold regular files only")
        if not stat.S_ISREG(st.st_mode):
            continue
        total += st.st_size
        if total > MAX_TOTAL_BYTES or len(files) >= MAX_FILES:
            raise ConfigError(f"{root} holds more than {MAX_FILES} files or {MAX_TOTAL_BYTES} bytes; keep data and "
                              "checkpoints out of the repository (.gitignore)")
        try:
            data = fs.read_bytes(rel, cap=MAX_TOTAL_BYTES)
        except FileNotFoundError:
            continue
        total += len(data) - st.st_size  # what was read, should it have changed since the lstat
        try:
            files[check_path(rel)] = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{rel} is not UTF-8 text; repository candidates hold text files only") from None
    if total > MAX_TOTAL_BYTES:
        raise ConfigError(f"{root} holds more than {MAX_TOTAL_BYTES} bytes; keep data and checkpoints out of the "
                          "repository (.gitignore)")
    return files


def write_repo(files: Mapping[str, str], dest: str | Path) -> Path:
    """Writes the files under ``dest`` (created; must be empty or missing). Returns ``dest``."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise ConfigError(f"{dest} is not empty")
    for path, text in _check_files(files).items():
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
    return dest
