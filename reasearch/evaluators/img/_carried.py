"""Does a repository candidate carry held-out images? A floor under carrying public data, checked before training.

Trust boundary: trusted side only; the repository is hostile. The default data's held-out images are drawn
from the evaluator secret and exist nowhere else, so this check matters for public data (``data=digits``):
a repository that brings the data set with it (scikit-learn's digits, labels included) would score on
images it memorized. Looked for, in every file: the images' pixel bytes (and, when every pixel is a
multiple of one step, as scikit-learn's 0..16 counts are of 15, the values divided by it) as raw bytes,
as a stream of decimal numbers (CSV, Python lists; ``5`` or ``5.0``), and inside what base64, base85 or hex
text decodes to, itself opened as gzip, zlib, bz2, xz or zip (``.npz``: its arrays of whole numbers read
without pickles). Decoding stops at :data:`MAX_EXPANDED` bytes in all; past that the repository cannot be
checked and is refused. A determined encoder (XOR, a permutation) still passes: this is a floor, the
secret-drawn default is the defence.
"""

from __future__ import annotations

import ast
import binascii
import bz2
import hashlib
import io
import lzma
import re
import zipfile
import zlib
from collections.abc import Iterator, Mapping

import numpy as np

from reasearch.ast_lock import parse as parse_locked

__all__ = ["MAX_EXPANDED", "find_carried_images"]

MAX_EXPANDED = 64 << 20
_SAMPLE = 256  # held-out images looked for (carrying the data set carries all of them)
_MIN_FOUND = 3
_PATTERN = 256  # bytes of each image looked for
_TOKEN = re.compile(rb"[^\s,;\[\](){}]+")
_VALUES = {**{str(v).encode(): v for v in range(256)}, **{f"{v}.0".encode(): v for v in range(256)}}
_B64 = re.compile(r"[A-Za-z0-9+/]{64,}={0,2}")
_HEX = re.compile(r"(?:[0-9a-fA-F]{2}){64,}")


class _TooLarge(Exception):
    pass


class _Budget:
    def __init__(self) -> None:
        self.left = MAX_EXPANDED

    def take(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise _TooLarge()


def _numbers(blob: bytes) -> list[bytes]:
    """Runs of decimal numbers in 0..255 (``5`` or ``5.0``) as bytes; any other token ends a run."""
    values = np.fromiter((_VALUES.get(t, -1) for t in _TOKEN.findall(blob)), dtype=np.int16)
    if len(values) < 16:
        return []
    runs = (run[1:] if run[0] < 0 else run for run in np.split(values, np.flatnonzero(values < 0)) if len(run))
    return [run.astype(np.uint8).tobytes() for run in runs if len(run) >= 16]


def _decompressed(blob: bytes, budget: _Budget, depth: int = 0) -> Iterator[bytes]:
    """``blob`` and what it expands to (gzip, zlib, bz2, xz, zip members; an ``.npy``'s whole numbers)."""
    yield blob
    if depth >= 3 or len(blob) < 16:
        return
    out: bytes | None = None
    try:
        if blob[:2] in (b"\x1f\x8b", b"x\x01", b"x^", b"x\x9c", b"x\xda"):
            d = zlib.decompressobj(wbits=47)
            out = d.decompress(blob, budget.left + 1)
        elif blob[:3] == b"BZh":
            out = bz2.BZ2Decompressor().decompress(blob, budget.left + 1)
        elif blob[:6] == b"\xfd7zXZ\x00":
            out = lzma.LZMADecompressor().decompress(blob, budget.left + 1)
    except (OSError, ValueError, EOFError, zlib.error, lzma.LZMAError):
        out = None
    if out is not None:
        budget.take(len(out))
        yield from _decompressed(out, budget, depth + 1)
        return
    if blob[:4] == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(io.BytesIO(blob)) as z:
                for info in z.infolist()[:1000]:
                    budget.take(info.file_size)
                    with z.open(info) as fh:
                        member = fh.read(budget.left + 1)
                    budget.take(max(0, len(member) - info.file_size))
                    yield from _decompressed(member, budget, depth + 1)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, zlib.error, lzma.LZMAError):
            return
    elif blob[:6] == b"\x93NUMPY":
        try:
            arr = np.load(io.BytesIO(blob), allow_pickle=False)
        except (ValueError, OSError, EOFError):
            return
        if arr.dtype.kind in "iuf" and arr.size and np.all(np.isfinite(arr)):
            flat = np.ascontiguousarray(arr).ravel()
            if np.all((flat >= 0) & (flat <= 255) & (flat == np.round(flat))):
                yield flat.astype(np.uint8).tobytes()


def _decoded_text(text: str, budget: _Budget, python: bool) -> Iterator[bytes]:
    """What base64, base85 or hex text in ``text`` (and, in a Python file, its string and bytes constants,
    which may be split over lines) decodes to."""
    strings: list[str] = [text]
    try:
        for node in ast.walk(parse_locked(text)) if python else ():
            if isinstance(node, ast.Constant) and isinstance(node.value, bytes) and len(node.value) >= 16:
                budget.take(len(node.value))
                yield node.value
                strings.append(node.value.decode("latin-1"))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) >= 64:
                strings.append(node.value)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    for s in strings:
        compact = "".join(s.split())
        candidates = [compact] if len(compact) >= 64 else []
        candidates += _B64.findall(compact) + _HEX.findall(compact)
        for c in candidates:
            for decode in (binascii.a2b_base64, bytes.fromhex, _b85):
                try:
                    raw = decode(c)
                except (binascii.Error, ValueError):
                    continue
                if len(raw) >= 16:
                    budget.take(len(raw))
                    yield raw


def _b85(text: str) -> bytes:
    import base64

    return base64.b85decode(text)


def _forms(images: np.ndarray) -> list[np.ndarray]:
    """Up to ``_SAMPLE`` held-out images (each with >= 4 distinct values) as byte rows, and divided by their
    common step when there is one; an image longer than ``_PATTERN`` bytes is looked for by its middle
    ``_PATTERN`` bytes (a contiguous copy of the image holds them)."""
    flat = images.reshape(len(images), -1)
    if flat.shape[1] > _PATTERN:
        start = (flat.shape[1] - _PATTERN) // 2
        flat = flat[:, start:start + _PATTERN]
    keep: list[int] = []
    for i in range(len(flat)):
        if len(np.unique(flat[i])) >= 4:
            keep.append(i)
            if len(keep) == _SAMPLE:
                break
    if not keep:
        return []
    picked = flat[keep].astype(np.uint8)
    forms = [picked]
    step = int(np.gcd.reduce(picked.astype(np.int64).ravel()))
    if step > 1:
        forms.append((picked // step).astype(np.uint8))
    return forms


def _window_keys(blob: bytes) -> np.ndarray:
    """The 8-byte window starting at every offset of ``blob``, as one uint64 each."""
    b = np.frombuffer(blob, dtype=np.uint8).astype(np.uint64)
    n = len(b) - 7
    keys = np.zeros(n, dtype=np.uint64)
    for k in range(8):
        keys |= b[k:k + n] << np.uint64(8 * k)
    return keys


class _Patterns:
    """Images as byte strings, each indexed by its most varied 8-byte window (its anchor)."""

    def __init__(self, form: np.ndarray) -> None:
        self.items = [row.tobytes() for row in form]
        self.length = form.shape[1]
        self.anchors: dict[int, list[tuple[int, int]]] = {}
        distinct = (np.diff(np.sort(np.lib.stride_tricks.sliding_window_view(form, 8, axis=1), axis=2), axis=2) != 0
                    ).sum(2)  # distinct values - 1 of every 8-byte window of every image
        for p, row in enumerate(form):
            at = int(np.argmax(distinct[p]))
            key = int.from_bytes(row[at:at + 8].tobytes(), "little")
            self.anchors.setdefault(key, []).append((p, at))
        self.keys = np.sort(np.fromiter(self.anchors, dtype=np.uint64, count=len(self.anchors)))

    def find(self, blob: bytes, found: set[int]) -> None:
        """Adds to ``found`` the index of every image that occurs in ``blob``."""
        if len(blob) < self.length:
            return
        keys = _window_keys(blob)
        at_key = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        for off in np.flatnonzero(self.keys[at_key] == keys)[:100_000].tolist():
            for p, at in self.anchors.get(int(keys[off]), ()):
                start = off - at
                if p not in found and start >= 0 and blob[start:start + self.length] == self.items[p]:
                    found.add(p)


def find_carried_images(files: Mapping[str, str], images: np.ndarray) -> str | None:
    """Why the repository ``files`` may not be scored on ``images`` (held-out images it carries), or None."""
    forms = [_Patterns(form) for form in _forms(images)]
    if not forms:
        return None
    n = len(forms[0].items)
    budget = _Budget()
    where: dict[str, int] = {}
    everywhere: set[int] = set()
    try:
        for path, text in files.items():
            budget.take(len(text))
            found: set[int] = set()
            raw = text.encode("utf-8", "surrogateescape")
            seen: set[bytes] = set()
            for blob in [*_decompressed(raw, budget), *(d for r in _decoded_text(text, budget, path.endswith(".py"))
                                                        for d in _decompressed(r, budget))]:
                digest = hashlib.sha256(blob).digest()
                if digest in seen:
                    continue
                seen.add(digest)
                runs = [run for run in _numbers(blob) if len(run) >= forms[0].length]
                for form in forms:
                    for b in (blob, *runs):
                        form.find(b, found)
            if found:
                where[path] = len(found)
                everywhere |= found
    except _TooLarge:
        return (f"the repository's files expand (base64, hex, compressed members) to more than "
                f"{MAX_EXPANDED >> 20} MB, too much to check for carried held-out images; keep data out of the "
                "repository")
    total = len(everywhere)
    if total < _MIN_FOUND:
        return None
    files_text = ", ".join(f"{p} ({k})" for p, k in sorted(where.items(), key=lambda kv: -kv[1])[:3])
    return (f"the repository carries held-out images of this task's data: {total} of the {n} looked for were found "
            f"in {files_text}. Scores must come from training on REASEARCH_DATA_DIR, not from the held-out split "
            "brought along; remove the data from the repository")
