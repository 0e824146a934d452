"""The corpus of ``nanogpt/v1``: bytes, a 90/10 split, a hash, and a cache the training jail can read.

Default corpus (``shakespeare``): tiny Shakespeare (public domain, 1,115,394 bytes), shipped xz-compressed
as package data (``data/tinyshakespeare.txt.xz``). It is *sealed*: no jail can read it. The jail's code
copy holds only ``engine/``, ``native/`` and evaluator modules marked ``# reasearch: jail`` (never a data
file), and no jail binds the checkout or an installed ``reasearch`` (site-packages folders are masked).
So the held-out 10% cannot be rebuilt by candidate code, only predicted.

``stdlib`` (the Python standard library's own ``.py`` sources, concatenated in sorted path order) is
*not sealed*: the jail's interpreter carries those files, so a ``train.py`` can rebuild the held-out
split and memorize it. It stays as an explicitly named option; its results say ``sealed: false``. A file
path works too: sealed unless it lies in a folder every jail binds (:func:`corpus_is_sealed`).

The split is cached in this user's private folder (``/var/tmp/reasearch.u<euid>/data``, or
``REASEARCH_DATA_CACHE``; a symlink or another user's folder there is refused, never followed or
chmod'ed: :func:`reasearch.engine.files.private_folder`) as ``<sha16>/train/train.bin`` (world-readable:
bound read-only into the training jail) and ``<sha16>/private/val.bin`` (mode 0700: never bound into a
training jail, unreadable by the jail uid).
"""

from __future__ import annotations

import functools
import hashlib
import lzma
import os
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reasearch.engine import SYSTEM_RO
from reasearch.engine.files import private_folder
from reasearch.errors import ConfigError

__all__ = ["DEFAULT_CORPUS", "PACKAGED_CORPUS", "Corpus", "corpus_is_sealed", "load_corpus", "packaged_corpus_bytes",
           "stdlib_corpus_bytes"]

DEFAULT_CORPUS = "shakespeare"
PACKAGED_CORPUS = Path(__file__).with_name("data") / "tinyshakespeare.txt.xz"
_PACKAGED_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"

_STDLIB_SKIP = {"site-packages", "test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
                "__pycache__"}


@dataclass(frozen=True, slots=True)
class Corpus:
    """A prepared split.

    Attributes:
        name: ``shakespeare``, ``stdlib`` or the file path given.
        sha256: hash of the whole corpus.
        n_bytes: corpus size.
        train_dir: folder holding ``train.bin`` only.
        val_path: the held-out bytes (trusted side only).
        sealed: False when a jail can read the corpus's source (then a score may be memorized, not learned).
        seal_note: why it is or is not sealed, in words.
    """

    name: str
    sha256: str
    n_bytes: int
    train_dir: Path
    val_path: Path
    sealed: bool = True
    seal_note: str = ""

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


def packaged_corpus_bytes() -> bytes:
    """Tiny Shakespeare, decompressed from the package data (checked against its recorded SHA-256)."""
    data = lzma.decompress(PACKAGED_CORPUS.read_bytes())
    if hashlib.sha256(data).hexdigest() != _PACKAGED_SHA256:
        raise ConfigError(f"{PACKAGED_CORPUS} does not hold tiny Shakespeare (hash mismatch); reinstall reasearch")
    return data


def corpus_is_sealed(corpus: str) -> tuple[bool, str]:
    """Whether no jail can read ``corpus``'s source, and why (a file under a system folder the jails bind,
    or under the interpreter's prefix, is visible to candidate code)."""
    if corpus == DEFAULT_CORPUS:
        return True, "packaged data outside every jail (not in the jail's code copy, no jail binds it)"
    if corpus == "stdlib":
        return False, ("the Python standard library is inside every jail (the interpreter needs it): train.py can "
                       "rebuild the held-out split and memorize it")
    path = Path(corpus).resolve()
    visible = [*SYSTEM_RO, sys.prefix, sys.base_prefix]
    for folder in visible:
        if path.is_relative_to(Path(folder).resolve()):
            return False, f"{path} lies under {folder}, which the jails bind read-only"
    return True, f"{path} lies outside the folders the jails bind"


def _cache_root() -> Path:
    return private_folder("data", override=os.environ.get("REASEARCH_DATA_CACHE") or None, mode=0o711)


@functools.lru_cache(maxsize=8)
def load_corpus(corpus: str) -> Corpus:
    """Prepares (once per machine) the 90/10 split of ``corpus`` (``"shakespeare"``, ``"stdlib"`` or a file path)."""
    if corpus == DEFAULT_CORPUS:
        data = packaged_corpus_bytes()
    elif corpus == "stdlib":
        data = stdlib_corpus_bytes()
    else:
        path = Path(corpus)
        if not path.is_file():
            raise ConfigError(f"corpus {corpus!r} is neither {DEFAULT_CORPUS!r}, 'stdlib' nor a readable file")
        data = path.read_bytes()
    if len(data) < 10_000:
        raise ConfigError(f"corpus {corpus!r} has {len(data)} bytes; at least 10,000 are needed")
    sha = hashlib.sha256(data).hexdigest()
    cache = _cache_root()  # ours and private (checked): nobody else can plant anything below it
    base = private_folder("", override=str(cache / sha[:16]), mode=0o755)
    train_dir, private = base / "train", base / "private"
    split = int(len(data) * 0.9)
    if not ((train_dir / "train.bin").is_file() and (private / "val.bin").is_file()):
        for folder, mode, name, blob in ((train_dir, 0o755, "train.bin", data[:split]),
                                         (private, 0o700, "val.bin", data[split:])):
            private_folder("", override=str(folder), mode=mode)
            fd, tmp = tempfile.mkstemp(dir=folder)
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob)
            os.chmod(tmp, 0o644 if mode == 0o755 else 0o600)
            os.replace(tmp, folder / name)
    if (train_dir / "train.bin").stat().st_size != split:
        raise ConfigError(f"the cached split under {base} is damaged; remove that folder")
    sealed, note = corpus_is_sealed(corpus)
    return Corpus(corpus, sha, len(data), train_dir, private / "val.bin", sealed, note)
