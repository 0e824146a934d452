"""The C allocator's settings for programs that allocate and free megabytes of arrays on every call.

With glibc's default settings, an array above the ``mmap`` threshold (128 KiB to start with) gets
fresh pages, and the heap is handed back to the kernel whenever more than twice that threshold lies
free at its top. A NumPy program that builds a few MB of temporaries per call (EPLB's seed program
allocates ~2.5 MB per rebalance) therefore pays a page fault for every 4 KiB it touches, on every
call: ~500 faults, about a millisecond in a virtual machine, more than the algorithm's own work.
:func:`keep_freed_memory` raises both thresholds, so freed memory stays in the process and the next
call reuses it (the resident size grows by at most the trim threshold).

The EPLB harness applies it in each sandboxed session before the first timed call, and the EPLB
benchmarks apply it before timing (so they measure the seed program as the sandbox runs it).
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "keep_freed_memory"]

_M_TRIM_THRESHOLD = -1  # <malloc.h>
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest accepted value on 64-bit
TRIM_THRESHOLD = 64 << 20


def keep_freed_memory() -> bool:
    """Sets glibc's ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD`` for this process (and its forks).

    Returns:
        True if both were set; False where they do not apply (not Linux, no ``mallopt``, or refused).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # a C library without mallopt (musl)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
