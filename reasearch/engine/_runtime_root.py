"""The sandbox runtime's private folder and the verified trees in it (code copies and mirrors).

Everything the runtime writes sits under ``$REASEARCH_RUNTIME_DIR/reasearch.u<euid>/`` (default base
``/var/tmp``), created 0711 and re-checked with ``lstat`` on every use (:func:`runtime_root`). Each tree
in it is built in a fresh folder beside its final name, gets a ``MANIFEST.json`` and is renamed into
place; on reuse it is walked against that manifest, and one that differs is moved aside, deleted and
rebuilt, never used (:func:`_reuse_or_build`). A mirror verified within the last few minutes is not
walked again while its folder and manifest stay the same objects (a stamp beside it: :func:`stamped`).
See :mod:`reasearch.engine._runtime` for the whole story.

Trust: trusted side. Another local user must not be able to plant a tree for us to reuse: anything not
ours, writable by others, a symlink or changed since built is refused or rebuilt, with a
:class:`~reasearch.errors.SandboxUnavailableError` that says what to remove.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from reasearch.errors import SandboxUnavailableError

__all__ = ["check_ancestors", "runtime_root", "stamped", "write_stamp"]

_MANIFEST = "MANIFEST.json"
_CODE_PREFIX, _MIRROR_PREFIX = "reasearch-code-", "reasearch-runtime-"


# ------------------------------------------------------------------------------ the private root


def _refuse(path: Path, why: str) -> SandboxUnavailableError:
    return SandboxUnavailableError(
        f"refusing the sandbox runtime folder {path}: {why}. Nothing under it is used. Remove it (as its owner, "
        f"or root) so it can be recreated, or set REASEARCH_RUNTIME_DIR to a folder owned by root or by uid "
        f"{os.geteuid()} that nobody else can write (it must be searchable by others: the jail reads from it)")


def check_ancestors(base: Path) -> None:
    """Every folder from ``/`` to ``base``: owned by root or us, writable by others only when sticky."""
    me = os.geteuid()
    for p in (*reversed(base.parents), base):
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode):  # ``base`` is resolved first: only a race gets here
            raise _refuse(base, f"{p} is a symlink")
        if st.st_uid not in (0, me):
            raise _refuse(base, f"{p} belongs to uid {st.st_uid}, who could replace what is below it")
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise _refuse(base, f"{p} is writable by group/others and not sticky (mode {st.st_mode & 0o7777:o})")


def _check_private(path: Path) -> os.stat_result:
    """``path`` is a real folder of ours that nobody else can write (``lstat``: a symlink is refused)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise _refuse(path, "it vanished while in use") from None
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, f"it is a symlink (to {os.readlink(path)!r}), not a folder we made")
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "it is not a folder")
    if st.st_uid != os.geteuid():
        raise _refuse(path, f"it belongs to uid {st.st_uid}, not to this process (uid {os.geteuid()})")
    if st.st_mode & 0o022:
        raise _refuse(path, f"it is writable by group/others (mode {st.st_mode & 0o7777:o})")
    return st


def runtime_root() -> Path:
    """The private folder holding code copies and mirrors (created 0711 on first use; checked every time).

    Raises:
        SandboxUnavailableError: the folder, or one above it, could be written by another user.
    """
    base = Path(os.environ.get("REASEARCH_RUNTIME_DIR") or "/var/tmp")
    if not base.is_absolute():
        raise SandboxUnavailableError(f"REASEARCH_RUNTIME_DIR must be an absolute path, got {str(base)!r}")
    base.mkdir(parents=True, exist_ok=True)
    base = base.resolve()
    check_ancestors(base)
    root = base / f"reasearch.u{os.geteuid()}"
    try:
        os.mkdir(root, 0o711)
    except FileExistsError:
        pass
    st = _check_private(root)
    if stat.S_IMODE(st.st_mode) & 0o011 != 0o011:  # ours, but the jail's uid must be able to traverse it
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:  # the checked folder itself, never what a name swapped in meanwhile points to
            if os.fstat(fd).st_ino == st.st_ino:
                os.fchmod(fd, stat.S_IMODE(st.st_mode) | 0o011)
        finally:
            os.close(fd)
    return root


# ------------------------------------------------------------------------------------ manifests


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _walk(top: Path) -> Iterable[tuple[str, os.stat_result]]:
    """Every entry below ``top`` (relative path, ``lstat``), folders first, without following symlinks."""
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(top / rel if rel else top) as it:
            for entry in sorted(it, key=lambda e: e.name):
                r = f"{rel}/{entry.name}" if rel else entry.name
                st = entry.stat(follow_symlinks=False)
                yield r, st
                if stat.S_ISDIR(st.st_mode):
                    stack.append(r)


def _write_manifest(top: Path) -> None:
    """Records every entry of a freshly built tree (called before it is renamed into place)."""
    entries: dict[str, list[object]] = {}
    for rel, st in _walk(top):
        if stat.S_ISDIR(st.st_mode):
            entries[rel] = ["d"]
        elif stat.S_ISLNK(st.st_mode):
            entries[rel] = ["l", os.readlink(top / rel)]
        elif stat.S_ISREG(st.st_mode):
            entries[rel] = ["f", st.st_size, st.st_mtime_ns, st.st_ino, _sha256(top / rel)]
        else:
            raise SandboxUnavailableError(f"unexpected special file {top / rel} in a runtime copy being built")
    tmp = top / (_MANIFEST + ".tmp")
    tmp.write_text(json.dumps({"version": 1, "entries": entries}, sort_keys=True), encoding="utf-8")
    os.chmod(tmp, 0o644)
    os.rename(tmp, top / _MANIFEST)


def _verify(top: Path, *, full: bool, expect: dict[str, str] | None = None) -> str | None:
    """Why the tree at ``top`` must not be used (None: it is exactly what we built).

    Args:
        full: re-hash every file (else compare size, mtime and inode with the manifest).
        expect: SHA-256 that some files must have (the checkout's sources, for the code copy).
    """
    try:
        try:
            st = _check_private(top)
        except SandboxUnavailableError as exc:
            return str(exc).split(": ", 1)[-1].split(". Nothing under it", 1)[0]
        if stat.S_IMODE(st.st_mode) & 0o055 != 0o055:
            return f"mode {stat.S_IMODE(st.st_mode):o} of the folder"
        mst = os.lstat(top / _MANIFEST)
        if not stat.S_ISREG(mst.st_mode) or mst.st_uid != os.geteuid() or mst.st_mode & 0o022:
            return "the manifest is not a regular file of ours"
        manifest = json.loads((top / _MANIFEST).read_text(encoding="utf-8"))
        entries = manifest["entries"]
        if not isinstance(entries, dict):
            return "malformed manifest"
        me = os.geteuid()
        seen = 0
        for rel, est in _walk(top):
            if rel == _MANIFEST:
                continue
            want = entries.get(rel)
            if want is None:
                return f"{rel}: not in the manifest (planted?)"
            seen += 1
            if not stat.S_ISLNK(est.st_mode) and (est.st_mode & 0o022 or est.st_uid not in (0, me)):
                return f"{rel}: owner {est.st_uid} / mode {stat.S_IMODE(est.st_mode):o}"
            kind = want[0]
            if kind == "d":
                if not stat.S_ISDIR(est.st_mode):
                    return f"{rel}: no longer a folder"
            elif kind == "l":
                if not stat.S_ISLNK(est.st_mode) or os.readlink(top / rel) != want[1]:
                    return f"{rel}: symlink changed"
            elif kind == "f":
                if not stat.S_ISREG(est.st_mode) or est.st_size != want[1]:
                    return f"{rel}: size or type changed"
                if full:
                    if _sha256(top / rel) != want[4]:
                        return f"{rel}: content changed"
                elif est.st_mtime_ns != want[2] or est.st_ino != want[3]:
                    return f"{rel}: modified or replaced since it was built"
            else:
                return f"{rel}: malformed manifest entry"
        if seen != len(entries):
            return f"{len(entries) - seen} file(s) of the manifest are missing"
        for rel, digest in (expect or {}).items():
            want = entries.get(rel)
            if want is None or want[0] != "f" or want[4] != digest:
                return f"{rel}: differs from the checkout"
        if expect is not None:
            extra = {r for r, w in entries.items() if w[0] == "f" and not r.endswith(".pyc")} - set(expect)
            if extra:
                return f"{sorted(extra)[0]}: not part of the jail's code"
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        return f"unreadable ({exc})"
    return None


def _discard(path: Path) -> None:
    """Moves a rejected tree aside (so no one else picks it up) and deletes it."""
    aside = path.parent / f".stale-{path.name}-{os.getpid()}-{time.monotonic_ns()}"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    shutil.rmtree(aside, ignore_errors=True)


def _install(work: Path, final: Path, *, full: bool, expect: dict[str, str] | None = None) -> Path:
    """Renames a built tree into place; if another process got there first, uses theirs if it verifies."""
    _write_manifest(work)
    os.chmod(work, 0o755)
    try:
        os.rename(work, final)
        return final
    except OSError:
        shutil.rmtree(work, ignore_errors=True)
    why = _verify(final, full=full, expect=expect)
    if why is not None:
        raise SandboxUnavailableError(f"{final} was built concurrently and does not verify ({why}); retry")
    return final


# A mirror (30k entries) takes ~0.3-0.5 s to walk, and every new process (a CLI command, a script that
# evaluates once, a Ray worker) would pay it before its first evaluation. So a mirror verified within the
# last _REVERIFY_S seconds is not walked again, provided the folder and its manifest are still the same
# objects, ours, with the same modes (checked with lstat every time). "Verified" is remembered in this
# process and, for the processes that follow, in a stamp file beside the mirror in the private root
# (``.verified-<name>``: ours, mode 0600, not writable by anyone else, holding the identity it vouches
# for and when). Only our own uid (or root) can write below the private root, so the walk guards against
# our own mistakes and a crash mid-build, a stamp could only be forged by who could forge the mirror
# itself, and the window changes nothing for other users. The code copy is re-hashed on every use.
_REVERIFY_S = 300.0
_STAMP_PREFIX = ".verified-"
_verified: dict[Path, tuple[tuple[int, ...], float]] = {}


def _identity(top: Path) -> tuple[int, ...]:
    a, m = os.lstat(top), os.lstat(top / _MANIFEST)
    return (a.st_ino, a.st_uid, a.st_mode, m.st_ino, m.st_uid, m.st_mode, m.st_mtime_ns, m.st_size)


def _stamp_path(final: Path) -> Path:
    return final.parent / f"{_STAMP_PREFIX}{final.name}"


def write_stamp(stamp: Path, identity: Sequence[int | str]) -> None:
    """Records at ``stamp`` that a check of ``identity`` passed now, for the processes that follow
    (best effort: a stamp that cannot be written only means the next process checks again)."""
    tmp = stamp.parent / f"{stamp.name}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"identity": list(identity), "at": time.time()}, f)
        os.rename(tmp, stamp)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def stamped(stamp: Path, identity: Sequence[int | str]) -> bool:
    """True when ``stamp`` (a real file of ours that no one else can read or write) says a check of
    this very ``identity`` passed less than :data:`_REVERIFY_S` seconds ago."""
    if _REVERIFY_S <= 0:
        return False
    try:
        st = os.lstat(stamp)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            return False
        with open(stamp, encoding="utf-8") as f:
            got = json.loads(f.read(4096))
        age = time.time() - float(got["at"])
        return list(got["identity"]) == list(identity) and 0.0 <= age < _REVERIFY_S
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _recently_verified(final: Path) -> bool:
    if _REVERIFY_S <= 0:
        return False
    try:
        identity = _identity(final)
    except OSError:
        return False
    hit = _verified.get(final)
    if hit is not None and time.monotonic() - hit[1] < _REVERIFY_S:
        return identity == hit[0]
    if stamped(_stamp_path(final), identity):
        _verified[final] = (identity, time.monotonic())  # from now on this process's own window
        return True
    return False


def _remember_verified(final: Path) -> None:
    identity = _identity(final)
    _verified[final] = (identity, time.monotonic())
    write_stamp(_stamp_path(final), identity)


def _reuse_or_build(final: Path, build: object, *, full: bool, expect: dict[str, str] | None = None) -> bool:
    """Uses ``final`` if it verifies; else builds it anew. Returns True when this call built it."""
    if os.path.lexists(final):
        if not full and _recently_verified(final):
            os.utime(final, follow_symlinks=False)
            return False
        why = _verify(final, full=full, expect=expect)
        if why is None:
            os.utime(final, follow_symlinks=False)  # mark as recently used (pruning keeps it)
            if not full:
                _remember_verified(final)
            return False
        if os.path.islink(final) or os.lstat(final).st_uid != os.geteuid():
            raise _refuse(final, why)  # not something we built: say so rather than delete it
        _discard(final)  # ours, but changed since we built it: never used, rebuilt from scratch
    work = Path(tempfile.mkdtemp(prefix=final.name + ".build-", dir=final.parent))
    try:
        build(work)  # type: ignore[operator]
        _install(work, final, full=full, expect=expect)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    if not full:
        _remember_verified(final)
    return True


def _prune(code_age_s: float = 3600.0, mirror_age_s: float = 86400.0) -> None:
    """Removes code copies and mirrors unused for a while (a live pool touches its own every few minutes).

    Inside our private root; in the base folder only the pre-root layout's folders that are ours.
    """
    now = time.time()
    root = runtime_root()
    places = [(root, True)]
    base = root.parent
    places.append((base, False))
    for where, private in places:
        for p in where.glob("reasearch-*") if not private else where.iterdir():
            name = p.name
            if private and name.startswith(_STAMP_PREFIX + _MIRROR_PREFIX):  # a stamp outlives no mirror
                if not os.path.lexists(root / name[len(_STAMP_PREFIX):].split(".", 1)[0]):
                    try:
                        os.unlink(p)
                    except OSError:
                        pass
                continue
            if name.startswith(".stale-"):
                age = 0.0
            elif name.startswith(_CODE_PREFIX):
                age = code_age_s
            elif name.startswith(_MIRROR_PREFIX) or ".build-" in name:
                age = mirror_age_s
            else:
                continue
            try:
                st = os.lstat(p)
                if (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and now - st.st_mtime > age):
                    shutil.rmtree(p, ignore_errors=True)
            except OSError:
                pass
