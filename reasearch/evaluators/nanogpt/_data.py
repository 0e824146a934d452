"""The corpora of ``nanogpt/v2``: bytes, a train/held-out split, a hash, and a cache the training jail can read.

Default corpus (``generated``): text sampled from a public generator (an order-4 byte chain fitted on tiny
Shakespeare, each context's row redrawn from a stated Dirichlet) under the evaluator secret
(:mod:`._generate`). Its held-out split is a fresh sample that exists nowhere else: it is *sealed* (no jail
can read it, and no repository or model can have brought it along). ``heldout_public`` is False.

``shakespeare``: tiny Shakespeare itself (public domain, 1,115,394 bytes, shipped xz-compressed as package
data ``data/tinyshakespeare.txt.xz``, 90/10 split). No jail can read the packaged file, but the text is
public: a repository can carry it and a model can recite it (issue 36), so its results say
``heldout_public: true`` and never ``sealed`` (a repository that carries the held-out split is INVALID:
:func:`reasearch.evaluators.heldout_content.find_heldout_content`).

``stdlib`` (the Python standard library's own ``.py`` sources, concatenated in sorted path order) is
public and inside every jail (the interpreter carries those files), so a ``train.py`` can rebuild the
held-out split and memorize it; its results say ``heldout_public: true, sealed: false``. A file path (the
user's own data) is not public: sealed unless it lies in a folder every jail binds (:func:`corpus_is_sealed`).

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

__all__ = ["DEFAULT_CORPUS", "PACKAGED_CORPUS", "PUBLIC_CORPORA", "Corpus", "corpus_is_public", "corpus_is_sealed",
           "load_corpus", "packaged_corpus_bytes", "stdlib_corpus_bytes"]

DEFAULT_CORPUS = "generated"
SHAKESPEARE = "shakespeare"
PUBLIC_CORPORA = (SHAKESPEARE, "stdlib")  # named options whose held-out split anyone can have
PACKAGED_CORPUS = Path(__file__).with_name("data") / "tinyshakespeare.txt.xz"
_PACKAGED_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"

_STDLIB_SKIP = {"site-packages", "test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
                "__pycache__"}


@dataclass(frozen=True, slots=True)
class Corpus:
    """A prepared split.

    Attributes:
        name: ``generated``, ``shakespeare``, ``stdlib`` or the file path given.
        sha256: hash of the whole corpus.
        n_bytes: corpus size.
        train_dir: folder holding ``train.bin`` only.
        val_path: the held-out bytes (trusted side only).
        sealed: False when the held-out split is public or a jail can read the corpus's source (then a score
            may be memorized, not learned).
        seal_note: why it is or is not sealed, in words.
        heldout_public: True when the held-out split is public data (a repository can carry it, a model can
            recite it): then ``sealed`` is False.
    """

    name: str
    sha256: str
    n_bytes: int
    train_dir: Path
    val_path: Path
    sealed: bool = True
    seal_note: str = ""
    heldout_public: bool = False

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


def corpus_is_public(corpus: str) -> bool:
    """Whether ``corpus``'s held-out split is public data (the named public options; a user's file is not)."""
    return corpus in PUBLIC_CORPORA


def corpus_is_sealed(corpus: str) -> tuple[bool, str]:
    """Whether the optimizer could not have ``corpus``'s held-out split, and why: not public data, and no jail
    can read its source (a file under a system folder the jails bind, or under the interpreter's prefix, is
    visible to candidate code)."""
    if corpus == DEFAULT_CORPUS:
        return True, ("sampled under the evaluator secret, outside every jail: the held-out text exists nowhere "
                      "else")
    if corpus == SHAKESPEARE:
        return False, ("tiny Shakespeare is public: a repository can carry it and a model can recite it (no jail "
                       "reads the packaged file, but that does not seal public text)")
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
    """Prepares (once per machine) the split of ``corpus``: ``"generated"`` (its own train and held-out samples),
    or the 90/10 split of ``"shakespeare"``, ``"stdlib"`` or a file path."""
    split: int | None = None
    if corpus == DEFAULT_CORPUS:
        from reasearch.evaluators.nanogpt._generate import generated_split

        train, held_out = generated_split(packaged_corpus_bytes())
        data, split = train + held_out, len(train)
    elif corpus == SHAKESPEARE:
        data = packaged_corpus_bytes()
    elif corpus == "stdlib":
        data = stdlib_corpus_bytes()
    else:
        path = Path(corpus)
        if not path.is_file():
            raise ConfigError(f"corpus {corpus!r} is neither {DEFAULT_CORPUS!r}, {SHAKESPEARE!r}, 'stdlib' nor a "
                              "readable file")
        data = path.read_bytes()
    if len(data) < 10_000:
        raise ConfigError(f"corpus {corpus!r} has {len(data)} bytes; at least 10,000 are needed")
    sha = hashlib.sha256(data).hexdigest()
    cache = _cache_root()  # ours and private (checked): nobody else can plant anything below it
    base = private_folder("", override=str(cache / sha[:16]), mode=0o755)
    train_dir, private = base / "train", base / "private"
    split = int(len(data) * 0.9) if split is None else split
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
    public = corpus_is_public(corpus)
    return Corpus(corpus, sha, len(data), train_dir, private / "val.bin", sealed and not public, note, public)
