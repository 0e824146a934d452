"""The warm worker's entry point: ``python -m reasearch.engine._worker CONFIG_JSON``.

It runs inside its jail (or as a plain process in process mode), preloads NumPy/SciPy/numba and the
task harness modules it is asked for, and serves the engine one request at a time, forking one child
per evaluation. The pieces, one idea each:

* :mod:`reasearch.engine._privilege`: prctl, capabilities, the child's uid drop, a private IPC namespace;
* :mod:`reasearch.engine._child`: the forked child, the only process that runs candidate code;
* :mod:`reasearch.engine._pump`: the typed child record and the I/O pump of its pipes;
* :mod:`reasearch.engine._supervisor`: the request loop (limits, kills, clean-up, reports);
* ``reasearch.engine._zygote`` (C): the zygote that forks each child as the worker's own;
* :mod:`reasearch.engine._procs`, :mod:`reasearch.engine._cleanup`, :mod:`reasearch.engine._wire`:
  /proc, scratch removal and the frame format, shared with the engine side.

Trust boundary: the worker is engine code (not candidate code, even though it runs inside the jail);
it imports only engine modules and the harnesses it serves. Protocol with the engine: frames from
:mod:`reasearch.engine._wire` on fds 0 (requests) and 1 (replies); the worker moves them to private
fds at start and points 0/1 elsewhere so that stray prints from preloaded libraries can never corrupt
the channel.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import time
import traceback

from reasearch.engine._privilege import (
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    PR_SET_PDEATHSIG,
    prctl,
    private_ipc,
)
from reasearch.engine._supervisor import Supervisor

__all__ = ["main"]


def main() -> None:
    """Entry point: ``python -m reasearch.engine._worker CONFIG_JSON``."""
    cfg = json.loads(sys.argv[1])
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)  # stray prints go to the worker's log, never into the protocol
    os.close(null)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    prctl(PR_SET_DUMPABLE, 0)  # no /proc/<worker>/mem access for same-uid children
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the engine died: so does the worker
    ipc = private_ipc() if cfg.get("private_ipc") else False
    os.makedirs(cfg["scratch_root"], mode=0o711, exist_ok=True)
    errors = {}
    t0 = time.monotonic()
    for name in cfg["preload"]:
        try:
            importlib.import_module(name)
        except BaseException:
            errors[name] = traceback.format_exc()
    worker = Supervisor(rfd, wfd, cfg["scratch_root"], cfg.get("child_uid"), bool(cfg.get("keep_read_search")),
                        bool(cfg.get("report_child")), int(cfg.get("min_free_bytes") or 0),
                        zygote=bool(cfg.get("zygote", True)))
    worker.refill()
    worker.send({"kind": "ready", "pid": os.getpid(), "uid": os.getuid(), "preload_s": time.monotonic() - t0,
                 "errors": errors, "python": sys.version.split()[0], "executable": sys.executable,
                 "private_ipc": ipc})
    worker.loop()


if __name__ == "__main__":
    main()
