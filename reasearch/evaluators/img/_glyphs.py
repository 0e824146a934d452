"""The default data of ``img/folder-v2``: digit glyphs drawn by a public generator from secret-derived seeds.

Trust boundary: trusted side only (the seeds come from :mod:`reasearch.evaluators._secret`). The generator
and its distribution are public and the same on every machine: ten stroke skeletons (:data:`STROKES`) in a
unit box, each sample with its own jitter of the skeleton's points, a random affine map (rotation, scale,
shear, shift), stroke width, ink level and pixel noise, rendered anti-aliased into ``SIZE`` x ``SIZE``
grey pixels. What the secret decides is only *which* samples are drawn: the training images come from one
derived seed, the held-out images from another, so the held-out images exist nowhere but in this process
(no repository, data set or model can carry them), while the expected score is the same everywhere.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["SIZE", "STROKES", "render_glyphs"]

SIZE = 16
_SUPER = 2  # supersampling per axis (anti-aliasing)


def _arc(cx: float, cy: float, rx: float, ry: float, a0: float, a1: float, n: int = 10) -> list[tuple[float, float]]:
    """Points of an elliptic arc (degrees, counterclockwise in image coordinates with y down)."""
    return [(cx + rx * math.cos(math.radians(a)), cy - ry * math.sin(math.radians(a)))
            for a in np.linspace(a0, a1, n)]


# Skeletons in [0, 1]^2 (x right, y down); each a list of polylines.
STROKES: tuple[tuple[tuple[tuple[float, float], ...], ...], ...] = tuple(
    tuple(tuple(p) for p in glyph) for glyph in (
        [_arc(0.5, 0.5, 0.28, 0.4, 0, 360, 16)],                                                   # 0
        [[(0.35, 0.25), (0.55, 0.1), (0.55, 0.9)], [(0.38, 0.9), (0.72, 0.9)]],                   # 1
        [_arc(0.5, 0.32, 0.26, 0.22, 160, -30, 9) + [(0.25, 0.9), (0.78, 0.9)]],                 # 2
        [_arc(0.48, 0.3, 0.24, 0.2, 150, -90, 9), _arc(0.48, 0.7, 0.27, 0.2, 90, -150, 9)],       # 3
        [[(0.62, 0.9), (0.62, 0.1), (0.22, 0.65), (0.82, 0.65)]],                                 # 4
        [[(0.75, 0.1), (0.3, 0.1), (0.27, 0.45)] + _arc(0.5, 0.66, 0.27, 0.24, 120, -150, 10)],  # 5
        [[(0.68, 0.1), (0.35, 0.4)] + _arc(0.5, 0.66, 0.24, 0.24, 170, -190, 14)],               # 6
        [[(0.22, 0.1), (0.78, 0.1), (0.42, 0.9)], [(0.38, 0.5), (0.68, 0.5)]],                    # 7
        [_arc(0.5, 0.29, 0.22, 0.19, 0, 360, 12), _arc(0.5, 0.69, 0.27, 0.21, 0, 360, 12)],      # 8
        [_arc(0.5, 0.34, 0.24, 0.24, -10, 350, 14) + [(0.74, 0.38), (0.62, 0.9)]],               # 9
    ))


def _segments(glyph: tuple[tuple[tuple[float, float], ...], ...]) -> tuple[np.ndarray, np.ndarray]:
    a = np.concatenate([np.asarray(line[:-1], dtype=np.float64) for line in glyph])
    b = np.concatenate([np.asarray(line[1:], dtype=np.float64) for line in glyph])
    return a, b


_GRID = (np.stack(np.meshgrid(np.arange(SIZE * _SUPER), np.arange(SIZE * _SUPER), indexing="xy"), -1)
         .reshape(-1, 2).astype(np.float64) + 0.5) / _SUPER  # sample points in pixel units, (x, y)


def _render_one(label: int, rng: np.random.Generator) -> np.ndarray:
    a, b = _segments(STROKES[label])
    # Handwriting: each skeleton point moves a little (segments share endpoints, so strokes stay joined).
    jitter = rng.normal(0.0, 0.035, (len(a) + len(b), 2))
    a, b = a + jitter[:len(a)], b + jitter[len(a):]
    angle = math.radians(rng.uniform(-15.0, 15.0))
    sx, sy = rng.uniform(0.75, 1.05), rng.uniform(0.75, 1.05)
    shear = rng.uniform(-0.3, 0.3)
    rot = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    m = rot @ np.array([[1.0, shear], [0.0, 1.0]]) @ np.diag([sx, sy]) * (SIZE - 2)
    shift = np.array([SIZE / 2, SIZE / 2]) + rng.uniform(-1.5, 1.5, 2)
    a = (a - 0.5) @ m.T + shift
    b = (b - 0.5) @ m.T + shift
    # Squared distance from every sample point to the nearest segment.
    d = b - a
    rel = _GRID[:, None, :] - a[None]
    t = np.clip((rel * d[None]).sum(-1) / np.maximum((d * d).sum(-1), 1e-9), 0.0, 1.0)
    rel -= t[..., None] * d[None]
    dist = np.sqrt((rel * rel).sum(-1).min(1))
    half = rng.uniform(0.45, 0.9)  # half the stroke width, in pixels
    ink = np.clip(half + 0.5 - dist, 0.0, 1.0).reshape(SIZE, _SUPER, SIZE, _SUPER).mean((1, 3))
    img = ink * rng.uniform(0.6, 1.0) + rng.normal(0.0, 0.12, (SIZE, SIZE))
    return np.clip(np.rint(img * 255.0), 0, 255).astype(np.uint8)


def render_glyphs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images (uint8 [n, SIZE, SIZE, 1]) and labels (int64, balanced: ``i % 10``, shuffled) from ``seed``."""
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(n, dtype=np.int64) % len(STROKES))
    images = np.stack([_render_one(int(k), rng) for k in labels]) if n else np.zeros((0, SIZE, SIZE), np.uint8)
    return images[..., None], labels
