"""The one reader the training tasks of the suite (``tabular``, ``img``) use for files candidate code wrote.

Trust boundary: everything under an experiment's output folder was written by candidate code (a
training job, or an inference job in a scoring jail) and is hostile: a symlink to a host file, a FIFO
that blocks forever, a device, a file of many gigabytes. :func:`read_output` opens with
``O_NOFOLLOW|O_NONBLOCK`` (a symlink fails, a FIFO does not block), checks with ``fstat`` that it is a
regular file under the cap, and reads from that descriptor only. Failures are :class:`OutputError`
with a one-line reason the task turns into an ``INVALID`` result.
"""

from __future__ import annotations

import errno
import io
import os
import stat
from pathlib import Path

import numpy as np

__all__ = ["OutputError", "read_output", "read_output_npy"]


class OutputError(ValueError):
    """A candidate-written file that is missing, not a regular file, or too large."""


def read_output(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of the candidate-written regular file ``path`` (at most ``max_bytes``).

    Raises:
        OutputError: missing, a symlink, not a regular file (FIFO, device, folder), or over the cap.
    """
    name = Path(path).name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise OutputError(f"{name} is missing") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OutputError(f"{name} is a symlink (write a regular file)") from None
        raise OutputError(f"{name} cannot be opened ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(f"{name} is not a regular file")
        if st.st_size > max_bytes:
            raise OutputError(f"{name} is {st.st_size} bytes; the limit is {max_bytes}")
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:  # grew while we read
                raise OutputError(f"{name} is over {max_bytes} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


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
