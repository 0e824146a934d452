"""``find_heldout_content``: a repository that carries held-out data, raw or inside a compressed, archived or
base64 layer, is found; one that quotes a line, or carries only the training split, is not; a decompression
bomb is reported as uncheckable instead of being inflated (issue 36, item 1)."""

from __future__ import annotations

import base64
import bz2
import gzip
import io
import lzma
import os
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from reasearch.evaluators.heldout_content import (
    MAX_DECODED_BYTES,
    HeldoutFingerprint,
    find_heldout_content,
)


def _text(seed: int, n: int) -> bytes:
    """Word-like text (so the base64 and compression layers see text, not noise)."""
    rng = np.random.default_rng(seed)
    words = [bytes(rng.integers(97, 123, size=int(k)).tolist()) for k in rng.integers(2, 9, size=n // 5)]
    return b" ".join(words)[:n]


TRAIN = _text(0, 60_000)
HELD_OUT = _text(1, 20_000)
FP = HeldoutFingerprint.of(HELD_OUT, exclude=TRAIN, what="the test's held-out split")


def _tar(name: str, data: bytes, mode: str) -> bytes:
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode=mode) as tf:  # type: ignore[call-overload]
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return bio.getvalue()


def _zip(name: str, data: bytes) -> bytes:
    bio = io.BytesIO()
    with zipfile.ZipFile(bio, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(name, data)
    return bio.getvalue()


CARRIERS = {
    "raw": {"data/val.txt": HELD_OUT},
    "raw, inside code": {"train.py": b"X = r'''" + HELD_OUT + b"'''\n"},
    "gzip, any name": {"weights.bin": gzip.compress(HELD_OUT)},
    "xz": {"d.xz": lzma.compress(HELD_OUT)},
    "bzip2": {"d.bz2": bz2.compress(HELD_OUT)},
    "zip": {"d.zip": _zip("inner/val.txt", HELD_OUT)},
    "tar.xz": {"d.tar.xz": _tar("val.txt", HELD_OUT, "w:xz")},
    "base64 of gzip in a .py": {"blob.py": b"B = '''\n" + base64.encodebytes(gzip.compress(HELD_OUT)) + b"'''\n"},
    "split over two files": {"a.txt": HELD_OUT[:10_000], "sub/b.txt": HELD_OUT[10_000:]},
}


def _write(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


@pytest.mark.parametrize("kind", sorted(CARRIERS))
def test_a_carried_copy_is_found_raw_or_in_any_layer(kind: str, tmp_path: Path) -> None:
    """Attacker: the held-out split brought along as a file, inside code, compressed under an innocent name,
    archived, base64'd inside a Python string, or cut in two files. Each is found, and the verdict names the file."""
    match = find_heldout_content(_write(tmp_path, {"README.md": b"hello\n", **CARRIERS[kind]}), FP)
    assert match is not None, kind
    assert match.hits >= FP.min_hits and "held-out split" in match.reason
    assert match.path.split(" ")[0] in {*CARRIERS[kind], "sub/b.txt"}, match


def test_a_quote_or_the_training_split_is_not_held_out_content(tmp_path: Path) -> None:
    """An honest repository may quote a few lines and may hold the (public) training split: neither is a copy.
    Three 32-byte shingle samples of held-out text are below the 1% limit; training text is excluded outright."""
    files = {"train.py": b"# " + HELD_OUT[:200] + b"\n", "data/train.txt": TRAIN, "t.gz": gzip.compress(TRAIN)}
    assert find_heldout_content(_write(tmp_path, files), FP) is None
    assert len(FP.hashes) > 1000 and FP.min_hits == len(FP.hashes) // 100


def test_a_symlink_is_not_followed(tmp_path: Path) -> None:
    """A symlink in the folder to a file outside it is not read (the scan covers what the repository holds)."""
    outside = tmp_path / "outside.txt"
    outside.write_bytes(HELD_OUT)
    repo = tmp_path / "repo"
    repo.mkdir()
    os.symlink(outside, repo / "link.txt")
    assert find_heldout_content(repo, FP) is None


def test_a_decompression_bomb_is_uncheckable_not_inflated(tmp_path: Path) -> None:
    """Attacker: a gzip that inflates past the decode cap, hiding the held-out split behind it (a scan that
    gave up quietly would pass it). The repository is reported as one that cannot be checked."""
    bomb = gzip.compress(b"\0" * (MAX_DECODED_BYTES + (1 << 20)), compresslevel=1)
    match = find_heldout_content(_write(tmp_path, {"a.gz": bomb, "z.py": base64.b64encode(gzip.compress(HELD_OUT))}),
                                 FP)
    assert match is not None and "cannot be checked" in match.reason
