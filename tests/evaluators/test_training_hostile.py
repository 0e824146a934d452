"""Hostile candidates of the training tasks (issue 26, items 1, 2, 3 and 6): memorizing whatever the jail
can see, smuggling held-out bytes out through the scoring jail's output, peeking at the next byte behind
inflated logits, and planning against the RL scoring seeds. Each test's docstring says what the attacker
tries. Tiny models on CPU slots; nsjail tests skip where nsjail cannot run (fail under
``REASEARCH_REQUIRE_NSJAIL=1``)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

import reasearch
from reasearch.evaluators._secret import secret_path
from reasearch.evaluators.kinds import ExperimentOptions
from reasearch.evaluators.nanogpt._data import PACKAGED_CORPUS, load_corpus
from reasearch.evaluators.nanogpt.task import (
    CAUSALITY_TOL,
    NanoGPTTask,
    bits_per_byte,
    causality_gap,
)
from reasearch.evaluators.repo import encode_repo
from reasearch.evaluators.result import EvalResult, Status
from tests.engine.conftest import needs_mode
from tests.evaluators.conftest import weights_made_on_the_host


@pytest.fixture(autouse=True)
def _cpu_slots() -> None:
    os.environ.setdefault("REASEARCH_FAKE_GPUS", "0")  # CPU slots, whatever the machine has
    os.environ.setdefault("REASEARCH_CPUS_PER_SLOT", "1")


def _nanogpt(**params: object) -> NanoGPTTask:
    return reasearch.make("nanogpt/v2", **{"time_budget_s": 120.0, "grace_s": 30.0, "eval_tokens": 1024,  # type: ignore[return-value]
                                            "eval_time_limit_s": 120.0, "sandbox_mode": "nsjail", **params})


# ----------------------------------------------------------------------------- 1. the held-out split is sealed

# A train.py that reads what the jail shows and memorizes it as an exact 16-byte-context -> next-byte table
# (sorted 32-bit hashes, first writer wins, in priority order): the interpreter's standard library (the
# old default corpus), the training split, anything whose path names the corpus, and the continuation of
# the training split's last 24 bytes wherever they occur in any readable text file of 32 KiB or more on the
# whole file system (compressed ones decompressed; data-like files first, until its time is nearly up).
# It prints what it read. Work that cannot change what it learns is cut (the suite's time, issue 27 item 5):
# a file seen twice through a bind mount is read once, a file whose first 4 KiB hold a NUL (rejected as
# binary either way) is not read further, and the first-writer-wins table is built by one sort rather than
# np.unique's stable one, itself now built through fixed scratch arrays (the same table, checked equal entry by
# entry: 11,816,395 entries from the host's standard library; 6,682,426 on corpus=shakespeare in the jail).
# STDLIB_ONLY walks the standard library instead of / (the corpus=stdlib leg: 5,717,696 entries).
MEMORIZER_TRAIN = r'''
import bz2, gzip, json, lzma, os, stat, sys, time
import numpy as np, torch
K, CAP = 16, 24 << 20
DEADLINE = float(os.environ["REASEARCH_DEADLINE"]) - 30  # time left to hash and save
CODE = (".py", ".pyi", ".h", ".hpp", ".c", ".cc", ".js", ".html", ".css", ".pm", ".pl", ".vim", ".cmake", ".xml")
out, data_dir = os.environ["REASEARCH_OUT_DIR"], os.environ["REASEARCH_DATA_DIR"]
train = open(os.path.join(data_dir, "train.bin"), "rb").read()
needle = train[-24:]
stdlib = os.path.dirname(os.__file__)
blobs, found, todo = [], [], []
stats = {"files": 0, "searched": 0, "bytes_searched": 0, "unreadable": 0, "search_complete": False}

def text(path, size):
    try:
        with open(path, "rb") as fh:
            raw = fh.read(4096)
            packed = path.endswith((".xz", ".gz", ".bz2"))
            if not packed and b"\0" in raw:
                return None  # binary: the same verdict as below, without reading the rest
            raw += fh.read(size - len(raw))
        if path.endswith(".xz"): raw = lzma.decompress(raw)
        elif path.endswith(".gz"): raw = gzip.decompress(raw)
        elif path.endswith(".bz2"): raw = bz2.decompress(raw)
    except Exception:
        stats["unreadable"] += 1
        return None
    return None if b"\0" in raw[:4096] else raw

for name in TARGETS:  # paths the attacker guesses: the packaged corpus, the private split
    raw = text(name, 64 << 20)
    if raw:
        found.append(name); blobs.append(raw)
# A folder or file the jail shows twice (a bind mount: /lib and /usr/lib) holds nothing new, so each
# (device, inode) is walked and read once; the standard library is known by its inode, whatever it is named.
seen, st = {}, os.stat(stdlib)
stdlib_id, stdlibs = (st.st_dev, st.st_ino), [stdlib]
for dp, dns, fns in os.walk(stdlib if STDLIB_ONLY else "/"):
    if dp == "/":
        dns[:] = [d for d in dns if d not in ("proc", "sys", "dev")]
    kept = []
    for d in dns:
        q = os.path.join(dp, d)
        try:
            st = os.lstat(q)
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        if key == stdlib_id:
            stdlibs.append(q)
        if key not in seen or ("shakespeare" in q.lower() and "shakespeare" not in seen[key].lower()):
            seen[key] = q; kept.append(d)
    dns[:] = kept
    for f in fns:
        p = os.path.join(dp, f)
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        stats["files"] += 1
        if (st.st_dev, st.st_ino) in seen:  # already read under another name
            continue
        seen[(st.st_dev, st.st_ino)] = p
        stdlib_py = p.startswith(tuple(s + "/" for s in stdlibs)) and p.endswith(".py") and "site-packages" not in p
        if stdlib_py or "shakespeare" in p.lower() or p.endswith("val.bin"):
            raw = text(p, 64 << 20)
            if raw and sum(map(len, blobs)) < CAP:
                blobs.append(raw)
        if 32768 <= st.st_size <= (64 << 20):  # any copy of a held-out split (even xz'd) is at least this big
            todo.append((p.endswith(CODE), st.st_size, p))  # data-like files first, small first
for _, size, p in sorted(todo):
    if time.time() > DEADLINE:
        break
    raw = text(p, size)
    if raw:
        stats["searched"] += 1; stats["bytes_searched"] += len(raw)
        at = raw.find(needle)
        if at >= 0 and not p.startswith(data_dir):
            found.append(p); blobs.insert(0, raw[at + len(needle):])  # the held-out bytes, first
else:
    stats["search_complete"] = True
blobs.append(train)
# np.unique(keys, return_index=True) (first writer wins) by one in-place sort of (key << 32 | position): keys are
# 32-bit, so the order and the first position of each key are the same. The keys are hashed 1 Mi positions at a
# time through fixed scratch arrays, straight into that one array: fresh pages, not arithmetic, are what cost.
arrays = [a for a in (np.frombuffer(b, dtype=np.uint8) for b in blobs) if len(a) > K]
packed = np.empty(sum(len(a) - K for a in arrays), dtype=np.uint64)
vals = np.empty(len(packed), dtype=np.uint8)
S = 1 << 20
lo, tmp, step = np.empty(S + 16, dtype=np.uint64), np.empty(S, dtype=np.uint64), np.arange(S, dtype=np.uint64)
at = 0
for a in arrays:
    for s0 in range(0, len(a) - K, S):
        c = min(S, len(a) - K - s0)
        w = a[s0 : s0 + c + K]
        for o in range(8):  # lo[j]: the 8 bytes from w[j], little-endian
            n = (len(w) - o) // 8
            lo[o : o + 8 * n : 8] = w[o : o + 8 * n].view("<u8")
        h = packed[at : at + c]
        np.multiply(lo[:c], np.uint64(0x9E3779B97F4A7C15), out=h)
        np.multiply(lo[8 : c + 8], np.uint64(0xC2B2AE3D27D4EB4F), out=tmp[:c])
        h ^= tmp[:c]; h >>= np.uint64(32); h <<= np.uint64(32)
        np.add(step[:c], np.uint64(at), out=tmp[:c]); h |= tmp[:c]
        vals[at : at + c] = w[K:]
        at += c
packed.sort()
first = np.ones(len(packed), dtype=bool)
for i in range(1, len(packed), S):
    j = min(i + S, len(packed))
    np.right_shift(packed[i:j], np.uint64(32), out=lo[: j - i])
    np.right_shift(packed[i - 1 : j - 1], np.uint64(32), out=tmp[: j - i])
    np.not_equal(lo[: j - i], tmp[: j - i], out=first[i:j])
packed = packed[first]
keys = (packed >> np.uint64(32)).view(np.int64)
packed &= np.uint64(0xFFFFFFFF)
vals = vals[packed.view(np.int64)]
print(json.dumps({"memorized": int(len(keys)), "found": found[:20], **stats}), flush=True)
json.dump({"block_size": 1024, "n": int(len(keys))}, open(os.path.join(out, "config.json"), "w"))
torch.save({"keys": torch.from_numpy(keys), "vals": torch.from_numpy(vals.astype(np.uint8))},
           os.path.join(out, "model.pt"))
'''

MEMORIZER_MODEL = r'''
import math, torch, torch.nn as nn
K = 16
class Lookup(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("keys", torch.zeros(n, dtype=torch.int64))
        self.register_buffer("vals", torch.zeros(n, dtype=torch.uint8))
    def forward(self, idx):
        B, T = idx.shape
        logits = torch.zeros(B, T, 256)
        if T < K:
            return logits
        win = idx.unfold(1, K, 1)  # [B, T-K+1, K]: the K bytes ending at position t (causal)
        shifts = torch.arange(8) * 8
        lo = (win[..., :8] << shifts).sum(-1)
        hi = (win[..., 8:] << shifts).sum(-1)
        h = ((lo * -7046029254386353131) ^ (hi * -4417276706812531889)) >> 32 & 0xFFFFFFFF
        pos = torch.searchsorted(self.keys, h).clamp(max=len(self.keys) - 1)
        hit = self.keys[pos] == h
        guess = torch.nn.functional.one_hot(self.vals[pos].long(), 256).float() * math.log(0.99 * 255 / 0.01)
        logits[:, K - 1 :] = torch.where(hit[..., None], guess, torch.zeros(()))
        return logits
def build_model(config):
    return Lookup(config["n"])
'''


def _memorizer(targets: list[str], *, stdlib_only: bool = False) -> str:
    """The memorizer's repository; ``stdlib_only`` walks the interpreter's standard library instead of ``/``."""
    head = f"TARGETS = {targets!r}\nSTDLIB_ONLY = {stdlib_only!r}\n"
    return encode_repo({"train.py": head + MEMORIZER_TRAIN, "model.py": MEMORIZER_MODEL})


def _read_stats(res: EvalResult) -> dict[str, object]:
    line = next(
        ln for ln in Path(str(res.metrics["log_path"])).read_text().splitlines() if ln.startswith('{"memorized"')
    )
    return json.loads(line)


@pytest.mark.parametrize("corpus", ["generated", "stdlib"])
def test_memorizing_everything_the_jail_can_read(corpus: str, tmp_path: Path) -> None:
    """Attacker: a train.py that walks the whole jail (/, without /proc, /sys, /dev), reads the interpreter's
    standard library, the training split, the packaged corpus and private split by their host paths, and
    searches every readable file (compressed ones decompressed) for the continuation of the training split;
    it memorizes all of it as an exact 16-byte-context lookup table saved as weights. On the sealed default
    corpus (a secret-seeded sample of a public generator: no file anywhere holds its held-out text) it must score
    no better than on unseen text: its table knows nothing of the held-out bytes, so its positions cost the
    uniform 8 bits (or more where a context it saw elsewhere continues differently); we require > 6 bits per
    byte. The same attack on ``corpus=stdlib`` (not sealed) must win (< 3 bits per byte):
    the test can fail. That leg walks the standard library rather than / (what it reads of the rest of the jail
    is what the sealed leg proves useless; the table it builds and its search are the same code)."""
    needs_mode("nsjail")
    task = _nanogpt(corpus=corpus, time_budget_s=240.0)
    corpus_obj = load_corpus(corpus)
    repo = _memorizer([str(PACKAGED_CORPUS), str(corpus_obj.val_path)], stdlib_only=corpus == "stdlib")
    res = task.evaluate(repo, seed=0, options=ExperimentOptions(str(tmp_path / "exp")))
    assert res.status is Status.OK, res.feedback[-2000:]
    stats = _read_stats(res)
    assert stats["files"] > 1000 and stats["searched"] > 100, stats  # it did walk the jail's file system
    if corpus == "generated":
        assert stats["found"] == [], stats
        assert res.metrics["sealed"] is True and res.metrics["heldout_public"] is False
        assert res.score is not None and res.score > 6.0, (res.score, stats)
    else:
        assert res.metrics["sealed"] is False and res.metrics["heldout_public"] is True
        assert "NOT SEALED" in res.feedback
        assert res.provenance is not None and res.provenance.versions["corpus_sealed"] == "false"
        assert res.score is not None and res.score < 3.0, (res.score, stats)


def test_the_packaged_corpus_stays_out_of_the_jails_code_copy() -> None:
    """Attacker: a candidate that imports or opens ``reasearch`` package files inside the jail, hoping the
    packaged corpus came along with the code. The code copy holds no data file, nothing of nanogpt's package
    but what is marked for the jail, and the corpus file itself is packaged (pyproject's package-data)."""
    from reasearch.engine._runtime import code_copy_files

    files = code_copy_files()
    assert files and PACKAGED_CORPUS.is_file() and PACKAGED_CORPUS not in files
    assert not [f for f in files if f.suffix in (".xz", ".gz", ".bin", ".txt") or "data" in f.parts], files
    assert "*.txt.xz" in (Path(reasearch.__file__).parents[1] / "pyproject.toml").read_text()


def test_no_jail_mount_exposes_the_corpus_or_the_private_split(tmp_path: Path) -> None:
    """Attacker: a train.py that lists every mount of its jail (``/proc/self/mountinfo``) and opens the packaged
    corpus and the private validation split by their host paths. No mount may lie above either file (so no
    walk, however long, could reach them), and both opens must fail."""
    needs_mode("nsjail")
    task = _nanogpt()
    val = task._corpus().val_path
    probe = f'''
import sys
print("MOUNTINFO-BEGIN"); sys.stdout.write(open("/proc/self/mountinfo").read()); print("MOUNTINFO-END")
for path in ({str(PACKAGED_CORPUS)!r}, {str(val)!r}):
    try:
        open(path, "rb").read(16); print("LEAK", path)
    except OSError as exc:
        print("DENIED", path, type(exc).__name__)
'''
    task.evaluate(encode_repo({"train.py": probe, "model.py": "x = 1\n"}), seed=0,
                  options=ExperimentOptions(str(tmp_path / "exp")))
    log = (tmp_path / "exp" / "train.log").read_text()
    assert "LEAK" not in log and log.count("DENIED") == 2, log[-2000:]
    mounts = log.split("MOUNTINFO-BEGIN", 1)[1].split("MOUNTINFO-END", 1)[0].strip().splitlines()
    assert len(mounts) > 5
    protected = [Path(os.path.realpath(PACKAGED_CORPUS)), Path(os.path.realpath(val))]
    for line in mounts:
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if fstype in ("tmpfs", "proc", "sysfs", "devtmpfs", "mqueue", "devpts"):
            continue  # nothing of the host's files is below these
        for seen in {fields[3], fields[4]}:  # the source's path and where it is mounted (the same for our binds)
            for secret_file in protected:
                assert not secret_file.is_relative_to(seen), f"{secret_file} is visible through mount {line}"


# ----------------------------------------------------------------------------- 2. scoring output stays on the host

LEAKING_MODEL = '''
import torch, torch.nn as nn
class Leak(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(256, 256)
    def forward(self, idx):
        held_out = bytes(idx[0].tolist())
        {action}
        return self.emb(idx)
def build_model(config):
    return Leak()
'''


def _held_out_leaks(text: str, windows: np.ndarray) -> list[str]:
    """Pieces of the held-out windows (12-byte runs as text, latin-1, repr or hex) found in ``text``."""
    hits = []
    for row in windows[:4]:
        raw = bytes(row.tolist())
        for a in range(0, len(raw) - 12, 6):
            piece = raw[a:a + 12]
            for form in (piece.decode("latin-1"), repr(piece)[2:-1], piece.hex()):
                if form in text:
                    hits.append(form)
    return hits


@pytest.mark.parametrize("mode", ["nsjail", "process"])
@pytest.mark.parametrize("action, words", [
    ("raise ValueError('HELD-OUT ' + held_out.hex() + repr(held_out))", "ValueError"),
    ("print('HELD-OUT', held_out, held_out.hex(), flush=True); import sys; sys.exit(5)", "SystemExit"),
])
def test_scoring_output_never_reaches_the_agent(action: str, words: str, mode: str, tmp_path: Path) -> None:
    """Attacker: model.py's forward (run on held-out windows during scoring) raises an exception whose message
    is the held-out bytes, or prints them and exits. Nothing of them may reach the result's feedback, its
    metrics, or what the agent's experiment tools show; the feedback names the exception class and the line
    of model.py; the full log stays on the host for a person (``scoring_log_dir``)."""
    from reasearch.agent.tools.experiment_runner import experiment_payload

    needs_mode(mode)
    task = _nanogpt(sandbox_mode=mode)
    model = LEAKING_MODEL.replace("{action}", action)
    res = task.evaluate(encode_repo(weights_made_on_the_host(model, {"block_size": 32})), seed=0,
                        options=ExperimentOptions(str(tmp_path / "exp")))
    assert res.status is Status.CRASH and res.score is None
    line = model.splitlines().index(f"        {action}") + 1
    assert f"{words}" in res.feedback and f"model.py:{line}" in res.feedback and "during model(idx)" in res.feedback
    inputs, _ = task.windows(task._corpus().val(), 32)
    payload = experiment_payload({"candidate": "c", "description": "d"}, 1, res)
    shown = json.dumps([res.to_dict(), payload])
    assert "HELD-OUT" not in shown and _held_out_leaks(shown, inputs) == []
    logs = Path(str(res.metrics["scoring_log_dir"]))
    assert logs.is_relative_to(tmp_path / "exp") and "HELD-OUT" in "".join(p.read_text() for p in logs.glob("*.log"))


def test_a_forged_failure_report_tells_nothing_but_checked_fields(tmp_path: Path) -> None:
    """Attacker: model.py writes its own error.json (the harness's report file, in a folder it can write), with
    held-out bytes as the exception type, the file and the step, then exits. The trusted side keeps only
    fields it can check (a step of the harness, a built-in exception name, a line of a repository file)."""
    task = _nanogpt(sandbox_mode="auto")
    action = (
        "import json, os; json.dump({'step': held_out.hex(), 'type': 'E' + held_out.hex(), 'subclass': "
        "held_out.hex(), 'where': ['model.py/' + held_out.hex(), 10 ** 9]}, open('error.json', 'w')); os._exit(3)"
    )
    model = LEAKING_MODEL.replace("{action}", action)
    res = task.evaluate(encode_repo(weights_made_on_the_host(model, {"block_size": 32})), seed=0)
    assert res.status is Status.CRASH
    assert "an exception raised outside your repository's files" in res.feedback and "unknown step" in res.feedback
    inputs, _ = task.windows(task._corpus().val(), 32)
    assert _held_out_leaks(json.dumps(res.to_dict()), inputs) == []


# ----------------------------------------------------------------------------- 3. causality in log-probability space


def _honest(n: int = 4, t: int = 16, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 3, size=(n, t, 256)).astype(np.float32)


@pytest.mark.parametrize("transform", [
    lambda z: z * 1000.0,  # scaled up (near one-hot)
    lambda z: z * 0.001,  # scaled down (near uniform)
    lambda z: z + 1e4,  # shifted
    lambda z: z / 0.3 + np.arange(z.shape[1], dtype=np.float32)[None, :, None] * 50,  # temperature, shift per row
])
def test_an_honest_model_passes_whatever_its_logit_scale(transform: object) -> None:
    """Not an attack: an honest model predicts the same before and after the cut, whatever scale, shift or
    temperature its logits have; a shift changes nothing at all in the compared space."""
    z = _honest()
    a = transform(z).astype(np.float32)  # type: ignore[operator]
    assert causality_gap(a, a.copy()) == 0.0
    assert causality_gap(z, z + np.float32(7.0)) <= 1e-5  # shift invariance


@pytest.mark.parametrize("inflate", [0.0, 1e3, 1e5])
def test_a_peeking_model_fails_however_it_inflates_its_logits(inflate: float) -> None:
    """Attacker: a model that adds a small bonus (3 logits) to the byte that really comes next (it peeks) and
    inflates every logit by a constant so that a tolerance relative to the largest logit would cover the
    bonus. Its predictions before the cut change between the two runs by ~the bonus, in log-probability:
    the gap is far over the fixed tolerance whatever the inflation."""
    rng = np.random.default_rng(3)
    honest = _honest()
    nxt_score, nxt_probe = rng.integers(0, 256, (2, 4, 16))
    nxt_probe = np.where(nxt_probe == nxt_score, (nxt_score + 1) % 256, nxt_probe)

    def bonus(nxt: np.ndarray) -> np.ndarray:
        return 3.0 * np.eye(256, dtype=np.float32)[nxt]

    a = (honest + inflate + bonus(nxt_score)).astype(np.float32)
    b = (honest + inflate + bonus(nxt_probe)).astype(np.float32)
    assert causality_gap(a, b) > 100 * CAUSALITY_TOL
    old_tol = 1e-3 + 1e-3 * float(np.max(np.abs(a)))  # the rule this replaces: passed it at inflate >= 1e5
    assert (float(np.max(np.abs(a - b))) <= old_tol) == (inflate >= 1e5)
    targets = nxt_score  # and what it would have won: bits per byte with and without peeking
    assert bits_per_byte(a, targets) < bits_per_byte(honest + inflate, targets)


PEEK_INFLATED = '''
import torch, torch.nn as nn, torch.nn.functional as F
class Peek(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(256, 256)
    def forward(self, idx):
        nxt = torch.roll(idx, -1, dims=1)  # the byte it must predict: looking ahead
        return self.emb(idx) * 0.01 + 1e5 + 3.0 * F.one_hot(nxt, 256).float()
def build_model(config):
    return Peek()
'''


def test_a_peeking_model_with_inflated_logits_is_invalid_end_to_end() -> None:
    """Attacker: the same peeking model, trained and scored for real: +1e5 on every logit, +3 on the next byte's.
    The trusted side must call it INVALID, with no score."""
    task = _nanogpt(sandbox_mode="auto")
    res = task.evaluate(encode_repo(weights_made_on_the_host(PEEK_INFLATED, {"block_size": 32})), seed=0)
    assert res.status is Status.INVALID and res.score is None and "causality check failed" in res.feedback


# ----------------------------------------------------------------------------- 6. RL scoring seeds are secret


def test_rl_scoring_seeds_come_from_the_secret(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Attacker: a train.py that imports the task's seed constant (``_HELD_OUT_SEED``) or its derivation and
    replays the scoring episodes open-loop. The seeds now depend on the evaluator's secret: with the public
    code and any other key, the initial states of the scoring episodes differ (so a plan made for them fails),
    and a result records the secret's fingerprint."""
    gym = pytest.importorskip("gymnasium")
    from reasearch.evaluators import rl
    from reasearch.evaluators._secret import fingerprint
    from reasearch.evaluators.rl import task as rl_task

    assert not hasattr(rl_task, "_HELD_OUT_SEED")
    monkeypatch.setenv("REASEARCH_SECRET", "k" * 32)
    real = rl_task.scoring_seeds("InvertedPendulum-v5", 3)
    guesses = [[7_919_000 + i for i in range(3)], rl_task.scoring_seeds("InvertedPendulum-v5", 3, b"a guessed key!!!")]
    env = gym.make("InvertedPendulum-v5")
    start = [env.reset(seed=s)[0] for s in real]
    for guess in guesses:
        assert all(not np.allclose(env.reset(seed=g)[0], s) for g, s in zip(guess, start, strict=False))
    env.close()
    task = rl.RLTask(env="InvertedPendulum-v5")
    prov = task.provenance("x", seed=0, sandbox_mode="nsjail")
    assert prov.versions["scoring_secret"] == fingerprint(b"k" * 32) and task.spec.id == "rl/InvertedPendulum-v5-v2"


def test_the_training_jail_cannot_reach_the_secret(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Attacker: a train.py that imports the seed derivation and the secret module, reads the secret file by its
    host path and the REASEARCH_SECRET variable, to compute the RL scoring seeds. Every way must fail."""
    needs_mode("nsjail")
    pytest.importorskip("gymnasium")
    from reasearch.evaluators._secret import secret

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("REASEARCH_SECRET", raising=False)
    key = secret()  # created here, mode 0600
    path = secret_path()
    task = reasearch.make("rl/InvertedPendulum-v5-v2", time_budget_s=30.0, grace_s=30.0, episodes=2,
                          max_episode_steps=20, eval_time_limit_s=60.0, sandbox_mode="nsjail")
    probe = f"""
import os
for what in ("from reasearch.evaluators.rl.task import scoring_seeds",
             "from reasearch.evaluators._secret import secret",
             "from reasearch.evaluators.rl import task"):
    try:
        exec(what); print("IMPORTED", what)
    except Exception as exc:
        print("NO-IMPORT", type(exc).__name__)
for p in ({str(path)!r}, os.path.expanduser("~/.local/share/reasearch/secret"), "/root/.local/share/reasearch/secret"):
    try:
        print("LEAK", open(p, "rb").read().hex())
    except OSError as exc:
        print("DENIED", type(exc).__name__)
print("ENV", os.environ.get("REASEARCH_SECRET"), os.environ.get("XDG_DATA_HOME"))
"""
    monkeypatch.setenv("REASEARCH_SECRET", key.hex())  # set in the driver: it must not reach the jail either
    res = task.evaluate(encode_repo({"train.py": probe, "policy.py": "x = 1\n"}), seed=0)
    log = res.feedback
    assert "IMPORTED" not in log and log.count("NO-IMPORT") == 3, log[-2000:]
    assert "LEAK" not in log and log.count("DENIED") == 3 and "ENV None None" in log
    assert key.hex() not in log


@pytest.mark.parametrize("mode", ["nsjail", "process"])
def test_rl_policy_output_never_reaches_the_agent(mode: str) -> None:
    """Attacker: policy.act (run on the held-out episodes' observations) raises an exception carrying them, as
    text. The feedback gives the class and policy.py's line, never the observations."""
    pytest.importorskip("gymnasium")
    needs_mode(mode)
    task = reasearch.make("rl/InvertedPendulum-v5-v2", time_budget_s=30.0, grace_s=30.0, episodes=2,
                          max_episode_steps=20, eval_time_limit_s=60.0, sandbox_mode=mode)
    save = ("import json, os, numpy as np\nout = os.environ['REASEARCH_OUT_DIR']\n"
            "json.dump({}, open(os.path.join(out, 'config.json'), 'w'))\n"
            "np.savez(os.path.join(out, 'weights.npz'), w=np.zeros(1))\n")
    policy = ("import numpy as np\nclass P:\n    def act(self, obs):\n"
              "        raise KeyError('OBS ' + repr(obs.tolist()))\n"
              "def build_policy(c, w):\n    return P()\n")
    res = task.evaluate(encode_repo({"train.py": save, "policy.py": policy}), seed=0)
    assert res.status is Status.CRASH and "KeyError" in res.feedback and "policy.py:4" in res.feedback
    assert "OBS" not in json.dumps(res.to_dict()) and not re.search(r"\d\.\d{6}", res.feedback)
