"""Which worker of a :class:`~reasearch.engine.sandbox.SandboxPool` serves a request.

An object the pool holds (:class:`WorkerScheduler`, with its own state: the idle list, the image
switches, the slots started ahead): the warm image a request needs (:meth:`WorkerScheduler.profile_of`, from
:func:`~reasearch.engine._fit.fit_profile`), taking a free worker with that image or replacing an idle
one by a worker with it (never more than ``config.n_workers`` workers), slots of a lazy pool started
ahead, and a steady stream of one image spread over every worker in the background.

Trust: trusted side; it decides from the pool's own state only (no candidate data but the request's
source, read by the image fitting as text).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from reasearch.engine._fit import fit_profile
from reasearch.engine._handle import WorkerHandle
from reasearch.engine.config import SandboxConfig
from reasearch.engine.protocol import RunRequest
from reasearch.engine.waits import WaitTicker
from reasearch.errors import ConfigError, SandboxError

__all__ = ["BUSY_NOTICE_AFTER_S", "WorkerScheduler"]

# A request that waits this long for a free worker is reported (reasearch.engine.waits), then every
# NOTICE_EVERY_S while it waits: back-pressure a person can see, never a timeout.
BUSY_NOTICE_AFTER_S = 5.0


class WorkerScheduler:
    """The pool's choice of worker, over the pool's workers; it owns the idle list and its condition.

    Its public face: :meth:`profile_of`, :meth:`admit` (workers ready to serve), :meth:`acquire` and
    :meth:`release` (one request's worker), :meth:`prestart`, :attr:`switches` and :meth:`close`.

    Args:
        config: the pool's configuration (``n_workers``, ``preload``, ``fit_images``, ``switch_interval_s``).
        workers: every worker slot of the pool (the scheduler never makes more).
        importable: the top-level modules the jail's runtime holds (what a request's ``preload`` may name).
        keepalive: called after each worker is handed out (the launcher's: keeps its runtime in use).
    """

    def __init__(self, config: SandboxConfig, workers: Sequence[WorkerHandle], importable: set[str],
                 keepalive: Callable[[], None]) -> None:
        self.config = config
        self._workers = list(workers)
        self._importable = set(importable)
        self._keepalive = keepalive
        self._closed = False
        self._switches = 0
        self._last_switch = float("-inf")
        self._background: set[threading.Thread] = set()  # workers being replaced for another image
        self._starting: dict[WorkerHandle, tuple[str, ...]] = {}  # cold slots started ahead (prestart)
        self._cond = threading.Condition(threading.Lock())
        self._idle: list[WorkerHandle] = []  # least recently released first

    @property
    def switches(self) -> int:
        """How many times an idle worker was replaced by one with another warm image."""
        return self._switches

    def admit(self, workers: Sequence[WorkerHandle]) -> None:
        """Puts ``workers`` (started, or cold slots of a lazy pool) on the idle list, in that order."""
        with self._cond:
            self._idle.extend(w for w in workers if w not in self._idle)
            self._cond.notify_all()

    def close(self) -> list[threading.Thread]:
        """Refuses every later :meth:`acquire`, wakes the waiting ones (they raise) and returns the
        background threads still starting a worker (the pool joins them before killing the workers)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            return list(self._background)

    def profile_of(self, request: RunRequest) -> tuple[str, ...]:
        """The warm image (sorted module names) that serves ``request``.

        ``request.preload`` when given; otherwise, with ``config.fit_images``, the modules of
        ``config.preload`` that the candidate's source (and its ``.py`` files) imports, plus NumPy
        when its payload carries arrays (see :func:`fit_profile`); without it, ``config.preload``.

        Raises:
            ConfigError: the request names a module outside the pool's runtime (the jail could not
                import it).
        """
        if request.preload is None:
            if not self.config.fit_images:
                return tuple(sorted(set(self.config.preload)))
            return fit_profile(request, self.config.preload)
        profile = tuple(sorted(set(request.preload)))
        outside = [m for m in profile if m.partition(".")[0] not in self._importable]
        if outside:
            raise ConfigError(f"RunRequest.preload names modules outside this pool's runtime: {outside}; "
                              "add their packages to SandboxConfig.runtime_packages or preload")
        return profile

    # -- scheduling
    def acquire(self, profile: tuple[str, ...] | None = None) -> WorkerHandle:
        """A free worker whose warm image serves ``profile`` (None: any free worker).

        In order: an idle worker with exactly that image; else, while the last image switch is
        less than ``config.switch_interval_s`` old, an idle worker whose image holds that one (it
        serves the request correctly, only its fork is slower); else the least recently used idle
        worker is replaced (its jail killed) by a fresh one with that image (with that image and
        its old one together, when the last switch is that recent: a workload that keeps changing
        images grows a worker that serves them all, instead of replacing workers on every request). The pool never holds
        more than ``config.n_workers`` workers, whatever mix of images it serves. With no worker
        idle, it waits (no time limit runs meanwhile), reported as a wait after :data:`BUSY_NOTICE_AFTER_S`.

        Spreading: when the worker taken is the only one with its image, and another worker has sat
        idle with another image for ``switch_interval_s`` (and no switch happened meanwhile), that
        one is replaced by a worker with this image in the background: a steady stream of one
        image, even from one caller, ends up served by every worker, each forking its next child
        while the others serve.
        """
        if self._closed:
            raise SandboxError("this SandboxPool is closed; create a new one (or use default_pool())")
        ticker: WaitTicker | None = None
        with self._cond:
            while True:
                if self._closed:
                    raise SandboxError("this SandboxPool is closed; create a new one (or use default_pool())")
                # First in, first out: the worker released longest ago has had the most time to
                # tear down its last child and fork the next one (it does that after its reply).
                pick = next((w for w in self._idle if not w.cold and (profile is None or w.profile == profile)),
                            None)
                if pick is None and profile is not None and profile in self._starting.values():
                    self._cond.wait(0.5)  # a slot is being started ahead with this very image: it serves
                    continue
                switch = False
                target = profile
                cold = None if pick is not None else next((w for w in self._idle if w.cold), None)
                if cold is not None:  # a slot never started: start it with this image (nothing warm is lost)
                    pick = cold
                elif pick is None and self._idle:
                    assert profile is not None
                    recent = time.monotonic() - self._last_switch < self.config.switch_interval_s
                    wanted = set(profile)
                    pick = next((w for w in self._idle if wanted <= set(w.profile)), None) if recent else None
                    if pick is None:
                        pick, switch = self._idle[0], True
                        self._last_switch = time.monotonic()
                        self._switches += 1
                        if recent:  # images churn: grow this one to serve both (a superset serves next time)
                            target = tuple(sorted(wanted | set(pick.profile)))
                if pick is not None:
                    self._idle.remove(pick)
                    spread = None if switch or cold is not None or profile is None else self._spread_target(profile)
                    break
                if ticker is None:
                    ticker = WaitTicker(f"a free sandbox worker (all {len(self._workers)} busy)",
                                        after_s=BUSY_NOTICE_AFTER_S)
                ticker.tick()
                self._cond.wait(0.5)
        if spread is not None:
            assert profile is not None
            t = threading.Thread(target=self._switch_in_background, args=(spread, profile),
                                 name="sandbox-spread", daemon=True)
            self._background.add(t)
            t.start()
        try:
            if cold is not None:
                pick.switch_profile(tuple(sorted(set(self.config.preload))) if profile is None else profile)
            elif switch:
                assert target is not None
                pick.switch_profile(target)
            elif not pick.alive():
                pick.restart()
        except BaseException:
            self.release(pick)  # a worker that failed to start is restarted by its next user
            raise
        self._keepalive()
        return pick

    def prestart(self, request: RunRequest) -> bool:
        """Starts, in the background, a never-started slot of a lazy pool (``config.lazy_start``) with
        the image that will serve ``request`` (:meth:`profile_of`), so that its jail starts while the
        caller still prepares (``reasearch eval`` imports the task's module meanwhile). A request for
        that image waits for it rather than starting another slot. Returns False (and starts nothing)
        when no slot is cold, or a worker with that image is already up or on its way.

        Raises:
            ConfigError: as :meth:`profile_of`.
        """
        profile = self.profile_of(request)
        with self._cond:
            if self._closed or any(w.profile == profile and not w.cold for w in self._workers) \
                    or profile in self._starting.values():
                return False
            cold = next((w for w in self._idle if w.cold), None)
            if cold is None:
                return False
            self._idle.remove(cold)
            self._starting[cold] = profile
            t = threading.Thread(target=self._start_ahead, args=(cold, profile), name="sandbox-prestart", daemon=True)
            self._background.add(t)
        t.start()
        return True

    def _switch_quietly(self, w: WorkerHandle, profile: tuple[str, ...]) -> None:
        """Gives ``w`` the image ``profile`` unless the pool is closed; a failure is not raised (in the
        background there is no one to tell): the worker is left as it is, for its next user to start."""
        try:
            if not self._closed:
                w.switch_profile(profile)
        except BaseException:
            pass

    def _start_ahead(self, w: WorkerHandle, profile: tuple[str, ...]) -> None:
        try:  # failed to start: it stays cold, and the request that needs it starts it (and reports why)
            self._switch_quietly(w, profile)
        finally:
            with self._cond:
                self._starting.pop(w, None)
                self._background.discard(threading.current_thread())
            self.release(w)

    def _spread_target(self, profile: tuple[str, ...]) -> WorkerHandle | None:
        """An idle worker to give ``profile`` in the background (see :meth:`acquire`), taken off
        the idle list; None when none qualifies. Call with ``self._cond`` held."""
        now = time.monotonic()
        interval = self.config.switch_interval_s
        if now - self._last_switch < interval or sum(w.profile == profile and not w.cold for w in self._workers) != 1:
            return None
        other = next((w for w in self._idle if w.profile != profile and now - w.last_used >= interval), None)
        if other is not None:
            self._idle.remove(other)
            self._last_switch = now
            self._switches += 1
        return other

    def _switch_in_background(self, w: WorkerHandle, profile: tuple[str, ...]) -> None:
        self._switch_quietly(w, profile)  # failed to start: its next user restarts it (on the pool's own image)
        self.release(w)
        with self._cond:
            self._background.discard(threading.current_thread())

    def release(self, w: WorkerHandle) -> None:
        """Returns ``w`` to the idle list (last in line) and wakes one waiter."""
        w.last_used = time.monotonic()
        with self._cond:
            if w not in self._idle:
                self._idle.append(w)
            self._cond.notify()
