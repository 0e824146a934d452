"""The status verdict as a pure function: observed facts in, a RunOutcome out (no sandbox needed)."""

from __future__ import annotations

import json
import random
import signal
from typing import Any

import numpy as np
import pytest

from reasearch.engine import _wire
from reasearch.engine._verdict import classify
from reasearch.engine.protocol import Limits, RunOutcome, Status

LIMITS = Limits(wall_s=2.0, cpu_s=3.0, memory_mb=256, result_bytes=1 << 20)


def child(kind: str, value: Any = None, **extra: Any) -> bytes:
    """A child's frame body, as the child writes it to fd 3."""
    return _wire.encode_frame({"kind": kind, **extra}, value)[_wire.FRAME_LEN.size:]


def verdict(child_body: bytes | None, *, exit_code: int | None = 0, sig: int | None = None, cpu_s: float = 0.1,
            killed: str | None = None, too_large: bool = False, early: bool = False) -> RunOutcome:
    """Builds the worker's report the way the worker does and classifies it."""
    facts = {"kind": "done", "exit_code": exit_code, "signal": sig, "cpu_s": cpu_s, "wall_s": 0.2, "killed": killed,
             "too_large": too_large, "early": early, "stdout": "out", "stderr": "err"}
    frame = _wire.encode_frame(facts, child_body)
    head, blobs = _wire.split_body(frame[_wire.FRAME_LEN.size:])
    return classify(head, blobs, LIMITS, 0.25, "nsjail")


def test_ok_result_with_a_clean_exit_or_an_early_reply() -> None:
    out = verdict(child("ok", {"a": np.arange(3)}))
    assert out.status is Status.OK
    assert np.array_equal(out.value["a"], np.arange(3))
    assert (out.wall_s, out.cpu_s, out.stdout, out.stderr, out.sandbox_mode) == (0.25, 0.1, "out", "err", "nsjail")
    early = verdict(child("ok", 7), exit_code=None, early=True)
    assert early.status is Status.OK and early.value == 7


@pytest.mark.parametrize("facts, status, fragment", [
    ({"killed": "wall"}, Status.TIMEOUT, "wall-time limit of 2 s"),
    ({"sig": signal.SIGXCPU, "exit_code": None}, Status.TIMEOUT, "CPU-time limit"),
    ({"cpu_s": 3.6}, Status.TIMEOUT, "CPU-time limit of 3 s (used 3.60 s)"),
    ({"sig": signal.SIGKILL, "exit_code": None, "cpu_s": 2.99}, Status.TIMEOUT, "CPU-time limit"),
    ({"too_large": True}, Status.CRASH, f"result larger than {1 << 20} bytes"),
    ({"exit_code": 3}, Status.CRASH, "exited with code 3 after sending its result"),
])
def test_limits_override_an_ok_frame(facts: dict[str, Any], status: Status, fragment: str) -> None:
    out = verdict(child("ok", 1), **facts)
    assert out.status is status
    assert out.value is None  # failures never carry a value (so never a score)
    assert fragment in out.error


def test_child_reported_failures() -> None:
    oom = verdict(child("oom"))
    assert oom.status is Status.OOM and "MemoryError" in oom.error
    err = verdict(child("error", error="Traceback ...\nKeyError: 'k'"), exit_code=0)
    assert err.status is Status.CRASH and err.error.endswith("KeyError: 'k'")
    odd = verdict(child("surprise"))
    assert odd.status is Status.CRASH and "unknown frame kind 'surprise'" in odd.error


def test_deaths_without_a_result() -> None:
    killed = verdict(None, exit_code=None, sig=signal.SIGKILL, cpu_s=0.1)
    assert killed.status is Status.OOM and "SIGKILL" in killed.error
    segv = verdict(None, exit_code=None, sig=signal.SIGSEGV)
    assert segv.status is Status.CRASH and "SIGSEGV" in segv.error
    odd_sig = verdict(None, exit_code=None, sig=77)
    assert odd_sig.status is Status.CRASH and "signal 77" in odd_sig.error
    quiet = verdict(None, exit_code=0)
    assert quiet.status is Status.CRASH and "exited with code 0 without a result" in quiet.error


def _lying_array_frame() -> bytes:
    blob = b"\0" * 16  # declared as 10**8 float64s
    head = json.dumps({"kind": "ok", "value": {"$nd": [0, "<f8", [10**8]]}, "blobs": [len(blob)]}).encode()
    return len(head).to_bytes(4, "big") + head + blob


@pytest.mark.parametrize("body, fragment", [
    (b"\xff" * 40, "garbage"),
    (len(b"[" * 50_000).to_bytes(4, "big") + b"[" * 50_000, "garbage"),
    (_lying_array_frame(), "array blob"),
])
def test_malformed_child_frames_are_crash(body: bytes, fragment: str) -> None:
    out = verdict(body)
    assert out.status is Status.CRASH
    assert fragment in out.error


def test_random_bytes_never_raise() -> None:
    rng = random.Random(1234)
    seeds = [child("ok", {"x": [1, 2.5, None, "s", b"b", np.ones((2, 2))]}), child("error", error="e")]
    for _ in range(2000):
        body = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 6)):  # flip, cut or extend a few bytes
            op = rng.random()
            if op < 0.6 and body:
                body[rng.randrange(len(body))] = rng.randrange(256)
            elif op < 0.8:
                del body[rng.randrange(len(body) + 1):]
            else:
                body += bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        out = verdict(bytes(body))
        assert out.status in (Status.OK, Status.CRASH)
        if out.status is Status.CRASH:
            assert out.error and out.value is None
