"""EPLB's workload: expert loads from a deterministic synthetic generator or a published load-trace file.

Both give *windows*: ``[W, L, E]`` int64 arrays, each the sum of ``window_size`` consecutive entries
of a load history (``{"load_history": [{"logical_expert_load": [[E ints] x L]}, ...]}``, vLLM's
schema). The placement computed on window ``i`` is scored on window ``i + 1``.

Synthetic model (per layer ``l``, expert ``e``, batch ``b``):

* popularity ``p_w = softmax(sigma_l * (sqrt(1 - d) * s + sqrt(d) * u_w))`` at window boundaries
  ``w``: ``s`` a fixed standard normal per (layer, expert), ``sigma_l`` uniform in ``sigma_range``
  (log-normal, heavy-tailed loads: the hottest expert of a layer carries tens of times the median),
  ``u_w`` an AR(1) process with correlation ``drift_rho`` per window (slow drift), ``d`` its share
  ``drift_share`` of the log-variance;
* within a window the popularity moves linearly from ``p_w`` to ``p_{w+1}``; batch ``b`` routes
  ``T_b = tokens_per_batch * U(min_batch_fraction, 1)`` expert assignments (batch-size noise);
* per-batch counts are independent ``Poisson(T_b * p_b)`` (sampling noise).

A window's sum of independent Poissons is Poisson with the summed rate, so windows are drawn
directly (one draw per layer and expert); :meth:`SyntheticWorkload.batch_loads` recovers per-batch entries
that sum exactly to the window by a multinomial split over the batch rates, which is the same joint
distribution. Every window uses its own random stream: the first ``W`` windows do not change when
more are asked for.
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reasearch.errors import ConfigError

__all__ = ["SyntheticWorkload", "load_workload_windows", "window_sums", "write_workload_json"]

_STREAM_STATIC, _STREAM_DRIFT, _STREAM_WINDOW, _STREAM_SPLIT = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class SyntheticWorkload:
    """Parameters of a synthetic expert-load trace (DeepSeek-V3's shape by default).

    Attributes:
        seed: the random seed; the same parameters always give the same trace.
        num_layers: MoE layers ``L``.
        num_experts: logical experts per layer ``E``.
        window_size: history entries (batches) summed into one window.
        tokens_per_batch: expert assignments per layer in a full batch (tokens x top-k).
        min_batch_fraction: batch sizes are uniform in ``[min_batch_fraction, 1] * tokens_per_batch``.
        sigma_range: per-layer spread of log-popularity (uniform in this range).
        drift_share: share of the log-popularity variance that drifts.
        drift_rho: correlation of the drifting part from one window boundary to the next.
    """

    seed: int = 0
    num_layers: int = 58
    num_experts: int = 256
    window_size: int = 100
    tokens_per_batch: int = 32768
    min_batch_fraction: float = 0.5
    sigma_range: tuple[float, float] = (0.9, 1.5)
    drift_share: float = 0.3
    drift_rho: float = 0.9

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma_range", tuple(float(x) for x in self.sigma_range))
        for name in ("num_layers", "num_experts", "window_size", "tokens_per_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"SyntheticWorkload.{name} must be a positive integer, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"SyntheticWorkload.seed must be a non-negative integer, got {self.seed!r}")
        if not 0.0 < self.min_batch_fraction <= 1.0:
            raise ConfigError(f"min_batch_fraction must be in (0, 1], got {self.min_batch_fraction}")
        lo, hi = self.sigma_range
        if not 0.0 <= lo <= hi:
            raise ConfigError(f"sigma_range must be (low, high) with 0 <= low <= high, got {self.sigma_range}")
        if not 0.0 <= self.drift_share <= 1.0 or not 0.0 <= self.drift_rho <= 1.0:
            raise ConfigError("drift_share and drift_rho must lie in [0, 1]")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["sigma_range"] = list(self.sigma_range)
        return d

    def _rng(self, *stream: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, *stream])

    def _popularity(self, num_boundaries: int) -> np.ndarray:
        """``[num_boundaries, L, E]`` float64 popularity (rows sum to 1) at window boundaries."""
        L, E = self.num_layers, self.num_experts
        rng = self._rng(_STREAM_STATIC)
        sigma = rng.uniform(self.sigma_range[0], self.sigma_range[1], size=(L, 1))
        static = rng.standard_normal((L, E))
        drift = self._rng(_STREAM_DRIFT, 0).standard_normal((L, E))
        innovation = math.sqrt(1.0 - self.drift_rho**2)
        out = np.empty((num_boundaries, L, E))
        for w in range(num_boundaries):
            if w:
                drift = self.drift_rho * drift + innovation * self._rng(_STREAM_DRIFT, w).standard_normal((L, E))
            logits = sigma * (math.sqrt(1.0 - self.drift_share) * static + math.sqrt(self.drift_share) * drift)
            logits -= logits.max(axis=1, keepdims=True)
            p = np.exp(logits)
            out[w] = p / p.sum(axis=1, keepdims=True)
        return out

    def _batch_tokens(self, window: int) -> np.ndarray:
        """Expert assignments of each batch of a window (``[window_size]`` float64)."""
        frac = self._rng(_STREAM_WINDOW, window, 0).uniform(self.min_batch_fraction, 1.0, size=self.window_size)
        return self.tokens_per_batch * frac

    def _batch_weights(self, window: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-batch weights of the window's start and end popularity (their rates are linear mixes)."""
        tokens = self._batch_tokens(window)
        t = np.arange(self.window_size) / self.window_size
        return tokens * (1.0 - t), tokens * t

    def windows(self, num_windows: int) -> np.ndarray:
        """The first ``num_windows`` windows: ``[W, L, E]`` int64 expert loads."""
        if isinstance(num_windows, bool) or not isinstance(num_windows, int) or num_windows <= 0:
            raise ConfigError(f"num_windows must be a positive integer, got {num_windows!r}")
        return _synthetic_windows(self, num_windows).copy()

    def batch_loads(self, window: int) -> np.ndarray:
        """The ``window_size`` history entries of one window, ``[window_size, L, E]`` int64 (sum = the window)."""
        counts = _synthetic_windows(self, window + 1)[window]
        popularity = self._popularity(window + 2)
        start_w, end_w = self._batch_weights(window)
        # rate of batch b for (l, e), normalized over b: the multinomial split of the window's count
        rates = start_w[:, None, None] * popularity[window] + end_w[:, None, None] * popularity[window + 1]
        probs = np.moveaxis(rates / rates.sum(axis=0, keepdims=True), 0, -1)  # [L, E, B]
        split = self._rng(_STREAM_SPLIT, window).multinomial(counts, probs)
        return np.ascontiguousarray(np.moveaxis(split, -1, 0)).astype(np.int64)


@functools.lru_cache(maxsize=8)
def _synthetic_windows(trace: SyntheticWorkload, num_windows: int) -> np.ndarray:
    popularity = trace._popularity(num_windows + 1)
    out = np.empty((num_windows, trace.num_layers, trace.num_experts), dtype=np.int64)
    for w in range(num_windows):
        start_w, end_w = trace._batch_weights(w)
        rate = start_w.sum() * popularity[w] + end_w.sum() * popularity[w + 1]
        out[w] = trace._rng(_STREAM_WINDOW, w, 1).poisson(rate)
    out.setflags(write=False)
    return out


def write_workload_json(trace: SyntheticWorkload, num_windows: int, path: str | os.PathLike[str]) -> Path:
    """Writes the first ``num_windows`` windows' history entries in the published JSON schema."""
    path = Path(path)
    with path.open("w", encoding="utf-8") as f:
        f.write('{"load_history": [')
        first = True
        for w in range(num_windows):
            for entry in trace.batch_loads(w):
                f.write(("" if first else ", ") + json.dumps({"logical_expert_load": entry.tolist()}))
                first = False
        f.write("]}")
    return path


def window_sums(history: np.ndarray, window_size: int) -> np.ndarray:
    """Sums ``[T, L, E]`` entries in consecutive windows; a shorter last window is kept (as peers do)."""
    if history.ndim != 3 or history.shape[0] == 0:
        raise ConfigError(f"a load history must be a non-empty [entries, layers, experts] array, got {history.shape}")
    starts = np.arange(0, history.shape[0], window_size)
    return np.add.reduceat(history, starts, axis=0).astype(np.int64)


def load_workload_windows(path: str | os.PathLike[str], window_size: int = 100) -> np.ndarray:
    """Windows of a published load trace (parsed once per process, cached by path, size and mtime).

    Raises:
        FileNotFoundError: no file at ``path``.
        ConfigError: the file is not in the ``load_history`` schema, or its loads are not integers >= 0.
    """
    p = Path(path).expanduser().resolve()
    st = p.stat()
    return _load_cached(str(p), st.st_size, st.st_mtime_ns, int(window_size))


@functools.lru_cache(maxsize=4)
def _load_cached(path: str, size: int, mtime_ns: int, window_size: int) -> np.ndarray:
    with open(path, "rb") as f:
        try:
            data = json.load(f)
        except ValueError as exc:
            raise ConfigError(f"{path} is not JSON: {exc}") from None
    try:
        entries = data["load_history"]
        history = np.asarray([e["logical_expert_load"] for e in entries])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"{path} must be {{'load_history': [{{'logical_expert_load': [[E ints] x L]}}, ...]}} "
            f"with equal shapes throughout ({type(exc).__name__}: {exc})"
        ) from None
    if history.dtype.kind not in "iu" or history.ndim != 3 or (history < 0).any():
        raise ConfigError(f"{path}: loads must be non-negative integers in [entries, layers, experts], "
                          f"got dtype {history.dtype} and shape {history.shape}")
    windows = window_sums(history.astype(np.int64), window_size)
    windows.setflags(write=False)
    return windows
