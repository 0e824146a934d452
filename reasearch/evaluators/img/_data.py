"""The data of ``img/folder-v2``: images and labels read on the trusted side, a stratified split, public files.

Trust boundary: trusted side only. Sources: ``glyphs`` (the default: digit glyphs drawn by the public
generator of :mod:`._glyphs`, the training pool from a public seed, the held-out images from a seed derived
from the evaluator secret, so they exist nowhere else), ``digits`` (the bundled ``data/digits.npz``:
scikit-learn's digits, *public*: a repository can carry all of it, so its held-out split is public and its
results never claim ``sealed``), an ``.npz`` (``images`` uint8 [N, H, W] or [N, H, W, C] and
``labels`` ints, read with ``allow_pickle=False``), or a folder with one subfolder of image files per
class (read with Pillow; every image must have the same size, or pass ``image_size``). The split is
stratified with a fixed seed: train and validation go to a public folder (``train.npz``, ``val.npz``,
``classes.json``) bound read-only into training jails; the held-out test images are handed to the
scoring jail per evaluation, and the test labels stay in this process's memory.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import secrets
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from reasearch.errors import ConfigError

__all__ = ["GLYPH_POOL", "PUBLIC_DATA", "ImageSplit", "load_image_split", "read_images"]

MAX_IMAGES = 200_000
MAX_PIXELS = 512 * 512
MAX_CLASSES = 1000
GLYPH_POOL = 5000  # images of the default data: test_frac of them held out (secret seed), the rest public
PUBLIC_DATA = frozenset({"digits"})  # named sources whose every image is public (held-out split included)
_GLYPH_TRAIN_SEED = 20261204  # public: the training pool is the same on every machine
_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")


@dataclass(frozen=True, slots=True)
class ImageSplit:
    """A prepared split: public folder, class names, the held-out test images and labels (trusted side)."""

    name: str
    key: str
    heldout_public: bool
    public_dir: Path
    classes: tuple[str, ...]
    test_images: np.ndarray
    test_labels: np.ndarray
    n_train: int
    n_val: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.test_images.shape[1:])


def _check(images: np.ndarray, labels: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]:
    if images.dtype != np.uint8:
        raise ConfigError(f"{where}: images must be uint8 (0..255), not {images.dtype}")
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4 or images.shape[-1] not in (1, 3) or images.shape[1] * images.shape[2] > MAX_PIXELS:
        raise ConfigError(f"{where}: images must be [N, H, W] or [N, H, W, 1|3] of at most {MAX_PIXELS} pixels, "
                          f"not {images.shape}")
    if labels.ndim != 1 or len(labels) != len(images) or not np.issubdtype(labels.dtype, np.integer):
        raise ConfigError(f"{where}: labels must be one integer per image ({len(images)}), not {labels.dtype} "
                          f"{labels.shape}")
    if len(images) < 20 or len(images) > MAX_IMAGES:
        raise ConfigError(f"{where}: {len(images)} images; between 20 and {MAX_IMAGES} are needed")
    if labels.min() < 0 or labels.max() >= MAX_CLASSES:
        raise ConfigError(f"{where}: labels must be in [0, {MAX_CLASSES})")
    return images, labels.astype(np.int64)


def _read_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            if "images" not in data.files or "labels" not in data.files:
                raise ConfigError(f"{path}: an .npz needs arrays 'images' and 'labels' (it has {data.files[:10]})")
            return _check(data["images"], data["labels"], str(path))
    except (ValueError, OSError) as exc:
        raise ConfigError(f"{path}: not a readable .npz without pickled objects ({exc})") from None


def _read_folder(root: Path, image_size: int) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    try:
        from PIL import Image
    except ImportError:
        raise ConfigError("reading a folder of images needs Pillow: pip install 'reasearch[img]' (or convert "
                          "the folder to an .npz with 'images' and 'labels')") from None
    classes = tuple(sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith(".")))
    if len(classes) < 2:
        raise ConfigError(f"{root}: needs one subfolder per class (at least 2), found {list(classes)}")
    files = [(f, k) for k, c in enumerate(classes) for f in sorted((root / c).iterdir())
             if f.suffix.lower() in _SUFFIXES and f.is_file() and not f.is_symlink()]
    if len(files) > MAX_IMAGES:
        raise ConfigError(f"{root}: more than {MAX_IMAGES} images")
    arrays, labels = [], []
    rgb = False
    for f, k in files:
        try:
            with Image.open(f) as im:
                im.load()
                if im.width * im.height > MAX_PIXELS * 4:
                    raise ConfigError(f"{f}: {im.width}x{im.height} is too large")
                rgb = rgb or im.mode not in ("L", "1", "I;16", "I", "F")
                img = im.convert("RGB")
                if image_size:
                    img = img.resize((image_size, image_size))
                arrays.append(np.asarray(img, dtype=np.uint8))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{f}: not a readable image ({exc})") from None
        labels.append(k)
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        raise ConfigError(f"{root}: images of several sizes {sorted(shapes)[:4]}; pass -p image_size=N to resize")
    images = np.stack(arrays) if arrays else np.zeros((0, 1, 1, 3), np.uint8)
    if not rgb:
        images = images[..., :1]
    x, y = _check(images, np.array(labels, dtype=np.int64), str(root))
    return x, y, classes


def read_images(data: str, image_size: int = 0) -> tuple[np.ndarray, np.ndarray, tuple[str, ...], str]:
    """``(images uint8 [N, H, W, C], labels int64 [N], class names, content hash)`` of ``data``."""
    if data == "glyphs":
        raise ConfigError("glyphs are drawn per split (load_image_split), not read")
    if data == "digits":
        with resources.files("reasearch.evaluators.img").joinpath("data/digits.npz").open("rb") as fh:
            blob = fh.read()
        with np.load(io.BytesIO(blob), allow_pickle=False) as d:
            x, y = _check(d["images"], d["labels"], "digits.npz")
        return x, y, tuple(str(i) for i in range(10)), hashlib.sha256(blob).hexdigest()
    path = Path(data)
    if path.is_dir():
        x, y, classes = _read_folder(path, int(image_size))
    elif path.is_file() and path.suffix == ".npz":
        x, y = _read_npz(path)
        classes = tuple(str(i) for i in range(int(y.max()) + 1))
    else:
        raise ConfigError(f"data must be 'glyphs', 'digits', a folder of class subfolders or an .npz file, "
                          f"not {data!r}")
    h = hashlib.sha256(np.ascontiguousarray(x).tobytes())
    h.update(np.ascontiguousarray(y).tobytes())
    return x, y, classes, h.hexdigest()


def _stratified(labels: np.ndarray, frac: float, rng: np.random.Generator) -> np.ndarray:
    """A mask picking ``frac`` of each class (at least one of a class with two or more)."""
    mask = np.zeros(len(labels), dtype=bool)
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        k = round(len(idx) * frac) if len(idx) > 1 else 0
        mask[rng.permutation(idx)[:max(k, 1 if len(idx) > 1 else 0)]] = True
    return mask


def _cache_root() -> Path:
    from reasearch.evaluators.training import experiments_root

    return experiments_root() / "img-data"


def load_image_split(data: str, image_size: int, test_frac: float, val_frac: float, split_seed: int) -> ImageSplit:
    """The split of ``data``; the public folder is written once per content and split (remade when gone)."""
    args = (data, int(image_size), float(test_frac), float(val_frac), int(split_seed), str(_cache_root()))
    if data == "glyphs":  # keyed by the held-out seed too: another secret draws other held-out images
        split = _load_glyphs(*args, heldout_seed())
        if split.public_dir.is_symlink() or not (split.public_dir / "classes.json").is_file():
            _load_glyphs.cache_clear()
            split = _load_glyphs(*args, heldout_seed())
        return split
    split = _load(*args)
    if split.public_dir.is_symlink() or not (split.public_dir / "classes.json").is_file():
        _load.cache_clear()
        split = _load(*args)
    return split


def heldout_seed(key: bytes | None = None) -> int:
    """The seed of the default data's held-out images: derived from the evaluator secret (only its holder
    can draw them)."""
    from reasearch.evaluators._secret import derive_seed

    return derive_seed("img glyphs held-out", {"generator": 1}, key)


def _write_public(root: str, key: str, x: np.ndarray, y: np.ndarray, train: np.ndarray, val: np.ndarray,
                  classes: tuple[str, ...]) -> Path:
    """The public folder ``root/key`` (``train.npz``, ``val.npz``, ``classes.json``), made once, atomically."""
    final = Path(root) / key
    if final.is_symlink():  # never bind what a link points to: made again below
        final.unlink()
    if not (final / "classes.json").is_file():
        Path(root).mkdir(mode=0o755, parents=True, exist_ok=True)
        tmp = Path(root) / f".tmp-{secrets.token_hex(6)}"
        tmp.mkdir(mode=0o755)
        os.chmod(tmp, 0o755)
        np.savez(tmp / "train.npz", images=x[train], labels=y[train])
        np.savez(tmp / "val.npz", images=x[val], labels=y[val])
        (tmp / "classes.json").write_text(json.dumps({"classes": list(classes), "shape": list(x.shape[1:])}))
        for f in tmp.iterdir():
            os.chmod(f, 0o644)
        try:
            os.rename(tmp, final)
        except OSError:  # made meanwhile by another process
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return final


@functools.lru_cache(maxsize=1)
def _glyph_pool(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The public training pool (the same on every machine; drawn once per process)."""
    from reasearch.evaluators.img._glyphs import render_glyphs

    x, y = render_glyphs(n, _GLYPH_TRAIN_SEED)
    x.setflags(write=False)
    y.setflags(write=False)
    return x, y


@functools.lru_cache(maxsize=2)
def _load_glyphs(data: str, image_size: int, test_frac: float, val_frac: float, split_seed: int,
                 root: str, test_seed: int) -> ImageSplit:
    """The default data: a public training pool and secret held-out glyphs (``split_seed`` picks validation)."""
    from reasearch.evaluators.img._glyphs import render_glyphs

    if image_size:
        raise ConfigError("image_size applies to a folder of images; the glyphs are drawn at their own size")
    n_test = round(GLYPH_POOL * test_frac)
    classes = tuple(str(i) for i in range(10))
    key = "glyphs-" + hashlib.sha256(json.dumps(["glyphs/1", GLYPH_POOL, test_frac, val_frac, split_seed])
                                     .encode()).hexdigest()[:20]
    final = Path(root) / key
    if not final.is_symlink() and (final / "classes.json").is_file():  # drawn before: only count it
        with np.load(final / "train.npz", allow_pickle=False) as tr:
            n_train = len(tr["labels"])
        with np.load(final / "val.npz", allow_pickle=False) as va:
            n_val = len(va["labels"])
    else:
        x, y = _glyph_pool(GLYPH_POOL - n_test)
        val = _stratified(y, val_frac, np.random.default_rng(split_seed))
        final = _write_public(root, key, x, y, np.flatnonzero(~val), np.flatnonzero(val), classes)
        n_train, n_val = int((~val).sum()), int(val.sum())
    tx, ty = render_glyphs(n_test, test_seed)
    return ImageSplit("glyphs", key, False, final, classes, tx, ty, n_train, n_val)


@functools.lru_cache(maxsize=4)
def _load(data: str, image_size: int, test_frac: float, val_frac: float, split_seed: int, root: str) -> ImageSplit:
    x, y, classes, digest = read_images(data, image_size)
    rng = np.random.default_rng(split_seed)
    test = _stratified(y, test_frac, rng)
    rest = np.flatnonzero(~test)
    val_in_rest = _stratified(y[rest], val_frac, rng)
    val, train = rest[val_in_rest], rest[~val_in_rest]
    key = hashlib.sha256(json.dumps([digest, image_size, test_frac, val_frac, split_seed]).encode()).hexdigest()[:20]
    final = _write_public(root, key, x, y, train, val, classes)
    order = np.flatnonzero(test)
    return ImageSplit(data, key, data in PUBLIC_DATA, final, classes, x[order], y[order], len(train), len(val))
