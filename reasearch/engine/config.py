"""Typed configuration of the sandbox pool: the isolation mode and the pool's settings."""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from reasearch.errors import ConfigError

__all__ = ["DEFAULT_PRELOAD", "SandboxConfig", "SandboxMode"]


DEFAULT_PRELOAD: tuple[str, ...] = ("numpy", "scipy.optimize", "numba", "reasearch.native")


class SandboxMode(str, enum.Enum):
    """Isolation mode: ``AUTO`` picks ``NSJAIL`` where it works, else ``PROCESS`` (with a loud warning)."""

    AUTO = "auto"
    NSJAIL = "nsjail"
    PROCESS = "process"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class SandboxConfig:
    """Configuration of a :class:`SandboxPool` (unknown keys are an error).

    Attributes:
        mode: ``"auto"`` (nsjail where it works, else process mode with a warning logged once),
            ``"nsjail"`` (raise :class:`~reasearch.errors.SandboxUnavailableError` if it cannot run)
            or ``"process"`` (rlimits and process groups only: no filesystem or network isolation).
        workers: number of warm workers; default ``os.cpu_count()``.
        preload: modules each worker imports before it forks any child.
        numba_cache_dir: base folder for per-worker ``NUMBA_CACHE_DIR`` folders (process mode; inside
            a jail each worker's cache lives in the jail's own ``/tmp``); default: a per-pool temp dir.
        runtime_packages: extra top-level packages made importable inside the jail, beyond
            :data:`reasearch.engine._runtime.RUNTIME_PACKAGES` (NumPy, SciPy, numba, highspy, torch, ...)
            and the ``preload`` modules.
        start_timeout_s: how long a worker may take to start and preload before the pool raises.
        grace_s: how long past a request's wall limit the engine waits for a worker before killing
            its jail (the worker normally answers right at the limit).
        scratch_min_free_mb: a worker whose scratch filesystem has less free space than this after
            cleaning up behind a candidate retires, and the engine replaces it before its next request.
        fit_images: serve each request from a worker whose warm image holds only the modules of
            ``preload`` its candidate imports (see :func:`reasearch.engine.sandbox.fit_profile`): a
            trivial or NumPy-only candidate does not pay for forking SciPy and numba pages. Workers
            are replaced per image within the ``workers`` cap. False: every worker preloads all of
            ``preload`` (a request's own ``preload`` still picks its image).
        switch_interval_s: the least time between two replacements of a worker for another image
            while an idle worker with a larger image could serve the request (bounds the cost of
            a workload that alternates between images); also how long a worker must have sat idle
            before it is replaced in the background to spread a busy image over the pool.
        jail_memory_mb: memory of each jail as a whole (worker, children, tmpfs pages), enforced by
            a cgroup where one is available (nsjail mode as root with a cgroup v1 memory controller);
            None: no cgroup. Per-evaluation address-space rlimits apply either way.
        zygote: each worker forks its children through a zygote, a quiet copy of itself that does
            nothing else, so that the pages the worker writes while serving are not copied again
            for every evaluation (``reasearch/engine/_zygote.c``; used where the extension is built
            and the C library is glibc on x86-64 or arm64). False: the worker forks them itself.
        lazy_start: start no worker with the pool: each slot starts on first need, with the warm
            image of the request that needs it (a slot is started rather than an idle worker of
            another image replaced, or a request kept waiting while slots are left). A process that
            evaluates once waits for one jail with its candidate's image (~0.1 s with NumPy here),
            not for every worker's full preload; the same launcher, jail and limits serve it.
            :func:`reasearch.engine.sandbox.default_pool` starts this way. False: every worker
            starts (with ``preload``) before the constructor returns.
    """

    mode: str = "auto"
    workers: int | None = None
    preload: tuple[str, ...] = DEFAULT_PRELOAD
    numba_cache_dir: str | None = None
    runtime_packages: tuple[str, ...] = ()
    start_timeout_s: float = 120.0
    grace_s: float = 5.0
    scratch_min_free_mb: int = 64
    jail_memory_mb: int | None = 8192
    fit_images: bool = True
    switch_interval_s: float = 5.0
    zygote: bool = True
    lazy_start: bool = False

    def __post_init__(self) -> None:
        try:
            SandboxMode(self.mode)
        except ValueError:
            raise ConfigError(f"SandboxConfig.mode must be one of auto, nsjail, process; got {self.mode!r}") from None
        if self.workers is not None and (not isinstance(self.workers, int) or self.workers < 1):
            raise ConfigError(f"SandboxConfig.workers must be a positive int or None; got {self.workers!r}")
        if isinstance(self.preload, str) or not all(isinstance(m, str) for m in self.preload):
            raise ConfigError("SandboxConfig.preload must be a sequence of module names")
        object.__setattr__(self, "preload", tuple(self.preload))
        if isinstance(self.runtime_packages, str) or not all(isinstance(m, str) for m in self.runtime_packages):
            raise ConfigError("SandboxConfig.runtime_packages must be a sequence of package names")
        object.__setattr__(self, "runtime_packages", tuple(self.runtime_packages))
        if self.start_timeout_s <= 0 or self.grace_s <= 0:
            raise ConfigError("SandboxConfig.start_timeout_s and grace_s must be positive")
        if not isinstance(self.fit_images, bool):
            raise ConfigError(f"SandboxConfig.fit_images must be a bool; got {self.fit_images!r}")
        if not isinstance(self.lazy_start, bool):
            raise ConfigError(f"SandboxConfig.lazy_start must be a bool; got {self.lazy_start!r}")
        if not isinstance(self.zygote, bool):
            raise ConfigError(f"SandboxConfig.zygote must be a bool; got {self.zygote!r}")
        if not isinstance(self.switch_interval_s, (int, float)) or self.switch_interval_s < 0:
            raise ConfigError(f"SandboxConfig.switch_interval_s must be a number >= 0; got {self.switch_interval_s!r}")
        if not isinstance(self.scratch_min_free_mb, int) or self.scratch_min_free_mb < 0:
            raise ConfigError(
                f"SandboxConfig.scratch_min_free_mb must be an int >= 0; got {self.scratch_min_free_mb!r}"
            )
        if self.jail_memory_mb is not None and (not isinstance(self.jail_memory_mb, int) or self.jail_memory_mb < 256):
            raise ConfigError(
                f"SandboxConfig.jail_memory_mb must be an int >= 256 or None; got {self.jail_memory_mb!r}"
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SandboxConfig:
        """Builds a config from a mapping; unknown keys raise :class:`~reasearch.errors.ConfigError`."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown SandboxConfig keys {unknown}; known keys: {sorted(known)}")
        return cls(**dict(data))

    @property
    def n_workers(self) -> int:
        return self.workers or os.cpu_count() or 1
