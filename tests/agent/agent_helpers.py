"""Plain helpers of the agent tests (imported by name: the tests folder has no packages)."""

from __future__ import annotations

from typing import Any


def toy_source(values: list[float]) -> str:
    """A ToyTask candidate returning ``values``."""
    return f"def run():\n    return {[float(v) for v in values]!r}\n"


def kinds_by_step(run: Any) -> dict[int, list[str]]:
    """Event kinds of a run, grouped by step, in the order logged."""
    out: dict[int, list[str]] = {}
    for e in run.events():
        out.setdefault(int(e.step), []).append(e.kind)
    return out


def children() -> dict[int, str]:
    """pid -> state of every direct child of this process."""
    import os

    from reasearch.engine._procs import process_table

    me = os.getpid()
    return {pid: row[3] for pid, row in process_table().items() if row[0] == me}


def reap_orphans(known: set[int], timeout_s: float = 15.0) -> None:
    """Reaps the processes a killed driver left behind: the engine makes this process a child
    subreaper, so the driver's orphans (sandbox workers, jails) are re-parented here."""
    import os
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        strays = {pid: st for pid, st in children().items() if pid not in known}
        if not strays:
            return
        for pid, state in strays.items():
            if state == "Z":
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
        time.sleep(0.05)
    raise AssertionError(f"the killed driver left processes running: {children()}")
