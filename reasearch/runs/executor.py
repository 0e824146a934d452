"""Executors: where evaluations run. ``LocalExecutor`` (the warm sandbox pool) and ``RayExecutor`` (a cluster).

Both implement :class:`Executor`: ``submit(EvalRequest) -> Future[EvalResult]``, ``map(requests)``
with a progress bar, ``parallelism`` and ``close()``. The executor is a deployment choice, never a
code path of the tasks (docs/architecture.md, invariant 7): both rebuild the task from the request's
:class:`TaskSpec` with ``make(spec)`` and end in the same call,
``task.evaluate(source, seed=..., executor=<a SandboxPool>)``, so they give identical results; a Ray
node runs candidates in its own warm sandbox pool, and a node without nsjail says so in each result's
provenance (``sandbox_mode``).

Concurrency is explicit: the parallelism you ask for is the parallelism you get (no silent cap), and
``parallelism`` reports the effective figure.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from reasearch.engine import SandboxConfig, SandboxPool
from reasearch.engine.protocol import SandboxRunner
from reasearch.errors import ConfigError
from reasearch.evaluators.base import Task
from reasearch.evaluators.kinds import ExperimentOptions, RepositoryKind, task_kind
from reasearch.evaluators.registry import build_task, make, task_class_of
from reasearch.evaluators.result import EvalResult
from reasearch.evaluators.spec import TaskSpec
from reasearch.runs.ray_cluster import connect_ray, gpu_options

__all__ = ["EvalRequest", "Executor", "LocalExecutor", "RayExecutor", "evaluate_with", "resolve_task", "task_entry_of"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EvalRequest:
    """One evaluation: which task (its spec), which candidate source, under which seed.

    Attributes:
        spec: the task's :class:`TaskSpec` (``task.spec``, or a run's stored spec); the executor
            rebuilds the task with ``make(spec)``, so a task outside the registry evaluates anywhere
            its ``task_class`` imports (a Ray node included).
        source: the candidate program's source text.
        seed: passed to the task's harness and recorded in provenance.
        options: the wire form of a training task's :class:`~reasearch.evaluators.kinds.ExperimentOptions`
            (``experiment_dir``: where the live log and a stop file go); they never change the result and
            are not part of any cache key. Empty for most requests (other kinds take none).
    """

    spec: TaskSpec
    source: str = ""
    seed: int | None = 0
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.spec, TaskSpec):
            raise ConfigError(f"EvalRequest takes the task's TaskSpec (task.spec, or reasearch.spec(task_id)), "
                              f"not {type(self.spec).__name__} {self.spec!r}")

    @property
    def task_id(self) -> str:
        """The task's registry id (``spec.id``)."""
        return self.spec.id

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec.to_dict(), "source": self.source, "seed": self.seed, "options": dict(self.options)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EvalRequest:
        """Reads :meth:`to_dict`'s form, and the form before specs (``task_id``, ``task_params``,
        ``task_entry``: the task is built from them, and its spec taken)."""
        if "spec" in d:
            spec = TaskSpec.from_dict(d["spec"])
        else:
            spec = build_task(d["task_id"], dict(d.get("task_params") or {}), d.get("task_entry") or "").spec
        return cls(spec, d["source"], d.get("seed"), dict(d.get("options") or {}))


def evaluate_with(task: Task, source: str, *, seed: int | None, executor: SandboxRunner | None,
                  options: Mapping[str, object]) -> EvalResult:
    """``task.evaluate`` with a request's options (their wire form) read into its kind's typed options: only
    a training task takes any (:class:`ExperimentOptions`); options for another kind are a ConfigError."""
    if not options:
        return task.evaluate(source, seed=seed, executor=executor)
    match task_kind(task):
        case RepositoryKind(task=training):
            return training.evaluate(source, seed=seed, executor=executor, options=ExperimentOptions.from_dict(options))
        case kind:
            raise ConfigError(f"{task.spec.id} is a {kind.name} task: its evaluations take no options, "
                              f"not {sorted(options)}")


def task_entry_of(task: Task) -> str:
    """``"module:Class"`` of a task instance."""
    cls = type(task)
    return f"{cls.__module__}:{cls.__qualname__}"


def resolve_task(task_id: str, params: Mapping[str, Any] | None = None, entry: str = "") -> Task:
    """Builds a task from the columns a run stored before schema 3 (id, parameters, class):
    :func:`reasearch.evaluators.registry.build_task`. A spec is rebuilt with :func:`make`."""
    return build_task(task_id, params, entry)


class _TaskCache:
    """Task instances per thread (tasks may hold solver models that are not thread-safe), each built
    once from its spec with ``make(spec)``."""

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self, req: EvalRequest) -> Task:
        cache: dict[str, Task] = self._local.__dict__.setdefault("tasks", {})
        key = json.dumps(req.spec.to_dict(), sort_keys=True, default=str)
        task = cache.get(key)
        if task is None:
            task = cache[key] = make(req.spec)
        return task


class Executor(ABC):
    """Runs evaluation requests somewhere; every implementation gives the same results for the same requests."""

    @property
    @abstractmethod
    def parallelism(self) -> int:
        """How many evaluations run at once (the effective figure, never silently capped)."""

    @abstractmethod
    def submit(self, request: EvalRequest) -> Future[EvalResult]:
        """Starts one evaluation; the future holds its result (or the engine error that stopped it)."""

    @abstractmethod
    def close(self) -> None:
        """Releases workers (idempotent)."""

    def evaluate(self, request: EvalRequest) -> EvalResult:
        """Submits one request and waits for its result."""
        return self.submit(request).result()

    def map(self, requests: Sequence[EvalRequest], *, progress: bool = True) -> list[EvalResult]:
        """Evaluates many requests at once; results in the order of ``requests``.

        Args:
            requests: what to evaluate.
            progress: show a rich progress bar (on stderr) while they run.
        """
        futures = self.submit_all(requests)
        if progress and futures:
            from rich.console import Console
            from rich.progress import Progress

            with Progress(console=Console(stderr=True), transient=True) as bar:
                job = bar.add_task(f"evaluating ({type(self).__name__}, parallelism {self.parallelism})",
                                   total=len(futures))
                for _ in as_completed(futures):
                    bar.advance(job)
        return [f.result() for f in futures]

    def submit_all(self, requests: Sequence[EvalRequest]) -> list[Future[EvalResult]]:
        """Starts many evaluations; one future per request, in order (default: :meth:`submit` each)."""
        return [self.submit(r) for r in requests]

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _new_pool(workers: int) -> SandboxRunner:
    """A warm sandbox pool with ``workers`` workers."""
    return SandboxPool(SandboxConfig(workers=workers))


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class LocalExecutor(Executor):
    """Evaluations on this machine: ``parallelism`` threads over a warm sandbox pool of as many workers.

    Args:
        parallelism: evaluations at once (default: the given pool's workers, else the CPUs this
            process may use). Honoured as given, also above the CPU count (then evaluations share
            cores; a warning says so); with a given pool of fewer workers, the pool's worker count is
            what runs at once, and ``parallelism`` reports that (with a warning).
        pool: a sandbox runner to use instead of starting one (not closed by ``close()``).
    """

    def __init__(self, parallelism: int | None = None, *, pool: SandboxRunner | None = None) -> None:
        if parallelism is not None and int(parallelism) < 1:
            raise ConfigError(f"parallelism must be >= 1, not {parallelism}")
        pool_workers = getattr(pool, "workers", None) if pool is not None else None
        if parallelism is None:
            parallelism = pool_workers if isinstance(pool_workers, int) else _cpu_count()
        self._parallelism = int(parallelism)
        if isinstance(pool_workers, int) and pool_workers < self._parallelism:
            # Threads beyond the pool's workers would only queue: report what really runs at once.
            log.warning("LocalExecutor parallelism %d exceeds the given pool's %d workers: %d evaluations run at once",
                        self._parallelism, pool_workers, pool_workers)
            self._parallelism = pool_workers
        if self._parallelism > _cpu_count():
            log.warning("LocalExecutor parallelism %d exceeds the %d CPUs available: evaluations will share cores "
                        "(timed scores get noisier)", self._parallelism, _cpu_count())
        self._pool = pool
        self._owns_pool = pool is None
        self._pool_lock = threading.Lock()
        self._threads = ThreadPoolExecutor(max_workers=self._parallelism, thread_name_prefix="reasearch-eval")
        self._tasks = _TaskCache()
        self._closed = False

    @property
    def parallelism(self) -> int:
        return self._parallelism

    @property
    def pool(self) -> SandboxRunner:
        """The sandbox pool (started on first use)."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = _new_pool(self._parallelism)
            return self._pool

    def _run(self, request: EvalRequest) -> EvalResult:
        task = self._tasks.get(request)
        return evaluate_with(task, request.source, seed=request.seed, executor=self.pool, options=request.options)

    def submit(self, request: EvalRequest) -> Future[EvalResult]:
        if self._closed:
            raise ConfigError("this LocalExecutor is closed; create a new one")
        return self._threads.submit(self._run, request)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._threads.shutdown(wait=True)
        if self._owns_pool and self._pool is not None:
            self._pool.close()  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"LocalExecutor(parallelism={self._parallelism})"


# ---------------------------------------------------------------- Ray
# State of one Ray worker process: a warm sandbox pool of one worker (a Ray task holds one CPU) and
# its task instances. Ray reuses worker processes, so the pool stays warm across tasks.
_RAY_WORKER_POOL: SandboxRunner | None = None
_RAY_WORKER_TASKS = _TaskCache()
_RAY_WORKER_BY_KEY: dict[str, Task] = {}  # spec key -> task, for requests whose spec is in the object store


def _ray_worker_pool() -> SandboxRunner:
    global _RAY_WORKER_POOL
    if _RAY_WORKER_POOL is None:
        _RAY_WORKER_POOL = _new_pool(1)
        atexit.register(_RAY_WORKER_POOL.close)  # type: ignore[attr-defined]
    return _RAY_WORKER_POOL


def ray_evaluate(request: dict[str, Any]) -> dict[str, Any]:
    """Body of the Ray task: the same call as ``LocalExecutor``; plain data in and out (no pickled results)."""
    req = EvalRequest.from_dict(request)
    task = _RAY_WORKER_TASKS.get(req)
    return evaluate_with(task, req.source, seed=req.seed, executor=_ray_worker_pool(), options=req.options).to_dict()


def spec_key(spec: TaskSpec) -> str:
    """A task spec's identity as text (sorted JSON): equal specs build equal tasks."""
    return json.dumps(spec.to_dict(), sort_keys=True, default=str)


def ray_evaluate_keyed(key: str, spec_ref: list[Any], source: str, seed: int | None,
                       options: dict[str, Any]) -> dict[str, Any]:
    """Body of :class:`RayExecutor`'s task: the task of spec ``key`` is built once per worker process, from
    the spec the driver put once in Ray's object store (``spec_ref``: a one-item list, so Ray hands the
    reference over unresolved and it is fetched only on this worker's first request for the spec); then
    the same call as :func:`ray_evaluate`. Plain data in and out (no pickled results). A second reference in
    ``spec_ref`` is the task's shipment (:meth:`~reasearch.evaluators.base.Task.shipment`), received first."""
    return evaluate_with(_keyed_task(key, spec_ref), source, seed=seed, executor=_ray_worker_pool(),
                         options=options).to_dict()


def ray_evaluate_chunk(key: str, spec_ref: list[Any], items: list[tuple[str, int | None, dict[str, Any]]]
                       ) -> list[dict[str, Any]]:
    """Body of :meth:`RayExecutor.submit_all`'s task: several ``(source, seed, options)`` of one spec, one
    after another in this worker (one Ray task's scheduling for all of them); results in order."""
    task = _keyed_task(key, spec_ref)
    return [evaluate_with(task, source, seed=seed, executor=_ray_worker_pool(), options=options).to_dict()
            for source, seed, options in items]


def _keyed_task(key: str, spec_ref: list[Any]) -> Task:
    task = _RAY_WORKER_BY_KEY.get(key)
    if task is None:
        import ray

        spec = TaskSpec.from_dict(ray.get(spec_ref[0]))
        if len(spec_ref) > 1:  # what this node needs beside the spec (a task folder's content)
            task_class_of(spec).receive_shipment(ray.get(spec_ref[1]))
        task = _RAY_WORKER_BY_KEY[key] = make(spec)
    return task


MAX_CHUNK = 16  # requests in one Ray task of RayExecutor.submit_all


def _results_of(ray_future: Future[Any], n: int) -> list[Future[EvalResult]]:
    """``n`` futures of results read from one Ray task's answer (a dict, or a list of ``n`` dicts)."""
    outs: list[Future[EvalResult]] = [Future() for _ in range(n)]

    def done(f: Future[Any]) -> None:
        try:
            answer = f.result()
            data = [answer] if isinstance(answer, dict) else list(answer)
            if len(data) != n:
                raise ConfigError(f"a Ray task answered {len(data)} results for {n} requests")
            results = [EvalResult.from_dict(d) for d in data]
        except BaseException as exc:  # the task's error, or a result that does not parse: never a hang
            for out in outs:
                out.set_exception(exc)
        else:
            for out, result in zip(outs, results, strict=True):
                out.set_result(result)

    ray_future.add_done_callback(done)
    return outs


class RayExecutor(Executor):
    """Evaluations as Ray tasks (needs the ``ray`` extra).

    Connects to a running cluster (``address="auto"``, or ``RAY_ADDRESS``) and, when none is found,
    starts a local Ray with ``num_cpus`` CPUs. Each Ray task takes one CPU and runs the candidate in
    its node's warm sandbox pool. An experiment of a training task (a task with a ``slot``) on a cluster
    that has GPUs also takes one of Ray's GPUs (``num_gpus=1``; a ``slot="cpu"`` task takes none): Ray
    sets the task's ``CUDA_VISIBLE_DEVICES`` to the GPU it assigned, and the engine's lease takes exactly
    that device (still flock'ed, so processes outside Ray on the node never collide with it).

    Args:
        address: a Ray address; ``"auto"`` finds a running cluster; None always starts a local one.
        num_cpus: CPUs of a locally started Ray (default: all).
        num_gpus: GPUs of a locally started Ray (default: what Ray detects).
    """

    def __init__(self, address: str | None = "auto", *, num_cpus: int | None = None,
                 num_gpus: int | None = None) -> None:
        self._conn = connect_ray(address, num_cpus=num_cpus, num_gpus=num_gpus, user="RayExecutor")
        self._ray = ray = self._conn.ray
        self._remote = ray.remote(num_cpus=1, max_retries=0)(ray_evaluate_keyed)
        self._remote_chunk = ray.remote(num_cpus=1, max_retries=0)(ray_evaluate_chunk)
        self._tasks = _TaskCache()
        # Per spec (by object id: a run hands every request the same spec object): its key, its reference
        # in the object store and its Ray options, computed once; the spec is held so its id stays its own.
        self._specs: dict[int, tuple[TaskSpec, str, Any, bool]] = {}
        self._specs_lock = threading.Lock()
        self._closed = False

    @property
    def parallelism(self) -> int:
        return self._conn.cluster_cpus()

    def submit(self, request: EvalRequest) -> Future[EvalResult]:
        if self._closed:
            raise ConfigError("this RayExecutor is closed; create a new one")
        _, key, ref, may_gpu = self._spec_of(request)
        options = self.ray_options(request) if may_gpu else {}
        remote = self._remote.options(**options) if options else self._remote
        ray_future = remote.remote(key, ref, request.source, request.seed, dict(request.options)).future()
        return _results_of(ray_future, 1)[0]

    def submit_all(self, requests: Sequence[EvalRequest]) -> list[Future[EvalResult]]:
        """Starts many evaluations: the requests of a task that takes no GPU go in chunks, several to a Ray
        task (about four chunks per CPU of the cluster, at most :data:`MAX_CHUNK` requests each), so that
        Ray's scheduling cost is paid once per chunk; a chunk's failure fails each of its requests. The
        others as :meth:`submit`. One future per request, in order."""
        if self._closed:
            raise ConfigError("this RayExecutor is closed; create a new one")
        groups: dict[str, list[int]] = {}
        futures: list[Future[EvalResult] | None] = [None] * len(requests)
        specs: dict[str, tuple[Any, Any]] = {}
        for i, request in enumerate(requests):
            _, key, ref, may_gpu = self._spec_of(request)
            if may_gpu:
                futures[i] = self.submit(request)
            else:
                groups.setdefault(key, []).append(i)
                specs[key] = (ref, request)
        per_cpu = 4 * max(self.parallelism, 1) if groups else 1
        for key, index in groups.items():
            size = max(1, min(MAX_CHUNK, -(-len(index) // per_cpu)))
            for start in range(0, len(index), size):
                chunk = index[start:start + size]
                items = [(requests[i].source, requests[i].seed, dict(requests[i].options)) for i in chunk]
                ray_future = self._remote_chunk.remote(key, specs[key][0], items).future()
                for i, out in zip(chunk, _results_of(ray_future, len(chunk)), strict=True):
                    futures[i] = out
        return [f for f in futures if f is not None]

    @property
    def gpu_slots(self) -> int:
        """GPUs of the cluster: how many experiments of a training task can run at once on it."""
        return int(self._conn.cluster_gpus())

    def ray_options(self, request: EvalRequest) -> dict[str, Any]:
        """Ray resources of one request: ``{"num_gpus": 1}`` for an experiment of a training task that
        may use a GPU (``slot`` ``auto`` or ``gpu``) when the cluster has GPUs; nothing more otherwise
        (the cluster is asked only for such a task)."""
        return gpu_options(self._tasks.get(request), self._conn.cluster_gpus)

    def _spec_of(self, request: EvalRequest) -> tuple[TaskSpec, str, Any, bool]:
        """(spec, key, object-store references (the spec's, then the task's shipment's when it has one), whether
        it may take a GPU) of the request's spec, made once
        per spec: each request then carries only its source, seed and options. A task that may take a GPU
        asks the cluster at each request (its GPUs may change; an experiment is long)."""
        with self._specs_lock:
            known = self._specs.get(id(request.spec))
            if known is None or known[0] is not request.spec:
                key = spec_key(request.spec)
                same = next((k for k in self._specs.values() if k[1] == key), None)
                if same is not None:
                    ref = same[2]
                else:  # the spec, and what a node needs beside it (a task folder's content): once each
                    shipment = self._tasks.get(request).shipment()
                    ref = [self._ray.put(request.spec.to_dict()),
                           *([self._ray.put(dict(shipment))] if shipment is not None else [])]
                may_gpu = bool(gpu_options(self._tasks.get(request), 1.0))
                known = self._specs[id(request.spec)] = (request.spec, key, ref, may_gpu)
        return known

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._conn.close()

    def __repr__(self) -> str:
        return f"RayExecutor(parallelism={self.parallelism if not self._closed else 'closed'})"
