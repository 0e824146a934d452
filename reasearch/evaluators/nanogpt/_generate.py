"""The default corpus of ``nanogpt/v2``: text from a public generator, sampled from the evaluator secret.

Why. Tiny Shakespeare is public: a repository can carry it and a model can recite it, so a held-out 10%
of it can be memorized, not learned (issue 36: 0.245 bits per byte with no training). The default's
held-out text must exist nowhere else, and its problem must be the same on every machine (docs/architecture.md,
invariant 6): so the *distribution* is public and fixed, and only the draw from it is made per machine.

The distribution (stated; ``GENERATOR_VERSION`` 1). Fit an order-``ORDER`` byte Markov chain on tiny
Shakespeare read cyclically: for each 4-byte context ``c`` seen there, ``p_c`` is the empirical
next-byte distribution, over its ``m_c`` observed successors. Draw each context's row afresh,
``q_c ~ Dirichlet(m_c * p_c)`` (mean ``p_c``; about as spread as one pseudo-count per successor), with
the table's seed derived from the evaluator secret. The training split (``TRAIN_BYTES``) and the held-out
split (``VAL_BYTES``) are two independent runs of the chain ``q`` from the context ``"Firs"`` (the start of
tiny Shakespeare), each with its own secret-derived seed. Nothing here enters a jail (no jail marker);
the trusted side caches the two splits like any corpus (:mod:`._data`).

What it buys. The chain ``q`` is learnable from the training split (about 50,000 contexts, 1 MB of
samples), but the public text only gives its prior mean ``p``: an order-4 model of carried Shakespeare
predicts held-out text worse than the same model fitted on the training split (1.81 vs 1.56 bits per
byte, measured for one secret; ``tests/evaluators/test_nanogpt_generated.py`` checks it under others), and
adding Shakespeare to the training split makes it no better. The held-out run, being a fresh sample,
is in no file anywhere.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reasearch.evaluators._secret import derive_seed

__all__ = ["GENERATOR_VERSION", "ORDER", "TRAIN_BYTES", "VAL_BYTES", "MarkovTable", "fit_table", "generated_split",
           "perturbed_rows", "sample_chain", "split_name"]

GENERATOR_VERSION = 1
ORDER = 4
TRAIN_BYTES = 1_003_854  # the sizes of tiny Shakespeare's 90/10 split, so budgets mean what they meant
VAL_BYTES = 111_540
_PURPOSE = "nanogpt generated corpus"


@dataclass(frozen=True, slots=True)
class MarkovTable:
    """An order-k byte chain's support: one row per (context, next byte), grouped by context.

    Attributes:
        contexts: the sorted context codes (k bytes, big-endian), one per context.
        start: each context's first row; ``start[i+1]`` (or the row count) ends it.
        byte: the next byte of each row.
        prob: the empirical probability of each row within its context.
        next_ctx: the index of the context that follows each row.
        support: each row's context's number of rows (``m_c``).
    """

    contexts: np.ndarray
    start: np.ndarray
    byte: np.ndarray
    prob: np.ndarray
    next_ctx: np.ndarray
    support: np.ndarray

    def context_index(self, ctx: bytes) -> int:
        """The index of the k-byte context ``ctx`` (KeyError if the source never had it)."""
        code = int.from_bytes(ctx, "big")
        i = int(np.searchsorted(self.contexts, code))
        if i >= len(self.contexts) or int(self.contexts[i]) != code:
            raise KeyError(ctx)
        return i


def fit_table(text: bytes, order: int = ORDER) -> MarkovTable:
    """The order-``order`` chain of ``text`` read cyclically (so every context has a successor)."""
    if len(text) <= order:
        raise ValueError(f"a text of {len(text)} bytes has no order-{order} contexts")
    n = len(text)
    a = np.frombuffer(text + text[:order], dtype=np.uint8).astype(np.int64)
    code = np.zeros(n, dtype=np.int64)
    for j in range(order):
        code = code * 256 + a[j : j + n]
    pairs, counts = np.unique(code * 256 + a[order : order + n], return_counts=True)
    ctx, byte = pairs >> 8, pairs & 255
    contexts, start = np.unique(ctx, return_index=True)
    support = np.diff(np.append(start, len(pairs)))
    row_ctx = np.repeat(np.arange(len(contexts)), support)
    totals = np.add.reduceat(counts, start)
    following = (ctx % (256 ** (order - 1))) * 256 + byte
    next_ctx = np.searchsorted(contexts, following)
    return MarkovTable(contexts, start, byte.astype(np.uint8), counts / totals[row_ctx], next_ctx,
                       support[row_ctx])


def perturbed_rows(table: MarkovTable, seed: int) -> np.ndarray:
    """Row probabilities ``q``: each context's row drawn from ``Dirichlet(m_c * p_c)`` (gamma draws, normalized)."""
    g = np.random.default_rng(seed).gamma(table.support * table.prob)
    g = np.maximum(g, 1e-300)  # a row whose every draw underflows becomes uniform over its support
    row_ctx = np.repeat(np.arange(len(table.contexts)), np.diff(np.append(table.start, len(table.byte))))
    return g / np.add.reduceat(g, table.start)[row_ctx]


def sample_chain(table: MarkovTable, q: np.ndarray, n: int, seed: int, start_ctx: int) -> bytes:
    """``n`` bytes of the chain with row probabilities ``q``, from context ``start_ctx`` (inverse-CDF draws)."""
    ends = np.append(table.start[1:], len(q))
    cum = np.cumsum(q)
    base = np.append(0.0, cum)[table.start]
    # Each context's share of the global cumulative sum is rescaled to that context's own total, so the
    # float error of a long cumulative sum never moves mass between contexts.
    lo, hi, span = table.start.tolist(), (ends - 1).tolist(), (cum[ends - 1] - base).tolist()
    cum_l, base_l, byte_l, next_l = cum.tolist(), base.tolist(), table.byte.tolist(), table.next_ctx.tolist()
    draws = np.random.default_rng(seed).random(n).tolist()
    out = bytearray(n)
    c = start_ctx
    for i, u in enumerate(draws):
        j = bisect.bisect_right(cum_l, base_l[c] + u * span[c], lo[c], hi[c])
        out[i] = byte_l[j]
        c = next_l[j]
    return bytes(out)


@functools.lru_cache(maxsize=1)
def _source_table(source: bytes) -> MarkovTable:
    return fit_table(source)


def generated_split(source: bytes, key: bytes | None = None) -> tuple[bytes, bytes]:
    """The training and held-out splits drawn under the secret ``key`` (default: this machine's secret) from the
    chain fitted on ``source`` (the packaged tiny Shakespeare: ``_data.packaged_corpus_bytes()``)."""
    table = _source_table(source)
    params = {"version": GENERATOR_VERSION, "order": ORDER}
    q = perturbed_rows(table, derive_seed(_PURPOSE, {**params, "part": "table"}, key))
    first = table.context_index(source[:ORDER])
    train = sample_chain(table, q, TRAIN_BYTES, derive_seed(_PURPOSE, {**params, "part": "train"}, key), first)
    val = sample_chain(table, q, VAL_BYTES, derive_seed(_PURPOSE, {**params, "part": "val"}, key), first)
    return train, val


def split_name(source_sha256: str, key: bytes | None = None) -> str:
    """A name for the splits :func:`generated_split` draws under ``key`` from the source of hash ``source_sha256``,
    computed without drawing them (the data cache's key: a cache hit costs no sampling).

    It is a keyed hash (its own HMAC purpose: it tells nothing of the secret or the seeds) of the generator's
    parameters, the source's hash and this module's own text, so another secret, source or generator names
    another split.
    """
    params = {"version": GENERATOR_VERSION, "order": ORDER, "train_bytes": TRAIN_BYTES, "val_bytes": VAL_BYTES,
              "source": source_sha256, "code": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
              "part": "cache name"}
    return f"generated-{derive_seed(_PURPOSE, params, key):016x}"
