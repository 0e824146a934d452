"""The one reader the training tasks of the suite (``tabular``, ``img``) use for files candidate code wrote.

Trust boundary: everything under an experiment's output folder was written by candidate code (a
training job, or an inference job in a scoring jail) and is hostile: a symlink to a host file, a FIFO
that blocks forever, a device, a file of many gigabytes. :func:`read_output` reads through the engine's
one trusted reader (:func:`reasearch.engine.files.read_untrusted`: ``O_PATH|O_NOFOLLOW``, so a symlink
fails, a FIFO or device is never opened; ``fstat`` for a regular file under the cap; read from that
descriptor only). Failures are :class:`OutputError`
with a one-line reason the task turns into an ``INVALID`` result.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from reasearch.engine.files import UntrustedFileError, read_untrusted

__all__ = ["OutputError", "read_output", "read_output_npy"]


class OutputError(ValueError):
    """A candidate-written file that is missing, not a regular file, or too large."""


def read_output(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of the candidate-written regular file ``path`` (at most ``max_bytes``), through the
    engine's one trusted reader (:func:`reasearch.engine.files.read_untrusted`: the file opened with
    ``O_PATH|O_NOFOLLOW`` below its folder, checked with ``fstat``, read from that descriptor).

    Raises:
        OutputError: missing, a symlink, not a regular file (FIFO, device, folder), or over the cap.
    """
    p = Path(path)
    try:
        return read_untrusted(p.parent, p.name, max_bytes=max_bytes)
    except UntrustedFileError as exc:
        raise OutputError(str(exc).replace(str(p), p.name)) from None


def read_output_npy(path: str | os.PathLike[str], max_bytes: int) -> np.ndarray:
    """A candidate-written ``.npy`` array, read through :func:`read_output` (never unpickled).

    Raises:
        OutputError: as :func:`read_output`, or not a pickle-free ``.npy`` file.
    """
    data = read_output(path, max_bytes)
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise OutputError(f"{Path(path).name} is not a .npy array without pickled objects ({exc})") from None
