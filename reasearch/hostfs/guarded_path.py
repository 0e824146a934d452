"""File operations confined to one directory, that never follow a symlink: the one guarded reader.

Every host-side read of a folder that untrusted code can write -- the agent's workspace (its tools, the
harness's snapshot, host-side git's pre-flight), a repository candidate read for encoding
(:mod:`reasearch.evaluators.repo`), an experiment's log and status files -- goes through :class:`Root`. It
lives in :mod:`reasearch.hostfs` (below both the evaluators and the agent) so that the repository reader and
the agent's tools use the same code. The workspace is writable by the jailed ``bash`` tool, which can plant
symlinks, FIFOs and deep trees anywhere in it at any time, while the harness that reads and writes it runs
as root. Every operation here therefore works relative to an open descriptor of the root and refuses
symlinks in *every* component: ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)``
where the kernel has it (Linux 5.6+), else a walk that opens one component at a time with ``O_NOFOLLOW``
relative to its parent's descriptor. Files are written to a fresh temporary name created with ``O_CREAT |
O_EXCL | O_NOFOLLOW`` in the parent directory and renamed over the target (``renameat`` replaces a planted
symlink, it never writes through it). Reads open with ``O_NONBLOCK`` (a FIFO cannot block the harness),
check the type and size with ``fstat`` and read at most a cap. Walks are iterative (a 100 000-deep tree
cannot exhaust the stack).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from reasearch.errors import ReasearchError

__all__ = ["Entry", "Root", "UnsafePathError", "Usage"]

# openat2(2): the same number on every architecture that has it (new syscalls share one table).
_OPENAT2_NR = {"x86_64": 437, "aarch64": 437, "arm64": 437, "riscv64": 437, "ppc64le": 437, "s390x": 437}
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_RESOLVE = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePathError(ReasearchError):
    """A workspace path is malformed, leaves the root, crosses a symlink, or names the wrong kind of file."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _load_openat2() -> object | None:
    nr = _OPENAT2_NR.get(platform.machine())
    if nr is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
    except (OSError, AttributeError):
        return None
    syscall.restype = ctypes.c_long
    syscall.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(_OpenHow), ctypes.c_size_t]

    def openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
        how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, _RESOLVE)
        fd = syscall(nr, dir_fd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
        return int(fd)

    try:  # probe: ENOSYS on kernels before 5.6, EPERM under some seccomp filters
        os.close(openat2(os.open("/", _DIR_FLAGS), ".", os.O_RDONLY | os.O_DIRECTORY, 0))
    except OSError:
        return None
    return openat2


_openat2 = _load_openat2()


def split(rel: str) -> tuple[str, ...]:
    """The components of a relative path; raises UnsafePathError for absolute, '..', NUL or empty."""
    if not isinstance(rel, str) or "\x00" in rel:
        raise UnsafePathError(f"{rel!r} is not a valid path")
    if rel.startswith("/"):
        raise UnsafePathError(f"{rel!r} is absolute; paths are relative to the workspace")
    parts = tuple(p for p in rel.split("/") if p not in ("", "."))
    if ".." in parts:
        raise UnsafePathError(f"{rel!r} contains '..'; stay inside the workspace")
    return parts


def _refusal(exc: OSError, rel: str, root_fd: int | None = None) -> UnsafePathError:
    if exc.errno in (errno.ENOTDIR, errno.ELOOP) and root_fd is not None:
        link = _first_link(root_fd, rel)
        if link:
            return UnsafePathError(f"{rel!r}: {link!r} is a symlink (symlinks in the workspace are never followed)")
    if exc.errno in (errno.ELOOP, errno.EXDEV, errno.EMLINK):
        return UnsafePathError(f"{rel!r} crosses a symlink (symlinks in the workspace are never followed)")
    if exc.errno == errno.ENOTDIR:
        return UnsafePathError(f"a component of {rel!r} is not a directory")
    return UnsafePathError(f"{rel!r}: {exc.strerror or exc}")


def _first_link(root_fd: int, rel: str) -> str | None:
    """The first component of ``rel`` that is a symlink (for the error message), else None."""
    fd = os.dup(root_fd)
    try:
        parts = split(rel)
        for i, name in enumerate(parts):
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                return "/".join(parts[:i + 1])
            if i == len(parts) - 1 or not stat.S_ISDIR(st.st_mode):
                return None
            nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except (OSError, UnsafePathError):
        return None
    finally:
        os.close(fd)
    return None


@dataclass(frozen=True, slots=True)
class Entry:
    """One item met by :meth:`Root.walk` (``rel`` relative to the root; ``st`` from ``lstat``)."""

    rel: str
    st: os.stat_result

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.st.st_mode)


@dataclass(frozen=True, slots=True)
class Usage:
    """Space a tree takes: bytes (the larger of size and allocated blocks) and inodes (distinct)."""

    bytes: int
    inodes: int


def _cost(st: os.stat_result) -> int:
    return max(st.st_size, st.st_blocks * 512)


class Root:
    """An open directory that every operation stays beneath, never following a symlink.

    Args:
        path: the directory (resolved once, here; it must not itself be replaceable by the agent).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.path.realpath(path)
        self.fd = os.open(self.path, _DIR_FLAGS)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------ opening
    def _open(self, parts: tuple[str, ...], flags: int, mode: int = 0o644) -> int:
        """Opens ``parts`` beneath the root with no symlink anywhere (raises OSError)."""
        if not parts:
            return os.open(".", flags | os.O_CLOEXEC, dir_fd=self.fd) if flags & os.O_DIRECTORY else os.dup(self.fd)
        if _openat2 is not None and sum(map(len, parts)) + len(parts) < 4000:  # PATH_MAX: long ones walk
            return _openat2(self.fd, "/".join(parts), flags | os.O_NOFOLLOW, mode)  # type: ignore[operator]
        fd = os.dup(self.fd)
        try:
            for name in parts[:-1]:
                nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nxt
            return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
        finally:
            os.close(fd)

    def open_dir(self, rel: str, *, create: bool = False) -> int:
        """A descriptor of directory ``rel`` (created component by component when ``create``)."""
        parts = split(rel)
        try:
            return self._open(parts, _DIR_FLAGS)
        except OSError as exc:
            if exc.errno == errno.ENOENT and not create:
                raise FileNotFoundError(errno.ENOENT, "no such directory", rel) from None
            if not create or exc.errno != errno.ENOENT:
                raise _refusal(exc, rel, self.fd) from None
        fd = os.dup(self.fd)
        try:
            for name in parts:
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                try:
                    nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise _refusal(exc, rel, self.fd) from None
                os.close(fd)
                fd = nxt
            return os.dup(fd)
        finally:
            os.close(fd)

    def _parent(self, rel: str, *, create: bool = False) -> tuple[int, str]:
        parts = split(rel)
        if not parts:
            raise UnsafePathError("give a file path, not the workspace itself")
        return self.open_dir("/".join(parts[:-1]), create=create), parts[-1]

    def lstat(self, rel: str) -> os.stat_result | None:
        """``lstat`` of ``rel`` (None when missing); its parents are opened without following symlinks."""
        if not split(rel):
            return os.fstat(self.fd)
        try:
            parent, name = self._parent(rel)
        except FileNotFoundError:
            return None
        try:
            return os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _refusal(exc, rel, self.fd) from None
        finally:
            os.close(parent)

    # ------------------------------------------------------------ reading
    def read_bytes(self, rel: str, *, cap: int, cut: bool = False) -> bytes:
        """The content of regular file ``rel``: at most ``cap`` bytes when ``cut``, else refused above ``cap``.

        Raises:
            FileNotFoundError: no such file.
            UnsafePathError: a symlink anywhere on the way, a FIFO, device, socket or directory,
                or a file over ``cap`` (unless ``cut``).
        """
        st = self.lstat(rel)
        if st is None:
            raise FileNotFoundError(rel)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(f"{rel!r} is not a regular file ({_kind(st)}); it is not read")
        fd, st = self._open_regular(rel)  # what was opened, not what was looked at: the name may have been swapped
        try:
            if st.st_size > cap and not cut:
                raise UnsafePathError(f"{rel!r} is {st.st_size} bytes, over the {cap}-byte limit; it is not read")
            chunks, left = [], cap + (0 if cut else 1)
            while left > 0:
                data = os.read(fd, min(left, 1 << 20))
                if not data:
                    break
                chunks.append(data)
                left -= len(data)
            out = b"".join(chunks)
            if len(out) > cap:  # it grew while being read
                raise UnsafePathError(f"{rel!r} grew over the {cap}-byte limit while being read; it is not read")
            return out
        finally:
            os.close(fd)

    def _open_regular(self, rel: str) -> tuple[int, os.stat_result]:
        """``(fd, its stat)`` of ``rel`` opened read-only (no link followed, no blocking, no terminal), refused
        unless what was opened is a regular file; the caller closes the fd."""
        try:
            fd = self._open(split(rel), os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise _refusal(exc, rel, self.fd) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafePathError(f"{rel!r} is not a regular file ({_kind(st)}); it is not read")
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def read_slice(self, rel: str, *, start: int | None, length: int) -> tuple[bytes, int]:
        """``(bytes, file size)`` of regular file ``rel``: ``length`` bytes from ``start`` (the last ``length``
        bytes when ``start`` is None), however large the file; same refusals as :meth:`read_bytes`."""
        fd, st = self._open_regular(rel)
        try:
            size = st.st_size
            pos = max(0, size - length) if start is None else min(max(0, int(start)), size)
            chunks, left = [], max(0, length)
            while left > 0:
                data = os.pread(fd, min(left, 1 << 20), pos)
                if not data:
                    break
                chunks.append(data)
                left -= len(data)
                pos += len(data)
            return b"".join(chunks), size
        finally:
            os.close(fd)

    # ------------------------------------------------------------ writing
    def write_bytes(self, rel: str, data: bytes, *, mode: int = 0o644) -> None:
        """Writes ``rel`` atomically: a fresh exclusive temp file in the parent, renamed over the target.

        A symlink at the target is replaced, never followed; a directory there is refused.
        """
        parent, name = self._parent(rel, create=True)
        try:
            try:
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is not None and stat.S_ISDIR(st.st_mode):
                raise UnsafePathError(f"{rel!r} is a directory")
            tmp = f".{name[:64]}.{secrets.token_hex(8)}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                         dir_fd=parent)
            try:
                with os.fdopen(fd, "wb", closefd=True) as f:
                    f.write(data)
                os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=parent)
                except OSError:
                    pass
                raise
        except OSError as exc:
            raise _refusal(exc, rel, self.fd) from None
        finally:
            os.close(parent)

    def mkdir(self, rel: str) -> None:
        """Creates directory ``rel`` and its parents (no symlink followed)."""
        os.close(self.open_dir(rel, create=True))

    def rename(self, src: str, dst: str) -> None:
        """Renames ``src`` to ``dst`` (both beneath the root; a symlink at ``dst`` is replaced, not followed)."""
        sp, sn = self._parent(src)
        try:
            dp, dn = self._parent(dst, create=True)
            try:
                os.rename(sn, dn, src_dir_fd=sp, dst_dir_fd=dp)
            except OSError as exc:
                raise _refusal(exc, f"{src} -> {dst}") from None
            finally:
                os.close(dp)
        finally:
            os.close(sp)

    # ------------------------------------------------------------ listing and removing
    def _dfs(self, rel: str) -> Iterator[tuple[str, int, str, str, os.stat_result | None]]:
        """Depth-first events beneath directory ``rel``: ``("entry", dir_fd, name, rel, lstat)`` before a
        directory's content, ``("done", parent_fd, name, rel, None)`` after it. One directory is open at
        a time and the walk climbs back through ``..``, checked against the directory it came from, so
        depth costs neither descriptors nor stack; ``dir_fd`` is valid only until the next event."""
        fd = self.open_dir(rel)
        st = os.fstat(fd)
        frames: list[tuple[str, str, list[str], tuple[int, int]]] = [
            ("/".join(split(rel)), "", sorted(os.listdir(fd), reverse=True), (st.st_dev, st.st_ino))]
        try:
            while frames:
                base, _, names, _ = frames[-1]
                if not names:
                    _, name, _, _ = frames.pop()
                    if not frames:
                        break
                    up = os.open("..", _DIR_FLAGS, dir_fd=fd)
                    ust = os.fstat(up)
                    if (ust.st_dev, ust.st_ino) != frames[-1][3]:
                        os.close(up)
                        raise UnsafePathError(f"the tree under {rel or '.'!r} was moved while it was walked")
                    os.close(fd)
                    fd = up
                    yield "done", fd, name, base, None
                    continue
                name = names.pop()
                try:
                    est = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                child = f"{base}/{name}" if base else name
                yield "entry", fd, name, child, est
                if not stat.S_ISDIR(est.st_mode):
                    continue
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue  # removed or swapped for a symlink since the lstat
                sst = os.fstat(sub)
                if (sst.st_dev, sst.st_ino) != (est.st_dev, est.st_ino):
                    os.close(sub)
                    continue
                try:
                    listing = sorted(os.listdir(sub), reverse=True)
                except OSError:
                    os.close(sub)
                    continue
                frames.append((child, name, listing, (sst.st_dev, sst.st_ino)))
                os.close(fd)
                fd = sub
        finally:
            os.close(fd)

    def walk(self, rel: str = "") -> Iterator[Entry]:
        """Every entry beneath directory ``rel``, depth-first, iteratively; symlinks are listed, not entered."""
        for event, _, _, child, st in self._dfs(rel):
            if event == "entry":
                assert st is not None
                yield Entry(child, st)

    def usage(self) -> Usage:
        """Bytes and inodes of the whole tree (hard links counted once; the root itself included)."""
        seen: set[int] = set()
        total = _cost(os.fstat(self.fd))
        for e in self.walk():
            if e.st.st_ino in seen:
                continue
            seen.add(e.st.st_ino)
            total += _cost(e.st)
        return Usage(total, len(seen) + 1)

    def remove(self, rel: str) -> None:
        """Removes ``rel``: a file or symlink is unlinked, a directory emptied (iteratively) and removed."""
        try:
            parent, name = self._parent(rel)
        except FileNotFoundError:
            return
        try:
            try:
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                return
            if not stat.S_ISDIR(st.st_mode):
                os.unlink(name, dir_fd=parent)
                return
            for event, fd, child_name, _, est in self._dfs(rel):
                try:
                    if event == "done":
                        os.rmdir(child_name, dir_fd=fd)
                    elif est is not None and not stat.S_ISDIR(est.st_mode):
                        os.unlink(child_name, dir_fd=fd)
                except FileNotFoundError:
                    pass
            os.rmdir(name, dir_fd=parent)
        except OSError as exc:
            raise _refusal(exc, rel, self.fd) from None
        finally:
            os.close(parent)

    def truncate(self, rel: str, size: int) -> None:
        """Cuts regular file ``rel`` to ``size`` bytes (no symlink followed)."""
        fd = self._open(split(rel), os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.ftruncate(fd, size)
        finally:
            os.close(fd)


def _kind(st: os.stat_result) -> str:
    m = st.st_mode
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(m):
            return name
    return "not a regular file"


def openat2_available() -> bool:
    """Whether the kernel's ``openat2`` is used (else the component-by-component fallback)."""
    return _openat2 is not None
