"""ArcTask through the real sandbox pool: scores, feedback, malformed outputs, submit, secrecy, reports."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from reasearch.engine import SandboxConfig, SandboxPool
from reasearch.errors import ConfigError, UnknownTaskError
from reasearch.evaluators import Status, check_task, list_tasks, make
from reasearch.evaluators.arc_agi_2 import (
    ARC_PALETTE,
    ArcSetTask,
    ArcTask,
    load_problem,
    render_pair_png,
)

FLIP_LR = "def transform_grid_attempt_1(grid):\n    return [list(row[::-1]) for row in grid]\n"


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with SandboxPool(SandboxConfig(mode="auto", workers=2)) as p:
        yield p


@pytest.fixture(scope="module")
def arc_dir(shared_data: Path) -> str:
    return str(shared_data / "arc-agi-2")


def _task(arc_dir: str, task_id: str) -> ArcTask:
    return ArcTask(task_id, data_dir=arc_dir)


def test_check_task_passes(pool: SandboxPool, arc_dir: str) -> None:
    report = check_task(_task(arc_dir, "0934a4d8"), executor=pool)
    assert report.ok and report.seed_result is not None and report.seed_result.score == 0.0


def test_registry_ids(arc_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from reasearch.evaluators.arc_agi_2 import _data

    monkeypatch.setenv(_data.ENV_VAR, arc_dir)
    monkeypatch.setattr(_data, "_SOURCES", {})
    task = make("arc_agi_2/67a3c6ac-v1", data_dir=arc_dir)
    assert isinstance(task, ArcTask) and task.spec.params["split"] == "training"
    assert task.spec.entry_point == "transform_grid_attempt_1" and task.spec.time_limit_s == 60.0
    whole = make("arc_agi_2/eval-v1", data_dir=arc_dir)
    assert isinstance(whole, ArcSetTask) and len(whole.task_ids) == 120
    with pytest.raises(ConfigError, match="Did you mean '67a3c6ac'"):
        make("arc_agi_2/67a3c6ad-v1", data_dir=arc_dir)
    with pytest.raises(UnknownTaskError):
        make("arc_agi_2/67a3c6ac-v2")
    ids = list_tasks()  # the family expands through the default source (here: $REASEARCH_ARC_DATA)
    assert {"arc_agi_2/{task_id}-v1", "arc_agi_2/eval-v1", "arc_agi_2/0934a4d8-v1", "arc_agi_2/00576224-v1"} <= set(ids)
    assert sum(i.startswith("arc_agi_2/") for i in ids) == 1120 + 3


def test_solver_scores_one_on_train_and_test(pool: SandboxPool, arc_dir: str) -> None:
    task = _task(arc_dir, "67a3c6ac")
    res = task.evaluate(FLIP_LR, executor=pool)
    assert res.status is Status.OK and res.score == 1.0 and res.normalized_score == 1.0
    assert res.metrics["n_solved"] == 3 and res.metrics["cell_accuracy"] == 1.0
    assert "transform_grid_attempt_2 is not defined: it answers no pair" in res.feedback
    assert "attempt 2:" not in res.feedback
    assert res.provenance is not None and res.provenance.task_id == "arc_agi_2/67a3c6ac-v1"
    sub = task.submit(FLIP_LR, executor=pool)
    assert sub.status is Status.OK and sub.score == 1.0 and sub.metrics["tests"] == [{"index": 0, "solved": True}]
    assert "pairs" not in sub.metrics and "cell_accuracy" not in sub.metrics


def test_partial_candidate_scores_fraction_of_pairs(pool: SandboxPool, arc_dir: str) -> None:
    problem = load_problem("3c9b0459", data_dir=arc_dir)  # rotate by 180 degrees
    first_out = [list(r) for r in problem.train[0].output]  # type: ignore[union-attr]
    src = (
        f"FIRST = {first_out!r}\n"
        "def transform_grid_attempt_1(grid):\n    return FIRST\n"
        "def transform_grid_attempt_2(grid):\n"
        "    if grid[0][0] != 2:\n        raise ValueError('only grids starting with colour 2')\n"
        "    return [row[::-1] for row in grid[::-1]]\n"
    )
    # Independent expectation: pair 0 by attempt 1; any pair whose input starts with 2 by attempt 2.
    expected = [i == 0 or p.input[0][0] == 2 for i, p in enumerate(problem.train)]
    assert 0 < sum(expected) < len(expected)
    res = _task(arc_dir, "3c9b0459").evaluate(src, executor=pool)
    assert res.status is Status.OK
    assert res.score == sum(expected) / len(expected)
    assert [p["solved"] for p in res.metrics["pairs"]] == expected
    assert "ValueError: only grids starting with colour 2" in res.feedback
    assert "pair 0 (expected 3x3): SOLVED" in res.feedback


def test_wrong_cells_feedback_names_cells(pool: SandboxPool, arc_dir: str) -> None:
    problem = load_problem("67a3c6ac", data_dir=arc_dir)
    src = (
        "def transform_grid_attempt_1(grid):\n    out = [list(row[::-1]) for row in grid]\n"
        "    out[0][0] = 9 if out[0][0] != 9 else 8\n    return out\n"
    )
    res = _task(arc_dir, "67a3c6ac").evaluate(src, executor=pool)
    assert res.status is Status.OK and res.score == 0.0
    for i, pair in enumerate(problem.train):
        out = pair.output
        assert out is not None
        wrong = 9 if out[0][0] != 9 else 8
        n = len(out) * len(out[0])
        assert f"shape right, {n - 1}/{n} cells right" in res.feedback
        assert f"(0,0) {out[0][0]}->{wrong}" in res.feedback
        assert res.metrics["pairs"][i]["accuracy"] == (n - 1) / n
    assert res.metrics["shape_match"] == 1.0


MALFORMED = """
import numpy as np
def transform_grid_attempt_1(grid):
    n = len(grid)
    kind = SHAPES.index(n)
    if kind == 0:
        return [[1, 2], [3]]
    if kind == 1:
        return [[12]]
    return np.zeros((1000, 1000), dtype=int)
def transform_grid_attempt_2(grid):
    n = len(grid)
    kind = SHAPES.index(n)
    if kind == 0:
        return None
    if kind == 1:
        return [[1.5]]
    return np.array([row[::-1] for row in grid])
"""


def test_malformed_outputs_fail_their_pairs_with_reasons(pool: SandboxPool, arc_dir: str) -> None:
    problem = load_problem("67a3c6ac", data_dir=arc_dir)
    shapes = [len(p.input) for p in problem.train]
    assert len(set(shapes)) == 3
    res = _task(arc_dir, "67a3c6ac").evaluate(f"SHAPES = {shapes!r}\n" + MALFORMED, executor=pool)
    assert res.status is Status.OK and res.score == pytest.approx(1 / 3)  # pair 2: a NumPy answer is fine
    for reason in ("ragged rows", "value 12 at row 0, col 0 is outside 0-9", "1000x1000 array exceeds 30x30",
                   "expected a list of rows, got NoneType", "non-integer value 1.5"):
        assert reason in res.feedback


@pytest.mark.parametrize(
    ("source", "status", "needle"),
    [
        ("def transform_grid_attempt_1(g):\n    return [[1], [1, 2]]\n", Status.INVALID, "ragged rows"),
        ("def transform_grid_attempt_1(g):\n    return [[0] * 31]\n", Status.INVALID, "1x31 grid exceeds 30x30"),
        (("def transform_grid_attempt_1(g):\n    return 1 / 0\n"
          "def transform_grid_attempt_2(g):\n    raise KeyError(7)\n"), Status.CRASH, "ZeroDivisionError"),
        ("def transform_grid_attempt_2(g):\n    return g\n", Status.CRASH, "transform_grid_attempt_1"),
        ("import time\ndef transform_grid_attempt_1(g):\n    while True:\n        pass\n", Status.TIMEOUT, ""),
        ("import os\ndef transform_grid_attempt_1(g):\n    os._exit(0)\n", Status.CRASH, ""),
        ("import sys\ndef transform_grid_attempt_1(g):\n    sys.exit(0)\n", Status.CRASH, "without a result"),
    ],
)
def test_failures_are_statuses(pool: SandboxPool, arc_dir: str, source: str, status: Status, needle: str,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    import reasearch.evaluators.arc_agi_2.task as task_mod

    # keeps the endless loop short (0.5 s: issue 27 item 5); the others keep 2 s, room for a busy machine
    monkeypatch.setattr(task_mod, "TIME_LIMIT_S", 0.5 if status is Status.TIMEOUT else 2.0)
    task = _task(arc_dir, "67a3c6ac")
    res = task.evaluate(source, executor=pool)
    assert res.status is status and res.score is None
    assert needle in res.feedback


def test_submit_request_carries_test_inputs_only(arc_dir: str) -> None:
    task = _task(arc_dir, "45a5af55")
    problem = task.problem
    req = task.build_submit_request(FLIP_LR)
    # the test inputs and the seed the harness seeds the generators with, nothing else
    assert req.payload == {"inputs": [[list(r) for r in p.input] for p in problem.test], "seed": 0}
    assert task.build_submit_request(FLIP_LR, seed=9).payload["seed"] == 9
    wire = json.dumps(req.payload) + req.source + json.dumps(task.payload(None))
    for pair in problem.test:
        assert json.dumps([list(r) for r in pair.output]) not in wire  # type: ignore[union-attr]
        assert json.dumps([list(r) for r in pair.output], separators=(",", ":")) not in wire  # type: ignore[union-attr]


# The candidate below searches its own memory (and its parent's, if the kernel lets it) and, in a
# jail, the whole visible filesystem, for the serialized test output. It holds only a short prefix
# and a SHA-256 of each needle, so the needle itself never exists in its own process. A positive
# control (a string it builds at run time) proves the memory scan sees the heap.
SEARCHER = r'''
import ctypes, hashlib, json, os

NEEDLES = __NEEDLES__
HOLD = []

def _scan(buf, needles, found):
    # Find a fragment from the middle of each needle, then hash the whole window around it.
    for name, (fragment, offset, length, digest) in needles.items():
        if found.get(name):
            continue
        start, checks = offset, 0
        while checks < 100000:
            i = buf.find(fragment, start)
            if i < 0:
                break
            if hashlib.sha256(buf[i - offset:i - offset + length]).hexdigest() == digest:
                found[name] = True
                break
            start, checks = i + 1, checks + 1

class _IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

_libc = ctypes.CDLL(None, use_errno=True)

def _read(pid, fh, addr, n):
    # /proc/<pid>/mem where it opens; else process_vm_readv, which answers EFAULT (never SIGSEGV)
    # for a range unmapped meanwhile and works on the own process even when it is not dumpable.
    if fh is not None:
        try:
            fh.seek(addr)
            return fh.read(n)
        except (OSError, ValueError, OverflowError):
            return b""
    buf = ctypes.create_string_buffer(n)
    local, remote = _IOVec(ctypes.addressof(buf), n), _IOVec(addr, n)
    got = _libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    return buf.raw[:got] if got > 0 else b""

def _scan_memory(pid, needles, found):
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
    except OSError:
        return 0
    try:
        fh = open(f"/proc/{pid}/mem", "rb", 0)
    except OSError:
        fh = None
    scanned = 0
    for line in maps:
        parts = line.split()
        if "r" not in parts[1] or (len(parts) > 5 and parts[5] in ("[vvar]", "[vsyscall]", "[vvar_vclock]")):
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        pos = lo
        while pos < hi:
            n = min(hi - pos, 32 << 20)
            chunk = _read(pid, fh, pos, n + 8192 if pos + n < hi else n)
            if not chunk:
                chunk = _read(pid, fh, pos, n)
            if not chunk:
                break
            scanned += len(chunk)
            _scan(chunk, needles, found)
            pos += n
    if fh is not None:
        fh.close()
    return scanned

_DATA_SUFFIXES = (".json", ".jsonl", ".txt", ".npy", ".npz", ".csv", ".pkl", ".parquet")

def _scan_files(needles, found):
    # Every file in the writable and non-system places and in the mirrored package code; data files
    # (by suffix, or by the task's id in the name) everywhere else.
    full = tuple(p for p in ("/tmp", "/var", "/etc", "/home", "/root", "/work", "/srv", "/opt", "/mnt", os.getcwd())
                 if os.path.isdir(p))
    files = 0
    for root, dirs, names in os.walk("/"):
        if root == "/":
            dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
        everything = root.startswith(full) and "site-packages" not in root and "/lib/python3" not in root
        for name in names:
            if not (everything or name.endswith(_DATA_SUFFIXES) or "45a5af55" in name or "arcagi2" in name):
                continue
            path = os.path.join(root, name)
            try:
                if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > (64 << 20):
                    continue
                with open(path, "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            files += 1
            _scan(data, needles, found)
    return files

def transform_grid_attempt_1(grid):
    control = ("CONTROL-" + json.dumps(grid) * 3).encode()
    HOLD.append(control)
    needles = dict(NEEDLES)
    needles["control"] = (control[40:88], 40, len(control), hashlib.sha256(control).hexdigest())
    found = {}
    mem_self = _scan_memory(os.getpid(), needles, found)
    mem_parent = _scan_memory(os.getppid(), needles, found)
    files = _scan_files(needles, found) if SCAN_FILES else 0
    flags = [int(bool(found.get(k))) for k in sorted(NEEDLES)]
    return [flags + [int(found.get("control", False)), int(mem_self > 0), int(mem_parent > 0),
                     int(os.path.exists(DATA_DIR)), min(9, len(str(files)))]]
'''


def _needles(grid: tuple[tuple[int, ...], ...]) -> dict[str, tuple[bytes, int, int, str]]:
    """(fragment, its offset, length, SHA-256) of each serialized form of ``grid``."""
    rows = [list(r) for r in grid]
    forms = {
        "json": json.dumps(rows).encode(),
        "json_compact": json.dumps(rows, separators=(",", ":")).encode(),
        "text_rows": "\n".join("".join(map(str, r)) for r in rows).encode(),
        "uint8": np.array(rows, dtype=np.uint8).tobytes(),
        "int64": np.array(rows, dtype=np.int64).tobytes(),
    }
    # A fragment from the middle is distinctive (grids often start with a flat border of one colour).
    return {
        name: (blob[len(blob) // 2 : len(blob) // 2 + 48], len(blob) // 2, len(blob), hashlib.sha256(blob).hexdigest())
        for name, blob in forms.items()
    }


def test_test_outputs_never_reach_the_sandbox(pool: SandboxPool, arc_dir: str) -> None:
    task = _task(arc_dir, "45a5af55")  # its test output is 26x26, unlike any input of the task
    out = task.problem.test[0].output
    assert out is not None and (len(out), len(out[0])) == (26, 26)
    needles = _needles(out)
    jailed = pool.mode == "nsjail"
    source = (SEARCHER.replace("__NEEDLES__", repr(needles))
              + f"\nSCAN_FILES = {jailed!r}\nDATA_DIR = {arc_dir!r}\n")
    task.evaluate(FLIP_LR, executor=pool)  # the workers have served this task before the search
    res = task.submit(source, executor=pool)
    assert res.status is Status.OK, res.feedback
    (flags,) = res.solution["attempts"][0][0]  # type: ignore[index]
    names = sorted(needles)
    found = dict(zip(names, flags[: len(names)], strict=False))
    control, mem_self, _mem_parent, data_visible, files_digits = flags[len(names):]
    assert mem_self == 1 and control == 1, "the memory scan must work (positive control)"
    assert found == {n: 0 for n in names}, f"a test output was found inside the sandbox: {found}"
    if jailed:
        # nsjail mode: the data folder is not mounted, and no readable file holds the output.
        assert data_visible == 0 and files_digits >= 2
    else:
        # process mode has no filesystem isolation: only the weaker promise holds (not in the
        # request, not in the worker's memory); the data folder is visible to the candidate.
        assert data_visible == 1


def test_render_table_and_png(pool: SandboxPool, arc_dir: str, tmp_path: Path) -> None:
    from matplotlib.image import imread
    from rich.console import Console

    task = _task(arc_dir, "67a3c6ac")
    res = task.evaluate(FLIP_LR, executor=pool)
    table = task.render_table(res)
    assert table.row_count == 3
    console = Console(record=True, width=140)
    console.print(table)
    text = console.export_text()
    assert "arc_agi_2/67a3c6ac-v1: OK, score 1.0000" in text and text.count("correct") == 3
    path = task.render_png(res, tmp_path / "pairs.png")
    img = imread(path)
    assert img.shape[0] > 200 and img.shape[1] > 400
    colours = {
        tuple((img[..., :3].reshape(-1, 3)[i] * 255).round().astype(int))
        for i in range(0, img.shape[0] * img.shape[1], 7)
    }
    used = {v for p in task.problem.train for row in p.input for v in row}
    for v in used:  # every colour of the inputs is drawn in the palette's exact RGB
        rgb = tuple(int(ARC_PALETTE[v][k:k + 2], 16) for k in (1, 3, 5))
        assert rgb in colours, (v, rgb)
    single = render_pair_png([[1, 2]], [[2, 1]], None, tmp_path / "one.png", title="t")
    assert single.exists() and imread(single).shape[1] > imread(single).shape[0]
    with pytest.raises(ConfigError, match="OK train result"):
        task.render_png(task.submit(FLIP_LR, executor=pool), tmp_path / "x.png")
