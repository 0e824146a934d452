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
chmod'ed: :func:`reasearch.engine.files.private_folder`) as ``<name>/train/train.bin`` (world-readable:
bound read-only into the training jail) and ``<name>/private/val.bin`` (mode 0700: never bound into a
training jail, unreadable by the jail uid). ``<name>`` is the first 16 hex digits of the corpus's SHA-256, or
for ``generated`` a keyed hash of the secret and the generator (:func:`._generate.split_name`), known before
sampling: a process that finds the split cached reads it and never samples it again.
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


def _write_split(base: Path, train: bytes, held_out: bytes) -> None:
    """``base/train/train.bin`` (world-readable) and ``base/private/val.bin`` (0600 in a 0700 folder), each
    written whole and renamed into place."""
    for folder, mode, name, blob in ((base / "train", 0o755, "train.bin", train),
                                     (base / "private", 0o700, "val.bin", held_out)):
        private_folder("", override=str(folder), mode=mode)
        fd, tmp = tempfile.mkstemp(dir=folder)
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.chmod(tmp, 0o644 if mode == 0o755 else 0o600)
        os.replace(tmp, folder / name)


def _is_cached(base: Path) -> bool:
    return (base / "train" / "train.bin").is_file() and (base / "private" / "val.bin").is_file()


def _generated(cache: Path) -> tuple[str, int, Path, int]:
    """The default corpus's split, cached under a name computed from the secret without drawing it
    (:func:`._generate.split_name`): only a miss samples (seconds of pure Python). Returns its hash, size,
    folder and split point."""
    from reasearch.evaluators.nanogpt._generate import TRAIN_BYTES, VAL_BYTES, generated_split, split_name

    base = private_folder("", override=str(cache / split_name(_PACKAGED_SHA256)), mode=0o755)
    if not _is_cached(base):
        _write_split(base, *generated_split(packaged_corpus_bytes()))
    h = hashlib.sha256()
    sizes = []
    for path in (base / "train" / "train.bin", base / "private" / "val.bin"):
        blob = path.read_bytes()
        h.update(blob)
        sizes.append(len(blob))
    if sizes != [TRAIN_BYTES, VAL_BYTES]:
        raise ConfigError(f"the cached split under {base} is damaged; remove that folder")
    return h.hexdigest(), TRAIN_BYTES + VAL_BYTES, base, TRAIN_BYTES


@functools.lru_cache(maxsize=8)
def load_corpus(corpus: str) -> Corpus:
    """Prepares (once per machine) the split of ``corpus``: ``"generated"`` (its own train and held-out samples),
    or the 90/10 split of ``"shakespeare"``, ``"stdlib"`` or a file path."""
    cache = _cache_root()  # ours and private (checked): nobody else can plant anything below it
    if corpus == DEFAULT_CORPUS:
        sha, n_bytes, base, split = _generated(cache)
    else:
        if corpus == SHAKESPEARE:
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
        sha, n_bytes, split = hashlib.sha256(data).hexdigest(), len(data), int(len(data) * 0.9)
        base = private_folder("", override=str(cache / sha[:16]), mode=0o755)
        if not _is_cached(base):
            _write_split(base, data[:split], data[split:])
    train_dir, private = base / "train", base / "private"
    if (train_dir / "train.bin").stat().st_size != split:
        raise ConfigError(f"the cached split under {base} is damaged; remove that folder")
    sealed, note = corpus_is_sealed(corpus)
    public = corpus_is_public(corpus)
    return Corpus(corpus, sha, n_bytes, train_dir, private / "val.bin", sealed and not public, note, public)
