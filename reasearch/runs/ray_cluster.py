"""Ray in one place: joining or starting Ray, the GPU rule, and reaping what a local Ray leaves behind.

``RayExecutor`` (evaluations as Ray tasks, :mod:`reasearch.runs.executor`) and fleets (agent runs as
Ray tasks, :mod:`reasearch.fleets.fleet`) both go through :func:`connect_ray` and
:func:`gpu_options`, so they start Ray, ask for GPUs and clean up the same way:

- **start-up**: a process where Ray is already initialized (a caller's ``ray.init``, a test's shared
  cluster) is joined as it is and never shut down here; otherwise Ray is connected at ``address`` or,
  when asked (``"auto"`` finding no cluster, or no address at all), started as a new local instance
  (``address="local"``: never a stale cluster recorded under ``/tmp/ray`` by an earlier ``ray start``);
- **GPU rule**: a training task's unit of work (a task with ``slot`` ``auto`` or ``gpu``) on a cluster
  with GPUs takes one of Ray's GPUs (``num_gpus=1``); Ray then sets its ``CUDA_VISIBLE_DEVICES`` and the
  engine's lease takes exactly that device. Anything else takes no GPU;
- **orphan reaping**: Ray's workers are grandchildren of this process; when it is a child subreaper
  (the sandbox pool makes it one) they come back to it when Ray shuts down, and are reaped here, or they
  would stay zombies.

Trust boundary: none of its own. It talks to Ray with the caller's privileges; what runs inside Ray
tasks is sandboxed by the engine on each node, as everywhere else.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from reasearch.errors import ConfigError

__all__ = ["RayConnection", "connect_ray", "gpu_options", "import_ray", "reap_adopted"]

log = logging.getLogger(__name__)

# Slots of a training task that may run on a GPU (``cpu`` never takes one).
_GPU_SLOTS = ("auto", "gpu")


def import_ray(user: str) -> Any:
    """The ``ray`` module, or a one-line ConfigError naming ``user`` (what needs Ray) and the extra to install."""
    try:
        import ray
    except ImportError:
        raise ConfigError(f"{user} needs Ray: pip install 'reasearch[ray]'") from None
    return ray


def gpu_options(task: object, cluster_gpus: float | Callable[[], float]) -> dict[str, Any]:
    """Ray resources beyond the CPU for a unit of work on ``task``: ``{"num_gpus": 1}`` for a training
    task that may use a GPU (``slot`` ``auto`` or ``gpu``) on a cluster with GPUs; ``{}`` otherwise.
    ``cluster_gpus`` may be a callable (a query of the cluster): it is called only for such a task, so
    the many evaluations of a CPU task never ask the cluster."""
    from reasearch.evaluators.training import TrainingTask  # here: a CPU task's caller never loads training code

    if not isinstance(task, TrainingTask) or task.params.slot not in _GPU_SLOTS:
        return {}
    gpus = cluster_gpus() if callable(cluster_gpus) else cluster_gpus
    return {"num_gpus": 1} if gpus else {}


def _direct_children() -> set[int]:
    """Pids of this process's direct children."""
    from reasearch.engine import process_table

    me = os.getpid()
    return {pid for pid, row in process_table().items() if row[0] == me}


def reap_adopted(pids: set[int], *, wait_s: float) -> None:
    """Reaps those of ``pids`` that exit as children of this process (adopted as a subreaper); waits
    up to ``wait_s`` for the rest to exit or be reaped by their own parent. Nothing else is reaped,
    so no ``Popen`` of other code loses its exit status."""
    pending = set(pids)
    deadline = time.monotonic() + wait_s
    while pending and time.monotonic() < deadline:
        for pid in list(pending):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not (yet) our child: gone, or still under its own parent
                if not os.path.exists(f"/proc/{pid}"):
                    pending.discard(pid)
                continue
            if done:
                pending.discard(pid)
        time.sleep(0.01)
    if pending:
        log.warning(
            "%d Ray processes were still alive %.0f s after shutdown: %s", len(pending), wait_s, sorted(pending)
        )


class RayConnection:
    """This process's use of Ray for one executor or fleet: joined (Ray was already initialized, and
    stays so) or owned (initialized here, and shut down by :meth:`close`, its adopted workers reaped).

    Attributes:
        ray: the ``ray`` module.
        owned: whether :func:`connect_ray` initialized Ray (and :meth:`close` shuts it down).
    """

    def __init__(self, ray: Any, *, owned: bool, ray_children: set[int] | None = None) -> None:
        self.ray = ray
        self.owned = owned
        self._ray_children = set(ray_children or ())
        self._closed = False

    def cluster_gpus(self) -> float:
        """GPUs of the cluster (0 without any)."""
        return float(self.ray.cluster_resources().get("GPU", 0))

    def cluster_cpus(self) -> int:
        """CPUs of the cluster (at least 1)."""
        return max(int(self.ray.cluster_resources().get("CPU", 1)), 1)

    def alive_nodes(self) -> int:
        """Nodes of the cluster that are alive."""
        return sum(1 for n in self.ray.nodes() if n.get("Alive"))

    def alive_machines(self) -> int:
        """Machines (distinct node addresses) among the cluster's alive nodes: several nodes of one machine
        (a local test cluster) share its file system."""
        return len({n.get("NodeManagerAddress") for n in self.ray.nodes() if n.get("Alive")})

    def close(self) -> None:
        """Shuts Ray down if it was initialized here, and reaps its workers this process adopted (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if not self.owned:
            return
        # Ray's direct children (raylet, GCS) are its own to reap; their descendants (the workers) come
        # back to this process at shutdown when it is a child subreaper.
        from reasearch.engine import descendants_of, process_table

        table = process_table()
        adopted = {d for c in self._ray_children for d in descendants_of(c, table)}
        self.ray.shutdown()
        reap_adopted(adopted - self._ray_children, wait_s=10.0)


def connect_ray(address: str | None = "auto", *, fallback_to_local: bool = True, num_cpus: int | None = None,
                num_gpus: int | None = None, user: str = "this") -> RayConnection:
    """Joins Ray if this process already initialized it, else connects at ``address`` or starts a local Ray.

    Args:
        address: a Ray address (``"auto"`` finds a running cluster, also through ``RAY_ADDRESS``); None
            starts a new local instance.
        fallback_to_local: when no cluster answers at ``address``, start a local Ray instead of raising
            Ray's ConnectionError.
        num_cpus: CPUs of a locally started Ray (default: all).
        num_gpus: GPUs of a locally started Ray (default: what Ray detects).
        user: what needs Ray, for the message when it is not installed.
    """
    ray = import_ray(user)
    if ray.is_initialized():
        return RayConnection(ray, owned=False)
    before = _direct_children()
    started = False
    if address is not None:
        try:
            ray.init(address=address, log_to_driver=False)
            started = True
        except ConnectionError:
            if not fallback_to_local:
                raise
            log.info("no running Ray cluster at %r: starting a local Ray", address)
    if not started:
        # "local": a new instance, never a stale cluster recorded under /tmp/ray by an earlier `ray start`
        ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False, log_to_driver=False)
    return RayConnection(ray, owned=True, ray_children=_direct_children() - before)
