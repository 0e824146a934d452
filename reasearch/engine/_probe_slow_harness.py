"""A trusted harness whose ``warmup()`` takes longer than a request's wall limit (engine self-check).

Shows that a harness's first import and warm-up in a worker (evaluator time: numba compiles) is
neither counted in a request's wall time nor killed by its limit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["warmup", "call", "WARMUP_S"]

WARMUP_S = 1.2


def warmup() -> None:
    """Sleeps like a slow numba compile would take."""
    time.sleep(WARMUP_S)


def call(entry: Callable[..., Any], payload: Mapping[str, Any]) -> Any:
    """Calls the candidate with ``**payload``."""
    return entry(**payload)
