"""The corpus of ``nanogpt/v1``: bytes, a 90/10 split, a hash, and a cache the training jail can read.

Default corpus: the Python standard library's own ``.py`` sources (every machine has them; tests,
test data and GUI packages left out), concatenated in sorted path order; its SHA-256 (which pins the
Python version) is recorded in every result. Any file path works too (tests use tiny Shakespeare).

The split is cached under ``REASEARCH_DATA_CACHE`` (default ``/var/tmp/reasearch-data``) as
``<sha16>/train/train.bin`` (world-readable: bound read-only into the training jail) and
``<sha16>/private/val.bin`` (mode 0700: never bound into a training jail, unreadable by the jail uid).
"""

from __future__ import annotations

import functools
import hashlib
import os
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reasearch.errors import ConfigError

__all__ = ["Corpus", "load_corpus", "stdlib_corpus_bytes"]

_STDLIB_SKIP = {"site-packages", "test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
                "__pycache__"}


@dataclass(frozen=True, slots=True)
class Corpus:
    """A prepared split.

    Attributes:
        name: ``stdlib`` or the file path given.
        sha256: hash of the whole corpus.
        n_bytes: corpus size.
        train_dir: folder holding ``train.bin`` only.
        val_path: the held-out bytes (trusted side only).
    """

    name: str
    sha256: str
    n_bytes: int
    train_dir: Path
    val_path: Path

    def val(self) -> np.ndarray:
        return np.fromfile(self.val_path, dtype=np.uint8)


def stdlib_corpus_bytes() -> bytes:
    """The standard library's ``.py`` sources, concatenated in sorted order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _STDLIB_SKIP and not d.startswith("test")
                       and not d.startswith("config-")]
        files += [Path(dirpath) / f for f in filenames if f.endswith(".py")]
    return b"".join(p.read_bytes() for p in sorted(files, key=lambda p: p.relative_to(root).as_posix()))


def _cache_root() -> Path:
    return Path(os.environ.get("REASEARCH_DATA_CACHE") or "/var/tmp/reasearch-data")


@functools.lru_cache(maxsize=8)
def load_corpus(corpus: str) -> Corpus:
    """Prepares (once per machine) the 90/10 split of ``corpus`` (``"stdlib"`` or a file path)."""
    if corpus == "stdlib":
        data = stdlib_corpus_bytes()
    else:
        path = Path(corpus)
        if not path.is_file():
            raise ConfigError(f"corpus {corpus!r} is neither 'stdlib' nor a readable file")
        data = path.read_bytes()
    if len(data) < 10_000:
        raise ConfigError(f"corpus {corpus!r} has {len(data)} bytes; at least 10,000 are needed")
    sha = hashlib.sha256(data).hexdigest()
    base = _cache_root() / sha[:16]
    train_dir, private = base / "train", base / "private"
    split = int(len(data) * 0.9)
    if not ((train_dir / "train.bin").is_file() and (private / "val.bin").is_file()):
        _cache_root().mkdir(parents=True, exist_ok=True, mode=0o755)
        os.chmod(_cache_root(), 0o755)
        base.mkdir(exist_ok=True, mode=0o755)
        os.chmod(base, 0o755)
        for folder, mode, name, blob in ((train_dir, 0o755, "train.bin", data[:split]),
                                         (private, 0o700, "val.bin", data[split:])):
            folder.mkdir(exist_ok=True, mode=mode)
            os.chmod(folder, mode)
            fd, tmp = tempfile.mkstemp(dir=folder)
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob)
            os.chmod(tmp, 0o644 if mode == 0o755 else 0o600)
            os.replace(tmp, folder / name)
    if (train_dir / "train.bin").stat().st_size != split:
        raise ConfigError(f"the cached split under {base} is damaged; remove that folder")
    return Corpus(corpus, sha, len(data), train_dir, private / "val.bin")
