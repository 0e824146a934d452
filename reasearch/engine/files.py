"""Trusted reads of files that candidate code could have written (checkpoints, logits, configs, logs).

Trust boundary: the *folder* given to these functions is the trusted side's own (it made it or chose
it); everything *below* it may have been written by candidate code, which may have put a FIFO there
(an ``open()`` would block the driver forever), a device node, a symlink to a host file or folder, a
sparse file of terabytes, or a ``.npy`` whose header lies or asks for pickled objects.

So every read goes one way: each path component below the folder is opened relative to the previous
one's descriptor with ``O_NOFOLLOW`` (folders with ``O_DIRECTORY``): a symlink anywhere is refused,
never followed. The last component is opened with ``O_PATH`` (which opens nothing: no FIFO blocks, no
device driver runs), ``fstat`` must show a regular file no larger than the cap, and only then is it
reopened for reading through that very descriptor (``/proc/self/fd``), so what is read is the inode
that was checked. Reads stop at the cap even if the file grows meanwhile. Every refusal is an
:class:`UntrustedFileError` with a one-line reason, which callers turn into an ``INVALID`` or ``CRASH``
result.

:func:`read_npy` parses the ``.npy`` header itself (NumPy's literal parser, never pickle), refuses
object dtypes, checks dtype, shape and that the file holds exactly the array's bytes, then reads them
into a fresh array.
"""

from __future__ import annotations

import ctypes
import errno
import math
import os
import stat
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from reasearch.ast_lock import literal_eval as literal_eval_locked
from reasearch.engine._runtime import check_ancestors, runtime_root
from reasearch.errors import ConfigError, ReasearchError, SandboxUnavailableError

__all__ = ["UntrustedFileError", "folder_usage", "mount_bounded", "private_folder", "read_npy", "read_tail",
           "read_untrusted", "unmount"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_NPY_MAGIC = b"\x93NUMPY"
_NPY_MAX_HEADER = 64 * 1024


class UntrustedFileError(ReasearchError):
    """A candidate-writable file could not be read safely: missing, a symlink, not a regular file,
    too large, or (for ``.npy``) malformed. The message is one line and names the file."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return name
    return "not a regular file"


def _components(rel: str | os.PathLike[str]) -> list[str]:
    parts = [p for p in Path(rel).parts if p not in ("", ".")]
    if not parts or Path(rel).is_absolute() or ".." in parts:
        raise UntrustedFileError(f"{os.fspath(rel)!r} is not a relative path below the folder (no '..', not absolute)")
    return parts


def _open_checked(folder: str | os.PathLike[str], rel: str | os.PathLike[str], max_bytes: int) -> tuple[int, int]:
    """(a read descriptor, the size) of the regular file ``folder/rel``; no symlink followed below ``folder``."""
    parts = _components(rel)
    shown = os.path.join(os.fspath(folder), *parts)
    try:
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise UntrustedFileError(f"{shown}: its folder cannot be opened ({exc.strerror})") from None
    try:
        for name in parts[:-1]:
            try:
                nxt = os.open(name, _DIR_FLAGS, dir_fd=dfd)
            except OSError as exc:
                why = ("a symlink or not a folder" if exc.errno in (errno.ELOOP, errno.ENOTDIR) else exc.strerror)
                raise UntrustedFileError(f"{shown}: the path component {name!r} is {why}; refused") from None
            os.close(dfd)
            dfd = nxt
        try:
            pfd = os.open(parts[-1], _PATH_FLAGS, dir_fd=dfd)
        except FileNotFoundError:
            raise UntrustedFileError(f"{shown} is missing") from None
        except OSError as exc:
            raise UntrustedFileError(f"{shown} cannot be opened ({exc.strerror}); refused") from None
    finally:
        os.close(dfd)
    try:
        st = os.fstat(pfd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedFileError(f"{shown} is {_kind(st.st_mode)}, not a regular file; refused")
        if st.st_size > max_bytes:
            raise UntrustedFileError(f"{shown} holds {st.st_size} bytes, over the {max_bytes} byte cap; refused")
        try:
            fd = os.open(f"/proc/self/fd/{pfd}", _READ_FLAGS)
        except OSError as exc:
            raise UntrustedFileError(f"{shown} cannot be read ({exc.strerror})") from None
    finally:
        os.close(pfd)
    st2 = os.fstat(fd)
    if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(st2.st_mode):  # defensive
        os.close(fd)
        raise UntrustedFileError(f"{shown} changed while it was opened; refused")
    return fd, st2.st_size


def _read_exact(fd: int, n: int, offset: int = 0) -> bytes:
    """Up to ``n`` bytes from ``offset`` (fewer only at end of file)."""
    chunks: list[bytes] = []
    got = 0
    while got < n:
        chunk = os.pread(fd, min(n - got, 1 << 24), offset + got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_untrusted(folder: str | os.PathLike[str], rel: str | os.PathLike[str], *, max_bytes: int,
                   expect_bytes: int | None = None) -> bytes:
    """The bytes of the regular file ``folder/rel`` (at most ``max_bytes``; exactly ``expect_bytes`` if given).

    Raises:
        UntrustedFileError: missing, a symlink in any component below ``folder``, not a regular file,
            over the cap, of another size than expected, or it grew past the cap while read.
    """
    fd, size = _open_checked(folder, rel, max_bytes)
    try:
        data = _read_exact(fd, max_bytes + 1)
    finally:
        os.close(fd)
    shown = os.path.join(os.fspath(folder), os.fspath(rel))
    if len(data) > max_bytes:
        raise UntrustedFileError(f"{shown} grew past the {max_bytes} byte cap while read; refused")
    if expect_bytes is not None and len(data) != expect_bytes:
        raise UntrustedFileError(f"{shown} holds {len(data)} bytes, expected {expect_bytes}")
    return data


def read_tail(folder: str | os.PathLike[str], rel: str | os.PathLike[str], n: int) -> bytes:
    """The last ``n`` bytes of the regular file ``folder/rel`` (a log), whatever its size; ``b""`` when
    it cannot be read safely (missing, a symlink, a FIFO, a device: a log tail is never worth a hang)."""
    try:
        fd, size = _open_checked(folder, rel, max_bytes=1 << 62)
    except UntrustedFileError:
        return b""
    try:
        return _read_exact(fd, n, max(0, size - n))
    finally:
        os.close(fd)


def _parse_npy_header(head: bytes, shown: str) -> tuple[np.dtype, tuple[int, ...], bool, int]:
    """(dtype, shape, fortran_order, data offset) from the start of a ``.npy`` file; no pickle, no eval."""
    if len(head) < 10 or not head.startswith(_NPY_MAGIC):
        raise UntrustedFileError(f"{shown} is not a .npy file (bad magic)")
    major = head[6]
    if major == 1:
        hlen, start = int.from_bytes(head[8:10], "little"), 10
    elif major in (2, 3):
        if len(head) < 12:
            raise UntrustedFileError(f"{shown}: truncated .npy header")
        hlen, start = int.from_bytes(head[8:12], "little"), 12
    else:
        raise UntrustedFileError(f"{shown}: unknown .npy format version {major}")
    if hlen > _NPY_MAX_HEADER or start + hlen > len(head):
        raise UntrustedFileError(f"{shown}: truncated or oversized .npy header ({hlen} bytes)")
    text = head[start:start + hlen].decode("latin1" if major < 3 else "utf-8", errors="replace")
    try:
        meta = literal_eval_locked(text)  # literals only: never evaluates code, never unpickles
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise UntrustedFileError(f"{shown}: the .npy header is not a literal dict") from None
    if not isinstance(meta, dict) or set(meta) != {"descr", "fortran_order", "shape"}:
        raise UntrustedFileError(f"{shown}: the .npy header must hold exactly descr, fortran_order and shape")
    shape, fortran = meta["shape"], meta["fortran_order"]
    if not isinstance(shape, tuple) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                               for d in shape) or not isinstance(fortran, bool):
        raise UntrustedFileError(f"{shown}: bad shape or fortran_order in the .npy header")
    try:
        dtype = np.lib.format.descr_to_dtype(meta["descr"])
    except (TypeError, ValueError):
        raise UntrustedFileError(f"{shown}: unknown dtype {meta['descr']!r} in the .npy header") from None
    if dtype.hasobject:
        raise UntrustedFileError(f"{shown} holds Python objects (dtype {dtype}); only plain numeric arrays are read")
    return dtype, shape, fortran, start + hlen


def read_npy(folder: str | os.PathLike[str], rel: str | os.PathLike[str], *, dtype: np.dtype | type | str,
             shape: Sequence[int], max_bytes: int | None = None) -> np.ndarray:
    """The array in ``folder/rel`` (a ``.npy`` file), which must have exactly ``dtype`` and ``shape``.

    Args:
        folder: a trusted folder; ``rel`` below it is opened without following any symlink.
        rel: the file, relative to ``folder``.
        dtype: the one dtype accepted (byte order included: ``float32`` means little-endian here).
        shape: the one shape accepted.
        max_bytes: file size cap (default: the array's bytes plus a 64 KiB header).

    Raises:
        UntrustedFileError: anything :func:`read_untrusted` refuses, a malformed or lying header, an
            object dtype, another dtype or shape, or a file shorter or longer than its array.
    """
    want_dtype, want_shape = np.dtype(dtype), tuple(int(d) for d in shape)
    nbytes = math.prod(want_shape) * want_dtype.itemsize
    cap = nbytes + _NPY_MAX_HEADER + 16 if max_bytes is None else int(max_bytes)
    shown = os.path.join(os.fspath(folder), os.fspath(rel))
    fd, size = _open_checked(folder, rel, cap)
    try:
        head = _read_exact(fd, min(size, _NPY_MAX_HEADER + 16))
        got_dtype, got_shape, fortran, offset = _parse_npy_header(head, shown)
        if got_dtype != want_dtype or got_shape != want_shape:
            raise UntrustedFileError(f"{shown} holds {got_dtype} {got_shape}, expected {want_dtype} {want_shape}")
        if size != offset + nbytes:
            raise UntrustedFileError(f"{shown} holds {size - offset} data bytes, expected {nbytes} "
                                     f"({'truncated' if size < offset + nbytes else 'trailing bytes'})")
        out = np.empty(want_shape[::-1] if fortran else want_shape, dtype=want_dtype)
        view = out.reshape(-1).view(np.uint8).data if nbytes else memoryview(b"")
        got = 0
        while got < nbytes:
            n = os.preadv(fd, [view[got:got + (1 << 24)]], offset + got)
            if n <= 0:
                raise UntrustedFileError(f"{shown} was truncated while read")
            got += n
        if os.pread(fd, 1, offset + nbytes):
            raise UntrustedFileError(f"{shown} grew while read; refused")
    finally:
        os.close(fd)
    return np.ascontiguousarray(out.T) if fortran else out


# ------------------------------------------------------------------------------ private folders


def private_folder(name: str, *, override: str | None = None, mode: int = 0o711) -> Path:
    """A folder of ours that nobody else can write: ``runtime_root()/name`` (``/var/tmp/reasearch.u<euid>/
    name`` by default), or ``override`` (an explicit setting such as ``REASEARCH_EXPERIMENTS_DIR``).

    A predictable name in a world-writable folder is where another local user plants a symlink or a
    folder of theirs for us to write into (or for root to chmod). So the folder is created if missing,
    then opened with ``O_NOFOLLOW | O_DIRECTORY``: a symlink is refused, never followed; it must be
    owned by this euid and not writable by group/others (``fstat`` of that descriptor), and its mode is
    set with ``fchmod`` on that same descriptor. For ``override`` every folder above it must be owned
    by root or us and writable by others only when sticky (as for the runtime root).

    Raises:
        SandboxUnavailableError: the folder (or one above it) is not safe; the message says what to remove.
        ConfigError: ``override`` is not an absolute path.
    """
    if override:
        path = Path(override)
        if not path.is_absolute():
            raise ConfigError(f"{override!r} must be an absolute path")
        path.parent.mkdir(parents=True, exist_ok=True)
        parent = path.parent.resolve()
        check_ancestors(parent)
        path = parent / path.name
    else:
        if "/" in name or name in ("", ".", ".."):
            raise ConfigError(f"{name!r} is not a plain folder name")
        path = runtime_root() / name
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError as exc:
        why = "a symlink or not a folder" if exc.errno in (errno.ELOOP, errno.ENOTDIR) else exc.strerror
        raise SandboxUnavailableError(f"refusing {path}: it is {why}; remove it so it can be recreated") from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise SandboxUnavailableError(f"refusing {path}: it belongs to uid {st.st_uid}, not to this process "
                                          f"(uid {os.geteuid()}); remove it so it can be recreated")
        if stat.S_IMODE(st.st_mode) != mode:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return path


# ------------------------------------------------------------------------------ bounded folders

_libc = ctypes.CDLL(None, use_errno=True)
_MS_NOSUID, _MS_NODEV = 2, 4
_MNT_DETACH = 2


def mount_bounded(path: str | os.PathLike[str], *, max_bytes: int, max_inodes: int, mode: int = 0o711) -> bool:
    """Mounts a tmpfs of at most ``max_bytes`` and ``max_inodes`` on the (empty) folder ``path``, with no
    device nodes and no set-uid files; False where this process may not mount (not root).

    Whatever a job writes below it then fails with ``ENOSPC`` at the cap (``fallocate`` included) and
    never touches the host's disk. Pages live in memory: the cap is what a job may hold there.
    """
    if os.geteuid() != 0:
        return False
    opts = f"size={int(max_bytes)},nr_inodes={int(max_inodes)},mode={mode:o}".encode()
    if _libc.mount(b"reasearch-exp", os.fsencode(path), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts) != 0:
        err = ctypes.get_errno()
        if err in (errno.EPERM, errno.EACCES):
            return False
        raise OSError(err, f"mount tmpfs on {path}: {os.strerror(err)}")
    return True


def unmount(path: str | os.PathLike[str]) -> bool:
    """Detaches the mount on ``path`` (its pages are freed once nothing holds them); False if none was there."""
    if not os.path.ismount(path) or os.path.islink(path):
        return False
    return _libc.umount2(os.fsencode(path), _MNT_DETACH) == 0


def folder_usage(path: str | os.PathLike[str], max_entries: int = 200_000) -> tuple[int, int]:
    """(bytes allocated, entries) below ``path``, without following links; stops counting at ``max_entries``."""
    total = entries = 0
    stack = [os.fspath(path)]
    while stack and entries < max_entries:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for entry in it:
                entries += 1
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += st.st_blocks * 512
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
    return total, entries
