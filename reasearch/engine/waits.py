"""Waits a person should see: what work waits for (a slot, a lease, the sandbox starting), who holds it, how long.

The engine never prints and never imports an upper layer: it reports each wait as a :class:`WaitNotice`
to the callbacks registered with :func:`add_wait_reporter` (the CLI registers one that prints a line on
stderr), or, with none registered, to the ``reasearch.waits`` logger. A wait is reported when it starts
and again every :data:`NOTICE_EVERY_S` seconds while it lasts (:class:`WaitTicker`, driven by the waiting
loop and a clock the caller may replace), so a long wait is never silent.

Who holds a lease: :func:`set_owner` names what this process works for (``run 3f2a...``); lock files
record it with the holder's pid (:func:`holder_record`), and :func:`describe_holder` reads it back for a
waiter. Trust boundary: none (the lock folder is private to this user; what is read from it is shown,
never run or trusted).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["NOTICE_EVERY_S", "WaitNotice", "WaitTicker", "add_wait_reporter", "describe_holder", "holder_record",
           "owner", "report_wait", "set_owner", "waiting"]

NOTICE_EVERY_S = 5.0
log = logging.getLogger("reasearch.waits")

WaitReporter = Callable[["WaitNotice"], None]
_reporters: list[WaitReporter] = []
_reporters_lock = threading.Lock()
_owner = ""


@dataclass(frozen=True, slots=True)
class WaitNotice:
    """One report of a wait that is still going on.

    Attributes:
        what: what is waited for (``"a cpu slot (cpu slot 0, cores 0,1)"``).
        holder: who holds it (``"pid 4242 (run 3f2a...), holding it for 12 s"``); empty when nobody is known.
        waited_s: seconds waited so far.
        count: 1 for the first report of this wait, then 2, 3, ...
    """

    what: str
    holder: str
    waited_s: float
    count: int

    def line(self) -> str:
        held = f", held by {self.holder}" if self.holder else ""
        return f"waiting for {self.what}{held}; waited {self.waited_s:.0f} s so far"


def add_wait_reporter(reporter: WaitReporter) -> Callable[[], None]:
    """Registers ``reporter`` for every wait of this process; returns the function that removes it."""
    with _reporters_lock:
        _reporters.append(reporter)

    def remove() -> None:
        with _reporters_lock:
            if reporter in _reporters:
                _reporters.remove(reporter)

    return remove


def report_wait(notice: WaitNotice) -> None:
    """Hands ``notice`` to the registered reporters (the ``reasearch.waits`` logger when there are none)."""
    with _reporters_lock:
        reporters = list(_reporters)
    if not reporters:
        log.warning("%s", notice.line())
    for reporter in reporters:
        reporter(notice)


def set_owner(label: str) -> None:
    """Names what this process works for (a run id), recorded with its pid in the lock files it takes."""
    global _owner
    _owner = " ".join(str(label).split())[:120]


def owner() -> str:
    return _owner


def holder_record() -> str:
    """The line a lock file holds while this process holds it: ``pid epoch owner``."""
    return f"{os.getpid()} {time.time():.3f} {_owner}".rstrip() + "\n"


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(4096)
    except OSError:
        return ""
    words = [w.decode("utf-8", "replace") for w in raw.split(b"\0") if w]
    if words and os.path.basename(words[0]).startswith("python") and len(words) > 1:
        words = words[1:]  # `python -m x` or `python script`: the interesting part is what follows
    if words:
        words[0] = os.path.basename(words[0])
    text = " ".join(words)
    return text if len(text) <= 80 else text[:77] + "..."


def describe_holder(record: str, now: float | None = None) -> str:
    """A person's view of a lock file's ``pid epoch owner`` line: pid, owner (else its command line), how long."""
    parts = record.split(None, 2)
    if not parts or not parts[0].isdigit():
        return "another process (unknown pid)"
    pid = int(parts[0])
    out = f"pid {pid}"
    label = " ".join(parts[2].split())[:120] if len(parts) > 2 else ""
    cmd = _cmdline(pid)
    extra = [x for x in (label, f"`{cmd}`" if cmd else "") if x]
    if extra:
        out += f" ({'; '.join(extra)})"
    try:
        since = float(parts[1])
    except (IndexError, ValueError):
        return out
    held = (time.time() if now is None else now) - since
    return out + (f", holding it for {held:.0f} s" if held >= 0 else "")


class WaitTicker:
    """Reports one wait: at the first :meth:`tick`, then again whenever ``every_s`` has passed on ``clock``.

    Args:
        what: what is waited for.
        holder: called at each report for who holds it now (it may change while waiting).
        every_s: seconds between reports.
        clock: monotonic seconds (tests pass a controllable one).
        after_s: the first report only once the wait has lasted this long (a wait that usually ends at
            once is not reported while it does).
    """

    def __init__(self, what: str, *, holder: Callable[[], str] = lambda: "", every_s: float = NOTICE_EVERY_S,
                 clock: Callable[[], float] = time.monotonic, after_s: float = 0.0) -> None:
        self.what, self.holder, self.every_s, self.clock = what, holder, float(every_s), clock
        self.t0 = clock()
        self.count = 0
        self._next: float | None = self.t0 + after_s if after_s > 0 else None

    def tick(self) -> None:
        now = self.clock()
        if self._next is not None and now < self._next:
            return
        self.count += 1
        self._next = now + self.every_s
        report_wait(WaitNotice(self.what, self.holder(), now - self.t0, self.count))


@contextlib.contextmanager
def waiting(what: str, *, after_s: float = 3.0, every_s: float = NOTICE_EVERY_S) -> Iterator[None]:
    """Reports ``what`` from a background thread while the block runs longer than ``after_s`` (a start-up)."""
    done = threading.Event()

    def beat() -> None:
        if done.wait(after_s):
            return
        ticker = WaitTicker(what, every_s=every_s)
        ticker.t0 -= after_s
        while not done.is_set():
            ticker.tick()
            done.wait(every_s)

    thread = threading.Thread(target=beat, name="reasearch-wait-notice", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
