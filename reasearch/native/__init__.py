"""native: compiled kernels and their plain-Python twins (:mod:`.geometry`, :mod:`.txn`, :mod:`.eplb`, ...).

The compiled modules are private (``_geometry``, ``_txn``, ``_geometry_numba``); what another package uses
of them directly is public here, imported on first use, so that importing this package loads no extension
and no numba.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["geometry_numba_kernels"]


def geometry_numba_kernels() -> ModuleType:
    """The module of numba geometry kernels (``min_triangle_area_nb``, ...), for numba code that calls a
    kernel itself (a jitted loop over many point sets); imported on first use (numba's start-up is paid
    only by its users). :mod:`.geometry` wraps the same kernels as ``*_numba`` twins."""
    return importlib.import_module("reasearch.native._geometry_numba")
