"""The status verdict: what the worker observed in, a :class:`RunOutcome` out (pure functions).

The engine decides every status here, from the worker's report (exit code, signal, CPU seconds,
whether the worker killed the child at its wall limit, whether the result was too large) and the
child's own frame, which it decodes without pickle:

* killed at the wall limit (run-queue waits not counted, up to ``Limits.outer_wall_s()``) -> ``TIMEOUT``;
* CPU time past the limit (or death by ``SIGXCPU``, or ``SIGKILL`` at the hard CPU limit) -> ``TIMEOUT``;
* an oversized result -> ``CRASH``;
* a ``MemoryError`` reported by the child -> ``OOM``;
* an ``ok`` frame and a clean exit (or an early reply, before the child exited) -> ``OK``;
* a traceback, garbage on the result pipe, a lying array -> ``CRASH`` with the reason;
* a ``SIGKILL`` nobody on our side sent -> ``OOM`` when the host's ``oom_kill`` count rose (``oom_rose``: the
  kernel's OOM killer acted), else ``CRASH`` saying it was killed from outside or out of memory;
* any other signal or exit code -> ``CRASH``.

Nothing here does I/O or raises on a child's bytes: a malformed frame is a verdict, never an exception.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Callable
from typing import Any

from reasearch.engine import _wire
from reasearch.engine._oom import KILLED_UNASKED
from reasearch.engine.protocol import Limits, RunOutcome, Status

__all__ = ["child_result", "classify", "decode_value_frame"]


def decode_value_frame(blobs: list[memoryview], head: dict[str, Any]) -> tuple[dict[str, Any], Any] | None:
    """The child's own frame, carried as the worker reply's value (bytes); None when absent."""
    holder = head.get("value")
    if holder is None:
        return None
    raw = _wire.decode_value(holder, blobs)  # the worker sends the raw frame body as one bytes blob
    if not isinstance(raw, bytes):
        raise _wire.WireError("sandbox worker reply carries a non-bytes result")
    return _wire.decode_frame(raw)


def child_result(head: dict[str, Any], blobs: list[memoryview]) -> tuple[str, Any, str]:
    """(kind, value, error) from the child's frame: kind is ok, oom, error, garbage or none."""
    try:
        got = decode_value_frame(blobs, head)
    except _wire.WireError as exc:
        return "garbage", None, f"the candidate's result pipe carried garbage ({exc})"
    except (RecursionError, ValueError, TypeError) as exc:  # defence in depth: never raise on a child's bytes
        return "garbage", None, f"the candidate's result pipe carried garbage ({type(exc).__name__}: {exc})"
    if got is None:
        return "none", None, ""
    child_head, value = got
    kind = child_head.get("kind")
    if kind == "ok":
        return "ok", value, ""
    if kind == "oom":
        return "oom", None, "MemoryError: the candidate ran out of its memory limit"
    if kind == "error":
        return "error", None, str(child_head.get("error") or "") or "the candidate failed without a traceback"
    return "garbage", None, f"the candidate's result pipe carried an unknown frame kind {kind!r}"


def classify(head: dict[str, Any], blobs: list[memoryview], limits: Limits, wall_s: float, mode: str, *,
             oom_rose: Callable[[], bool] | None = None) -> RunOutcome:
    """Decides the status of a finished child from what the worker observed (see the module doc).

    ``oom_rose`` is asked only for a SIGKILL nobody on our side sent: whether the kernel's OOM killer acted
    (the worker handle's :meth:`~reasearch.engine._handle.WorkerHandle.oom_rose`); None: no such evidence, OOM.
    """
    exit_code, sig = head.get("exit_code"), head.get("signal")
    cpu_s = float(head.get("cpu_s") or 0.0)
    common: dict[str, Any] = {"wall_s": wall_s, "cpu_s": cpu_s, "stdout": head.get("stdout", ""),
                              "stderr": head.get("stderr", ""), "exit_code": exit_code, "signal": sig,
                              "sandbox_mode": mode}
    cpu_limit = limits.effective_cpu_s()
    cpu_hard = max(1, math.ceil(cpu_limit))
    if head.get("killed") == "wall":
        waited = float(head.get("run_delay_s") or 0.0)
        extra = (f" (and {waited:.2f} s it waited for a CPU, not counted; never past {limits.outer_wall_s():g} s)"
                 if waited > 0 else "")
        return RunOutcome(Status.TIMEOUT, None, error=f"killed at the wall-time limit of {limits.wall_s:g} s{extra}",
                          **common)
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_s >= cpu_hard - 0.05) or cpu_s > cpu_limit + 0.5:
        return RunOutcome(Status.TIMEOUT, None,
                          error=f"killed at the CPU-time limit of {cpu_limit:g} s (used {cpu_s:.2f} s)", **common)
    if head.get("too_large"):
        return RunOutcome(Status.CRASH, None, error=f"result larger than {limits.result_bytes} bytes (refused)",
                          **common)
    kind, value, err = child_result(head, blobs)
    if kind == "oom":
        return RunOutcome(Status.OOM, None, error=err, **common)
    if kind == "ok" and (exit_code == 0 or (head.get("early") and exit_code is None and sig is None)):
        return RunOutcome(Status.OK, value, **common)
    if kind in ("error", "garbage"):
        return RunOutcome(Status.CRASH, None, error=err, **common)
    if sig == signal.SIGKILL:  # nobody on our side sent it: the OOM killer only if it is known to have acted
        if oom_rose is not None and not oom_rose():
            return RunOutcome(Status.CRASH, None, error=KILLED_UNASKED, **common)
        return RunOutcome(Status.OOM, None, error="killed by SIGKILL (out of memory)", **common)
    if sig is not None:
        return RunOutcome(Status.CRASH, None, error=f"killed by signal {sig} ({signal.Signals(sig).name})"
                          if sig in signal.Signals._value2member_map_ else f"killed by signal {sig}", **common)
    if kind == "ok":
        return RunOutcome(Status.CRASH, None, error=f"exited with code {exit_code} after sending its result",
                          **common)
    return RunOutcome(Status.CRASH, None, error=f"exited with code {exit_code} without a result", **common)
