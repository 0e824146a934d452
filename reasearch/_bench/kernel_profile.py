"""Where a machine's CPU goes while the sandbox serves evaluations: a whole-machine ``perf record -a
-g`` profile, each sample put in a process role and a kind of work (``scripts/perf_profile.py`` runs
it; docs/engine.md has the figures).

Roles, by the sampled thread's name (``comm``): the engine (the caller's threads, which the script
names), the jail (nsjail and the interpreter that runs in it), idle (``swapper``), and everything else
(kernel threads, other jobs). Kinds of work, by the first frame of the sample's call chain, leaf
first, that names one: the exit of a process (its address space torn down, or the rest of the
exit), a fork (the address space copied, or the rest of the process made), page faults
(copy-on-write, file-backed, a new anonymous page, or the fault's entry and the rest), the
scheduler, any other system call (by name), and user space (the leaf frame is not the kernel's).

A sample is one CPU for ``1 / frequency`` seconds: a count over the evaluations served while the
profile ran is CPU time per evaluation.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator

__all__ = ["ENGINE", "IDLE", "JAIL", "OTHER", "USER", "classify", "parse_samples", "role", "table", "tally"]

ENGINE, JAIL, IDLE, OTHER = "engine (trusted side)", "jail", "idle", "other processes"
USER = "user space"

# (frame, kind), in the order they are looked for along a chain, leaf first: the first frame of the
# chain that is in this table decides.
_KINDS: dict[str, str] = {
    "exit_mmap": "exit: address space torn down",
    "do_exit": "exit: the rest",
    "dup_mmap": "fork: address space copied",
    "copy_page_range": "fork: address space copied",
    "copy_process": "fork: the rest",
    "do_wp_page": "page fault: copy-on-write",
    "wp_page_copy": "page fault: copy-on-write",
    "filemap_map_pages": "page fault: file-backed",
    "do_read_fault": "page fault: file-backed",
    "filemap_fault": "page fault: file-backed",
    "do_anonymous_page": "page fault: new anonymous page",
    "exc_page_fault": "page fault: entry and the rest",
    "__schedule": "scheduler",
    "schedule": "scheduler",
    "try_to_wake_up": "scheduler",
}
_SYSCALL = re.compile(r"__(?:x64|ia32|arm64|do)_sys_(\w+)$")
_KERNEL_DSO = "[kernel.kallsyms]"


def parse_samples(lines: Iterable[str]) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """``(comm, [(symbol, dso), ...] leaf first)`` of each sample of ``perf script -F comm,tid,ip,sym,dso``
    output: a header line (the thread's name, then its id), one line per frame, a blank line."""
    comm: str | None = None
    frames: list[tuple[str, str]] = []
    for line in lines:
        if not line.strip():
            if comm is not None:
                yield comm, frames
            comm, frames = None, []
        elif line[0] in " \t":
            parts = line.split(None, 1)
            if len(parts) == 2:
                sym, _, dso = parts[1].rstrip().rpartition(" (")
                frames.append((sym.split("+0x")[0] or "[unknown]", dso.rstrip(")")))
        else:
            comm, frames = line.rstrip().rsplit(None, 1)[0], []
    if comm is not None:
        yield comm, frames


def classify(frames: list[tuple[str, str]]) -> str:
    """The kind of work of one sample's call chain (see the module's text)."""
    if not frames or frames[0][1] != _KERNEL_DSO:
        return USER
    for sym, _ in frames:
        kind = _KINDS.get(sym)
        if kind is not None:
            return kind
        m = _SYSCALL.match(sym)
        if m:
            return f"system call: {m.group(1)}"
    return "kernel: the rest"


def role(comm: str, engine_comm: str, jail_comms: frozenset[str]) -> str:
    """The process role of a sampled thread, by its name."""
    if comm == engine_comm:
        return ENGINE
    if comm in jail_comms:
        return JAIL
    if comm == "swapper" or comm.startswith("swapper/"):
        return IDLE
    return OTHER


def tally(samples: Iterable[tuple[str, list[tuple[str, str]]]], engine_comm: str,
          jail_comms: frozenset[str]) -> Counter[tuple[str, str]]:
    """Samples per ``(role, kind)``; idle is one kind of its own."""
    out: Counter[tuple[str, str]] = Counter()
    for comm, frames in samples:
        who = role(comm, engine_comm, jail_comms)
        out[(who, "idle" if who == IDLE else classify(frames))] += 1
    return out


def table(counts: Counter[tuple[str, str]], frequency_hz: float, evaluations: int,
          min_share: float = 0.005) -> list[tuple[str, str, float, float]]:
    """``(role, kind, share of all samples, CPU ms per evaluation)``, largest first; the kinds under
    ``min_share`` of a role are summed into one row ``(role, "the rest", ...)``. Each role also gets a
    ``(role, "total", ...)`` row, after its kinds."""
    if frequency_hz <= 0 or evaluations <= 0:
        raise ValueError("frequency_hz and evaluations must be positive")
    total = sum(counts.values())
    if total == 0:
        return []
    per_eval = 1000.0 / frequency_hz / evaluations
    rows: list[tuple[str, str, float, float]] = []
    by_role: Counter[str] = Counter()
    for (who, _), n in counts.items():
        by_role[who] += n
    largest_first = counts.most_common()
    for who, role_n in by_role.most_common():
        rest = 0
        for (r, kind), n in largest_first:
            if r != who:
                continue
            if n / total < min_share:
                rest += n
            else:
                rows.append((who, kind, n / total, n * per_eval))
        if rest:
            rows.append((who, "the rest", rest / total, rest * per_eval))
        rows.append((who, "total", role_n / total, role_n * per_eval))
    return rows
