"""Does a repository carry held-out content? A shingle fingerprint of held-out bytes, and a scan of a folder.

A training task whose held-out data is public (tiny Shakespeare, scikit-learn's digits) cannot stop a
repository from bringing that data along (issue 36): :func:`find_heldout_content` looks for it, raw and
inside compressed or encoded layers, so the task can call such a repository ``INVALID`` with the reason.
It is a check, not a seal: an encoding it does not undo (a XOR, a model's weights) passes, so a default
task must not rely on it (its held-out data must exist nowhere else); it turns the plain copy into a
clear verdict.

Fingerprint. :meth:`HeldoutFingerprint.of` hashes every ``SHINGLE``-byte window of the held-out bytes (a
polynomial hash mod 2**64, then mixed), keeps one in ``SAMPLE`` of them by hash (the same rule on both
sides, so a carried copy hits the same sample), and drops the windows that also occur in the public
``exclude`` bytes (the training split: what training may see anyway is not held-out content).

Scan. Every regular file under the folder (no symlink is followed) is scanned as it is; then every layer
inside it is scanned too: gzip, xz, bzip2 and zlib streams, zip and tar members (found by their magic
bytes, whatever the file is called) and base64 runs of 64+ characters in text, up to ``MAX_DEPTH`` layers
deep. What is decoded is capped (``MAX_DECODED_BYTES`` in all): a repository that decodes to more cannot
be checked and is reported as such. Time is linear in the bytes scanned (one binary search per sampled
window into the fixed-size fingerprint). This module runs on the trusted side only and imports no task.
"""

from __future__ import annotations

import base64
import binascii
import bz2
import io
import lzma
import os
import re
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["MAX_DECODED_BYTES", "SHINGLE", "HeldoutFingerprint", "HeldoutMatch", "find_heldout_content"]

SHINGLE = 32  # bytes per window: long enough that text shares one with held-out text by chance only rarely
SAMPLE = 4  # one window in SAMPLE is kept (by hash), on both sides
MAX_DEPTH = 3  # layers of decoding (a tar inside a gzip inside base64 is three)
MAX_DECODED_BYTES = 64 << 20  # decoded bytes scanned per repository, all layers together
_CHUNK = 1 << 20
_B = np.uint64(0x100000001B3)  # the polynomial's base (odd)
_MIX1, _MIX2 = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)
_BASE64_RUN = re.compile(rb"(?:[A-Za-z0-9+/_-]{4}|\s){64,}(?:[A-Za-z0-9+/_-]{2,3}={0,2})?")
_POWERS = np.array([pow(int(_B), SHINGLE - 1 - j, 1 << 64) for j in range(SHINGLE)], dtype=np.uint64)


def _sampled_hashes(data: bytes) -> np.ndarray:
    """The mixed hashes of ``data``'s SHINGLE-byte windows that the sampling rule keeps (uint64), chunk by chunk
    (memory stays a few chunks, whatever the size of ``data``)."""
    n = len(data) - SHINGLE + 1
    if n <= 0:
        return np.empty(0, dtype=np.uint64)
    a = np.frombuffer(data, dtype=np.uint8)
    kept = []
    with np.errstate(over="ignore"):
        for s in range(0, n, _CHUNK):
            c = min(_CHUNK, n - s)
            h = np.zeros(c, dtype=np.uint64)
            for j in range(SHINGLE):
                h += a[s + j : s + j + c].astype(np.uint64) * _POWERS[j]
            h ^= h >> np.uint64(33)
            h *= _MIX1
            h ^= h >> np.uint64(33)
            h *= _MIX2
            h ^= h >> np.uint64(33)
            kept.append(h[h % np.uint64(SAMPLE) == 0])
    return np.concatenate(kept)


@dataclass(frozen=True, slots=True, eq=False)  # an array field: identity, not element-wise ==
class HeldoutFingerprint:
    """Sampled shingle hashes of held-out bytes (sorted, unique), and how many hits make a carried copy.

    Attributes:
        hashes: sorted unique uint64 hashes.
        min_hits: distinct hashes a repository must hold to be reported (1% of the fingerprint, at least 16).
        what: the held-out data in words, for the verdict (``"the held-out split of tiny Shakespeare"``).
    """

    hashes: np.ndarray
    min_hits: int
    what: str

    @classmethod
    def of(cls, heldout: bytes | Iterable[bytes], *, exclude: bytes | Iterable[bytes] = (),
           what: str = "the held-out data", min_fraction: float = 0.01) -> HeldoutFingerprint:
        """The fingerprint of ``heldout`` (bytes, or pieces hashed separately), less the windows in ``exclude``."""
        pieces = [heldout] if isinstance(heldout, bytes) else list(heldout)
        keep = np.unique(np.concatenate([_sampled_hashes(p) for p in pieces] or [np.empty(0, np.uint64)]))
        public = [exclude] if isinstance(exclude, bytes) else list(exclude)
        for p in public:
            keep = keep[~np.isin(keep, _sampled_hashes(p))]
        return cls(keep, max(16, int(len(keep) * min_fraction)), what)

    def hits(self, data: bytes) -> np.ndarray:
        """The fingerprint's hashes found in ``data`` (unique)."""
        if not len(self.hashes):
            return np.empty(0, dtype=np.uint64)
        h = _sampled_hashes(data)
        i = np.minimum(np.searchsorted(self.hashes, h), len(self.hashes) - 1)
        return np.unique(h[self.hashes[i] == h])


@dataclass(frozen=True, slots=True)
class HeldoutMatch:
    """Why a repository is taken to carry held-out content: ``reason`` is the one-line verdict."""

    reason: str
    path: str
    hits: int


class _Budget:
    def __init__(self) -> None:
        self.left = MAX_DECODED_BYTES
        self.exceeded = False

    def take(self, n: int) -> bool:
        self.left -= n
        if self.left < 0:
            self.exceeded = True
        return not self.exceeded


def _capped(decomp: object, data: bytes, budget: _Budget) -> bytes | None:
    """Decompresses ``data`` with ``decomp`` (a stream decompressor taking ``max_length``) within the budget."""
    try:
        out = decomp.decompress(data, max_length=max(0, budget.left) + 1)  # type: ignore[attr-defined]
    except (OSError, EOFError, ValueError, lzma.LZMAError, zlib.error):
        return None
    return out if budget.take(len(out)) else None


def _layers(data: bytes, budget: _Budget) -> Iterator[tuple[str, bytes]]:
    """The decoded layers directly inside ``data``: (how it was found, the bytes)."""
    head = data[:6]
    if head.startswith(b"\x1f\x8b"):
        out = _capped(zlib.decompressobj(16 + zlib.MAX_WBITS), data, budget)
        if out is not None:
            yield "gzip", out
    elif head.startswith(b"\xfd7zXZ\x00"):
        out = _capped(lzma.LZMADecompressor(), data, budget)
        if out is not None:
            yield "xz", out
    elif head.startswith(b"BZh"):
        out = _capped(bz2.BZ2Decompressor(), data, budget)
        if out is not None:
            yield "bzip2", out
    elif len(head) >= 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0:
        out = _capped(zlib.decompressobj(), data, budget)
        if out is not None:
            yield "zlib", out
    if head.startswith(b"PK\x03\x04"):
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                for info in zf.infolist()[:1000]:
                    if info.is_dir() or budget.exceeded:
                        continue
                    with zf.open(info) as fh:
                        member = fh.read(max(0, budget.left) + 1)
                    if budget.take(len(member)):
                        yield f"zip member {info.filename}", member
        except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError, zlib.error, lzma.LZMAError):
            pass
    if data[257:262] == b"ustar":
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
                for tinfo in tf:
                    if not tinfo.isreg() or budget.exceeded:
                        continue
                    fh2 = tf.extractfile(tinfo)
                    member = b"" if fh2 is None else fh2.read(max(0, budget.left) + 1)
                    if budget.take(len(member)):
                        yield f"tar member {tinfo.name}", member
        except (tarfile.TarError, OSError, ValueError, EOFError):
            pass
    if len(data) >= 64:
        for m in _BASE64_RUN.finditer(data):
            run = re.sub(rb"\s+", b"", m.group(0))
            if len(run) < 64:
                continue
            run = run.replace(b"-", b"+").replace(b"_", b"/")
            try:
                out = base64.b64decode(run + b"=" * (-len(run) % 4), validate=False)
            except (binascii.Error, ValueError):
                continue
            if budget.take(len(out)):
                yield "base64", out


def _scan(data: bytes, where: str, fp: HeldoutFingerprint, budget: _Budget, depth: int,
          found: set[int]) -> HeldoutMatch | None:
    new = fp.hits(data)
    found.update(int(h) for h in new)
    if len(found) >= fp.min_hits:
        return HeldoutMatch(f"{where} holds {len(found)} of the {len(fp.hashes)} sampled {SHINGLE}-byte pieces of "
                            f"{fp.what} (a carried copy: the limit is {fp.min_hits})", where, len(found))
    if depth >= MAX_DEPTH:
        return None
    for how, inner in _layers(data, budget):
        hit = _scan(inner, f"{where} ({how})", fp, budget, depth + 1, found)
        if hit is not None:
            return hit
    return None


def find_heldout_content(folder: str | Path, fingerprint: HeldoutFingerprint) -> HeldoutMatch | None:
    """Whether the files under ``folder`` carry held-out content (raw, compressed, archived or base64).

    Distinct fingerprint hits are counted across the whole folder (a copy split over many files counts as
    one copy); ``.git`` is skipped, symlinks are never followed. Decoding stops at ``MAX_DECODED_BYTES``:
    a folder that decodes to more is reported as one that cannot be checked.

    Args:
        folder: the repository folder (trusted copy written by the task).
        fingerprint: :meth:`HeldoutFingerprint.of` the held-out data.

    Returns:
        None when no carried copy was found, else the match (``reason`` is the one-line verdict).
    """
    root = Path(folder)
    budget = _Budget()
    found: set[int] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for name in sorted(filenames):
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            with os.fdopen(fd, "rb") as fh:
                if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                    continue
                data = fh.read(MAX_DECODED_BYTES + 1)
            if not budget.take(len(data)):
                break
            hit = _scan(data, rel, fingerprint, budget, 0, found)
            if hit is not None:
                return hit
    if budget.exceeded:
        return HeldoutMatch(f"the repository holds more than {MAX_DECODED_BYTES >> 20} MiB once decompressed and "
                            "decoded: it cannot be checked for held-out content", str(root), len(found))
    return None
