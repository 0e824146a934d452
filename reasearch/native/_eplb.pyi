"""Type stub of the Cython kernels in ``_eplb.pyx`` (see :mod:`reasearch.native.eplb`).

Arguments are C-contiguous float32 arrays of the stated shapes; the wrappers convert and validate.
"""

import numpy as np
from numpy.typing import NDArray

def argsort_desc_rows(keys: NDArray[np.float32]) -> NDArray[np.int64]: ...
def rebalance_kernel(
    weight: NDArray[np.float32], num_replicas: int, num_groups: int, num_nodes: int, num_gpus: int
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]: ...
def balanced_packing_rows(
    weight: NDArray[np.float32], num_packs: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]: ...
def replicate_rows(
    weight: NDArray[np.float32], num_slots: int
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]: ...
def log2phy_rows(
    phy2log: NDArray[np.int64], phyrank: NDArray[np.int64], logcnt: NDArray[np.int64]
) -> NDArray[np.int64]: ...
