"""``nanogpt/v2``'s held-out data (issue 36, item 1): the default is a secret-seeded sample of a public generator,
so carrying tiny Shakespeare (or reciting it) earns nothing over learning the training split; the public
corpora say ``heldout_public`` and never ``sealed``; a repository carrying a public held-out split is INVALID
before it trains, in both sandbox modes."""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

import reasearch
from reasearch.errors import ConfigError, UnknownTaskError
from reasearch.evaluators.heldout_content import find_heldout_content
from reasearch.evaluators.kinds import ExperimentOptions
from reasearch.evaluators.nanogpt._data import DEFAULT_CORPUS, load_corpus, packaged_corpus_bytes
from reasearch.evaluators.nanogpt._generate import (
    ORDER,
    TRAIN_BYTES,
    VAL_BYTES,
    fit_table,
    generated_split,
    perturbed_rows,
    sample_chain,
)
from reasearch.evaluators.nanogpt.task import NanoGPTTask
from reasearch.evaluators.repo import encode_repo, write_repo
from reasearch.evaluators.result import Status
from tests.engine.conftest import needs_mode


@pytest.fixture(autouse=True)
def _cpu_slots() -> None:
    os.environ.setdefault("REASEARCH_FAKE_GPUS", "0")
    os.environ.setdefault("REASEARCH_CPUS_PER_SLOT", "1")


def _task(**params: object) -> NanoGPTTask:
    return reasearch.make("nanogpt/v2", **{"time_budget_s": 30.0, "grace_s": 30.0, "eval_tokens": 1024,  # type: ignore[return-value]
                                            "eval_time_limit_s": 120.0, **params})


@functools.lru_cache(maxsize=2)
def _split(key: bytes) -> tuple[bytes, bytes]:
    """The splits under ``key`` (made once per test process: each costs about a second)."""
    return generated_split(packaged_corpus_bytes(), key)


def _codes(text: bytes, k: int) -> np.ndarray:
    a = np.frombuffer(text, dtype=np.uint8).astype(np.int64)
    c = np.zeros(len(a) - k, dtype=np.int64)
    for j in range(k):
        c = c * 256 + a[j : j + len(a) - k]
    return c * 256 + a[k:]


def ngram_bpb(train: bytes, test: bytes, order: int = ORDER) -> float:
    """Bits per byte of ``test`` under an interpolated (Witten-Bell) order-``order`` byte model fitted on ``train``:
    one fixed learner, so what it scores says what its data was worth."""
    n = len(test) - order
    prob = np.full(n, 1 / 256)
    for k in range(order + 1):
        rows, counts = np.unique(_codes(train, k), return_counts=True)
        ctx, first = np.unique(rows >> 8, return_index=True)
        totals, types = np.add.reduceat(counts, first), np.diff(np.append(first, len(rows)))
        want = _codes(test, k)[order - k :]
        i = np.minimum(np.searchsorted(rows, want), len(rows) - 1)
        seen = np.where(rows[i] == want, counts[i], 0)
        j = np.minimum(np.searchsorted(ctx, want >> 8), len(ctx) - 1)
        has = ctx[j] == want >> 8
        total, typ = np.where(has, totals[j], 0), np.where(has, types[j], 0)
        lam = np.where(total > 0, total / (total + typ + 1e-12), 0.0)
        prob = lam * np.where(total > 0, seen / np.maximum(total, 1), 0.0) + (1 - lam) * prob
    return float(-np.log2(prob).mean())


def test_carrying_tiny_shakespeare_earns_nothing_on_the_default_corpus() -> None:
    """Attacker: bring tiny Shakespeare along (or recite it) and predict the default held-out split with it.
    The same order-4 learner does clearly worse on the held-out split from carried Shakespeare than from the
    training split, and Shakespeare added to the training split buys nothing (<= 0.01 bits per byte), under
    this machine's secret and under another one. (Under v1 the default held-out split was the last 10% of tiny
    Shakespeare: the carried text held it, and this learner scored far better from it.)"""
    shakespeare = packaged_corpus_bytes()
    default = load_corpus(DEFAULT_CORPUS)
    splits = [((default.train_dir / "train.bin").read_bytes(), default.val().tobytes())]
    splits.append(_split(b"secret one, long enough"))  # another machine's secret
    for leg, (train, held_out) in enumerate(splits):
        honest, carried = ngram_bpb(train, held_out), ngram_bpb(shakespeare, held_out)
        assert honest < carried - 0.15, (honest, carried)
        if leg == 0:  # the suite's time: the second secret checks the gap only
            both = ngram_bpb(train + shakespeare, held_out)
            assert both > honest - 0.01, (honest, both)


def test_the_generated_corpus_is_a_secret_seeded_sample_of_the_stated_chain() -> None:
    """Same seeds, same rows and sample; another secret, another sample (no file anywhere holds it); every
    transition of either is one of tiny Shakespeare's order-4 transitions (the problem is the same everywhere)."""
    a, b = _split(b"secret one, long enough"), _split(b"secret two, long enough")
    assert a[1] != b[1] and a[0] != b[0]
    assert len(a[0]) == TRAIN_BYTES and len(a[1]) == VAL_BYTES
    assert a[1] not in packaged_corpus_bytes() and a[1][:64] not in packaged_corpus_bytes()
    table = fit_table(packaged_corpus_bytes())
    q = perturbed_rows(table, 7)
    assert np.array_equal(q, perturbed_rows(table, 7)) and not np.allclose(q, table.prob)
    assert sample_chain(table, q, 5000, 8, 0) == sample_chain(table, q, 5000, 8, 0)
    rows = np.unique(table.contexts[np.repeat(np.arange(len(table.contexts)), np.diff(
        np.append(table.start, len(table.byte))))] * 256 + table.byte)
    for text in (*a, *b):
        assert np.isin(np.unique(_codes(text, ORDER)), rows).all()


def test_public_corpora_say_heldout_public_and_never_sealed(tmp_path: Path) -> None:
    """Every result states whether its held-out data is public; a public one never claims ``sealed``; the
    user's own file (outside every jail) and the default stay sealed. (v1: tiny Shakespeare, the default,
    said ``sealed: true``.)"""
    own = tmp_path / "mine.txt"
    own.write_bytes(b"my own private notes, line after line.\n" * 400)
    expect = {DEFAULT_CORPUS: (False, True), "shakespeare": (True, False), "stdlib": (True, False),
              str(own): (False, True)}
    for corpus, (public, sealed) in expect.items():
        task = _task(corpus=corpus, eval_tokens=256)
        _, targets = task.windows(task._corpus().val(), 64)
        res = task.score_solution({"logits": np.zeros((*targets.shape, 256), np.float32), "block_size": 64})
        assert res.status is Status.OK and res.score == pytest.approx(8.0)
        assert res.metrics["heldout_public"] is public and res.metrics["sealed"] is sealed, corpus
        assert ("NOT SEALED" in res.feedback) is (not sealed)
    assert _task().spec.id == "nanogpt/v2" and _task().params.corpus == "generated"
    with pytest.raises(UnknownTaskError, match="Did you mean 'nanogpt/v2'"):  # v1's default scored public text
        reasearch.make("nanogpt/v1")


@pytest.mark.parametrize("mode", ["nsjail", "process"])
def test_a_repository_carrying_the_public_heldout_split_is_invalid(mode: str, tmp_path: Path) -> None:
    """Attacker: the seed repository plus tiny Shakespeare, xz'd and base64'd into a Python file, evaluated on
    ``corpus=shakespeare`` (the v1 attack that scored 0.245 bits per byte untrained). It is INVALID with the
    reason before any training (no training log), in both sandbox modes. On the default corpus the same text is
    no held-out content (it is not in the held-out sample)."""
    import base64
    import lzma

    needs_mode(mode)
    task = _task(corpus="shakespeare", sandbox_mode=mode)
    blob = base64.encodebytes(lzma.compress(packaged_corpus_bytes())).decode()
    files = {**task.seed_files(), "corpus_blob.py": f"BLOB = '''\n{blob}'''\n"}
    res = task.evaluate(encode_repo(files), seed=0, options=ExperimentOptions(str(tmp_path / "exp")))
    assert res.status is Status.INVALID, res.feedback[-500:]
    assert "carries held-out data" in res.feedback and "corpus_blob.py (base64) (xz)" in res.feedback
    assert "tiny Shakespeare's held-out split" in res.feedback and not (tmp_path / "exp" / "train.log").exists()
    default = _task()
    fingerprint = default.heldout_fingerprint()
    assert fingerprint is not None and len(fingerprint.hashes) > 10_000
    assert find_heldout_content(write_repo(files, tmp_path / "repo"), fingerprint) is None


def test_a_cached_generated_split_is_read_without_sampling_it_again(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    """The default corpus's cache is named by a keyed hash of the secret and the generator, computed before
    sampling: a process that finds the split cached reads it (sampling costs seconds of pure Python in every
    process otherwise); another secret names another split; a damaged cache is refused, never served."""
    from reasearch.evaluators._secret import secret
    from reasearch.evaluators.nanogpt import _data, _generate

    calls: list[bytes] = []

    def sampler(source: bytes, key: bytes | None = None) -> tuple[bytes, bytes]:
        k = secret() if key is None else key  # a stand-in for the chain: cheap, and different per secret
        calls.append(k)
        return (k * TRAIN_BYTES)[:TRAIN_BYTES], (k[::-1] * VAL_BYTES)[:VAL_BYTES]

    monkeypatch.setenv("REASEARCH_DATA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("REASEARCH_SECRET", "a" * 64)
    monkeypatch.setattr(_generate, "generated_split", sampler)
    load_corpus.cache_clear()
    try:
        first = load_corpus(DEFAULT_CORPUS)
        train, held_out = sampler(b"")
        calls.clear()
        assert (first.train_dir / "train.bin").read_bytes() == train and first.val().tobytes() == held_out
        assert first.train_dir.parent.name == _generate.split_name(_data._PACKAGED_SHA256)
        assert first.sha256 == hashlib.sha256(train + held_out).hexdigest()
        load_corpus.cache_clear()  # as a new process would
        assert load_corpus(DEFAULT_CORPUS) == first and calls == []  # read, not sampled
        monkeypatch.setenv("REASEARCH_SECRET", "b" * 64)
        load_corpus.cache_clear()
        other = load_corpus(DEFAULT_CORPUS)
        assert len(calls) == 1 and other.train_dir != first.train_dir and other.sha256 != first.sha256
        with open(other.val_path, "r+b") as fh:
            fh.truncate(VAL_BYTES - 1)
        load_corpus.cache_clear()
        with pytest.raises(ConfigError, match="damaged"):
            load_corpus(DEFAULT_CORPUS)
    finally:
        load_corpus.cache_clear()
