"""Ray against this machine's own ways, in one run: evaluations per second, and whole fleets.

* **Executors**: trivial evaluations (a ToyTask, a few ms each) on the local warm pool (``LocalExecutor``,
  two workers: the reference) and on a ``RayExecutor`` over a local Ray of the same CPUs, one request a
  Ray task (``submit``) and in chunks (``submit_all``, what ``map`` uses). The ratio is Ray's rate over
  the local pool's (1.0: equal).
* **Fleets**: N small program-task members (the agent with the demo model on ``circle_packing/n26-v1``)
  run one after another in this process (the reference), then as a Ray fleet on one machine (a local
  Ray of the bench's CPUs) and on a local two-node cluster (two nodes of one CPU each, on this machine).
  Each Ray fleet first runs an untimed round so its worker processes and their sandbox pools are warm, as
  the reference's process is after its first member. The speed-up is the reference's wall time over the
  fleet's. The scheduler's overhead per member is the same Ray fleet run one member at a time less the
  reference, over N (Ray's scheduling, the member's process, its own store connection and pool, with no
  member contending for the CPUs); the time per member beyond a perfect split, ``(fleet - reference /
  CPUs) / N``, adds what members running at once lose to each other and to the machine's other load.
* **The bound**: the members one after another already keep more than one CPU busy (the sandbox's
  teardown of each child and its fork of the next run beside the caller, the store's writer, ...): the
  machine's busy CPUs over the reference (``/proc/stat``, every process, so other load counts too) say
  how much a fleet on ``CPUS`` CPUs can gain at most (``CPUS / busy``, N at most), and each fleet's
  speed-up is also given as a share of that bound.

The machine may be shared: figures are one run each, so read them with the load average the notes give.
Trust boundary: the project's own code and the demo model; candidates run only in the sandbox.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from reasearch._bench import BenchRow, busy_cpus, cpu_ticks

__all__ = ["executor_rates", "fleet_seconds", "run"]

TASK = "circle_packing/n26-v1"
CPUS = 2
GOAL_SPEEDUP = 1.8  # a fleet on 2 CPUs against its members one after another
GOAL_RATE = 0.9  # Ray's evaluations per second over the local pool's: equal, within the noise of one run


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} CPUs"


def executor_rates(n: int) -> dict[str, float]:
    """Evaluations per second of ``n`` trivial requests: ``local``, ``ray_each`` (``submit``) and
    ``ray_chunked`` (``submit_all``); Ray must be initialized by the caller (CPUS CPUs)."""
    from reasearch.engine import SandboxConfig, SandboxPool
    from reasearch.evaluators.testing import ToyTask, toy_candidate
    from reasearch.runs.executor import EvalRequest, Executor, LocalExecutor, RayExecutor

    task = ToyTask(dim=2)
    requests = [EvalRequest(task.spec, toy_candidate([0.001 * i, 1.0]), seed=0) for i in range(n)]

    def rate(executor: Executor, chunked: bool) -> float:
        for f in executor.submit_all(requests[: 4 * CPUS]):  # warm: workers started, task built
            f.result()
        t0 = time.perf_counter()
        futures = executor.submit_all(requests) if chunked else [executor.submit(r) for r in requests]
        results = [f.result() for f in futures]
        elapsed = time.perf_counter() - t0
        if not all(r.ok for r in results):
            raise RuntimeError(f"a trivial evaluation failed: {next(r for r in results if not r.ok).feedback[-300:]}")
        return n / elapsed

    out: dict[str, float] = {}
    with SandboxPool(SandboxConfig(workers=CPUS)) as pool, LocalExecutor(CPUS, pool=pool) as local:
        out["local"] = rate(local, False)
    with RayExecutor(num_cpus=CPUS) as ray_executor:
        out["ray_each"] = rate(ray_executor, False)
        out["ray_chunked"] = rate(ray_executor, True)
    return out


def _spec(members: int, evaluations: int, parallelism: int) -> Any:
    from reasearch.fleets.fleet import FleetSpec

    return FleetSpec(tasks=(TASK,), seeds=tuple(range(members)), models=("demo",),
                     budget={"evaluations": evaluations}, parallelism=parallelism)


def fleet_seconds(members: int, evaluations: int, executor: str, workdir: Path) -> float:
    """Wall seconds of a fleet of ``members`` (``executor`` ``sequential``: one after another in this
    process; ``ray``: on the Ray this process has initialized, as many at once as it has CPUs; ``ray1``:
    on that Ray, one at a time)."""
    from reasearch.fleets.fleet import run_fleet

    spec = _spec(members, evaluations, CPUS if executor == "ray" else 1)
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    report = run_fleet(spec, store=workdir / "runs", run_dir=workdir / "runs",
                       executor="local" if executor == "sequential" else "ray")
    elapsed = time.perf_counter() - t0
    failed = [m for m in report.members if m.state != "finished"]
    if failed:
        raise RuntimeError(f"{len(failed)} fleet members did not finish: {failed[0].state} {failed[0].reason}")
    return elapsed


def bound(members: int, reference_busy: float | None) -> float | None:
    """The most a fleet of ``members`` on :data:`CPUS` CPUs can gain over its members one after another that
    kept ``reference_busy`` CPUs busy: ``CPUS / reference_busy``, at most ``members`` and ``CPUS``."""
    if reference_busy is None or reference_busy <= 0:
        return None
    return min(float(members), float(CPUS), CPUS / reference_busy)


def _bound_rows(members: int, reference_busy: float | None) -> list[BenchRow]:
    top = bound(members, reference_busy)
    if reference_busy is None or top is None:
        return []
    return [
        BenchRow("fleet", "reference: CPUs kept busy, members one after another", reference_busy, "CPUs",
                 note="the machine's busy CPUs over the reference (/proc/stat: every process, other load too); "
                 "the sandbox's teardown and next fork run beside the caller"),
        BenchRow("fleet", f"the most a fleet on {CPUS} CPUs can gain over it", top, "x",
                 goal=f">= {GOAL_SPEEDUP:g}x possible", met=top >= GOAL_SPEEDUP,
                 note=f"{CPUS} / the CPUs the reference kept busy (at most {members} members, {CPUS} CPUs): the "
                 f"{GOAL_SPEEDUP:g}x goal needs members that keep at most {CPUS / GOAL_SPEEDUP:.2f} CPUs busy"),
    ]


def _fleet_rows(name: str, members: int, seconds: float, reference: float, one_at_a_time: float, note: str,
                top: float | None = None) -> list[BenchRow]:
    speedup = reference / seconds
    share = [] if top is None else [
        BenchRow("fleet", f"{name}: speed-up as a share of the most {CPUS} CPUs allow", speedup / top, "of bound",
                 note=f"{speedup:.2f}x of at most {top:.2f}x (the bound above)")]
    return share + [
        BenchRow("fleet", f"{name}: {members} members, wall time", seconds, "s", reference="one after another",
                 reference_value=reference, ratio=speedup, goal=f">= {GOAL_SPEEDUP:g}x", met=speedup >= GOAL_SPEEDUP,
                 note=note),
        BenchRow("fleet", f"{name}: scheduler overhead per member", (one_at_a_time - reference) / members * 1e3,
                 "ms", note=f"(the Ray fleet run one member at a time - the reference) / {members}: Ray's "
                 "scheduling, the member's process, store connection and pool, without CPU contention"),
        BenchRow("fleet", f"{name}: time per member beyond a perfect {CPUS}-way split",
                 (seconds - reference / CPUS) / members * 1e3, "ms",
                 note=f"(fleet - reference / {CPUS}) / {members}: the overhead above plus contention for the CPUs"),
    ]


def run(quick: bool) -> list[BenchRow]:
    import importlib.util

    from reasearch._bench import MissingExtra
    from reasearch.runs.ray_cluster import import_ray

    if importlib.util.find_spec("ray") is None:
        raise MissingExtra("the fleet bench needs Ray: pip install 'reasearch[ray]'")
    ray = import_ray("the fleet bench")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if ray.is_initialized():
        raise RuntimeError("the fleet bench starts its own Ray; this process has one initialized already")
    members, evaluations, n = (4, 10, 200) if quick else (4, 40, 1000)
    rows: list[BenchRow] = []
    with tempfile.TemporaryDirectory(prefix="reasearch-bench-fleet-", dir="/var/tmp") as tmp:
        root = Path(tmp)
        root.chmod(0o711)
        fleet_seconds(1, 2, "sequential", root / "warm-up")  # imports and this process's pool, untimed
        before = cpu_ticks()
        reference = fleet_seconds(members, evaluations, "sequential", root / "sequential")
        reference_busy = busy_cpus(before, cpu_ticks())
        top = bound(members, reference_busy)
        rows += _bound_rows(members, reference_busy)
        load_ref = _load()
        ray.init(address="local", num_cpus=CPUS, include_dashboard=False, log_to_driver=False)
        try:
            rates = executor_rates(n)
            load = _load()
            for key, label in (("ray_chunked", "submit_all, chunks"), ("ray_each", "submit, one Ray task each")):
                ratio = rates[key] / rates["local"]
                rows.append(BenchRow("fleet", f"RayExecutor evaluations/s ({label})", rates[key], "1/s",
                                     reference=f"local pool, {CPUS} workers", reference_value=rates["local"],
                                     ratio=ratio, goal=f">= {GOAL_RATE:g}x", met=ratio >= GOAL_RATE,
                                     note=f"{n} trivial ToyTask evaluations, local Ray of {CPUS} CPUs; {load}"))
            fleet_seconds(CPUS, 2, "ray", root / "ray-warm-up")
            one = fleet_seconds(members, evaluations, "ray1", root / "ray1")
            seconds = fleet_seconds(members, evaluations, "ray", root / "ray")
            rows += _fleet_rows("Ray fleet, one machine", members, seconds, reference, one,
                                f"agent + demo model, {evaluations} evaluations each; local Ray of {CPUS} CPUs; "
                                f"reference at {load_ref}; fleet at {_load()}", top)
        finally:
            ray.shutdown()
        from ray.cluster_utils import Cluster

        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        try:
            cluster.add_node(num_cpus=1)
            ray.init(address=cluster.address, log_to_driver=False)
            try:
                fleet_seconds(CPUS, 2, "ray", root / "cluster-warm-up")
                one = fleet_seconds(members, evaluations, "ray1", root / "cluster1")
                seconds = fleet_seconds(members, evaluations, "ray", root / "cluster")
            finally:
                ray.shutdown()
            rows += _fleet_rows("Ray fleet, two-node cluster", members, seconds, reference, one,
                                f"two local nodes of 1 CPU each (one machine, one SQLite store); {_load()}", top)
        finally:
            cluster.shutdown()
    return rows

