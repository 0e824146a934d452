"""Fleets: many agent runs at once (tasks x seeds x models), on one machine or a Ray cluster.

This module drives a fleet's members and reads their results; the spec and the records it drives with
(:class:`FleetSpec`, :class:`FleetMember`, :class:`MemberResult`, :class:`FleetReport`) are in
:mod:`reasearch.fleets.spec`, re-exported here.

A fleet is a :class:`FleetSpec` stored in the run store under a fleet id, and one agent run per
member (``<fleet id>-m000``, ``-m001``, ...), each an ordinary run of that store: ``reasearch runs``,
``show``, ``export`` and ``resume`` work on them. Members run in parallel:

- ``executor="local"``: threads of this process (one warm sandbox pool shared by every agent);
- ``executor="ray"``: one Ray task per member (Ray schedules them over the cluster's nodes; each
  node's process evaluates in its own sandbox pool). A member whose node dies is retried by Ray; the
  retry resumes the member's run from the store as its only driver (recorded steps replay without
  spending anything), so a lost node loses no work and spends nothing twice.

The store is the one place every member writes: a multi-node fleet needs PostgreSQL (a SQLite file
belongs to one machine). A fleet-wide cap (dollars, tokens) binds every member: each member's run
sees what the whole fleet has left (:meth:`reasearch.runs.Run.remaining`).

``resume_fleet`` finishes whatever a crash left: members never started start, unfinished and failed
ones resume, finished ones are only read. A member that raises (a bug, a reply nothing can read) ends
``failed`` with the exception as its run's reason; the other members go on.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from reasearch.agent.launch import open_agent, start_run
from reasearch.errors import ConfigError, RunNotFoundError, StoreError
from reasearch.evaluators.registry import is_folder_ref
from reasearch.evaluators.registry import spec as task_spec
from reasearch.evaluators.training import heldout_public_of
from reasearch.fleets._handover import RETRY_HANDOVER_S, wait_for_other_drivers
from reasearch.fleets.spec import FleetMember, FleetReport, FleetSpec, MemberResult, check_method, new_fleet_id
from reasearch.methods import open_method, start_method
from reasearch.models import build_model
from reasearch.runs import Run, RunState, Store, open_store
from reasearch.runs.fleet_link import FleetLink
from reasearch.runs.ray_cluster import connect_ray, gpu_options
from reasearch.runs.run import effective_state
from reasearch.runs.store import MAX_FLEET_ID_LEN, check_id

__all__ = ["FleetSpec", "FleetMember", "MemberResult", "FleetReport", "run_fleet", "resume_fleet", "fleet_report",
           "fleet_report_in", "check_method", "new_fleet_id", "run_member"]  # the records re-exported from .spec

_REASON_CHARS = 300  # of a failed member's exception message, kept in its run's reason


def _member_result(store: Store, member: FleetMember, run_id: str, node: str = "") -> MemberResult:
    try:
        rec = store.get_run(run_id, exact=True)
    except RunNotFoundError:  # reserved, not created yet (a store that failed raises on)
        return MemberResult(member, run_id, "pending", None, None, 0, {}, node=node)
    run = Run(store, rec)
    st = run.status()
    normalized = None
    if st.best_score is not None:
        normalized = run.task.spec.normalize(st.best_score)
    if not node:  # read from the store (a live table, `fleet show`): the host of the member's latest driver
        drivers = store.drivers(run_id)
        node = max(drivers, key=lambda d: d.started_at).host if drivers else ""
    return MemberResult(member, run_id, effective_state(store, rec).value, st.best_score, normalized,
                        st.evaluations, {u.value: v for u, v in st.used.items() if v}, rec.reason, node,
                        heldout_public_of(run.task))


def run_member(fleet_id: str, spec_data: Mapping[str, Any], member_data: Mapping[str, Any], store_url: str,
               run_dir: str, folders: Sequence[Mapping[str, Any]] | None = None, *,
               handover_s: float = 0.0) -> dict[str, Any]:
    """Runs (or resumes) one member to its end; what a local thread or a Ray task executes.

    Plain data in and out, so that it crosses process boundaries. A member already finished is only
    read; one recorded but unfinished (or failed: a resume retries it) is resumed by this process as its
    only driver. A member that raises ends ``failed`` with the exception as its reason (its run keeps
    what it recorded) and the others go on; one its model interrupted stays ``interrupted``. A recorded run
    another process still holds is waited for up to ``handover_s`` seconds before the takeover (a Ray retry:
    the worker of a node that died may not be gone yet, see :mod:`reasearch.fleets._handover`).
    """
    spec = FleetSpec.from_dict(spec_data)
    member = FleetMember(**member_data)
    node = os.uname().nodename
    if folders:  # the fleet's task folders, shipped by content (a node need not hold the path)
        from reasearch.evaluators.folder import unpack_folder

        for bundle in folders:
            unpack_folder(bundle)
    with open_store(store_url) as store:
        run_id = store.add_fleet_member(fleet_id, member.index, member.run_id(fleet_id))
        try:
            _drive_member(fleet_id, spec, member, store, run_id, run_dir, handover_s)
        except Exception as exc:  # this member's failure is its own: recorded, the fleet goes on
            try:
                return _record_failure(store, member, run_id, node, exc).to_dict()
            except StoreError as lost:  # a full disk (say) keeps the failure out of the store: resumable, said so
                reason = (f"{failure_reason(exc)}; the failure could not be recorded "
                          f"({printable_line(str(lost))[:300]}): the run is interrupted, "
                          f"`reasearch fleet resume {fleet_id}` continues it")
                try:
                    return replace(_member_result(store, member, run_id, node), reason=reason).to_dict()
                except StoreError:  # the store cannot even be read: what this process saw, nothing more
                    return MemberResult(member, run_id, RunState.INTERRUPTED.value, None, None, 0, {}, reason,
                                        node).to_dict()
        return _member_result(store, member, run_id, node).to_dict()


def _drive_member(fleet_id: str, spec: FleetSpec, member: FleetMember, store: Store, run_id: str,
                  run_dir: str, handover_s: float) -> None:
    try:
        rec = store.get_run(run_id, exact=True)
    except RunNotFoundError:  # only "no such run" starts one: a store that failed raises on (never a second create)
        rec = None
    if rec is not None and rec.state is RunState.FINISHED:
        return
    if rec is not None:  # resumed as its only driver: a driver that died with its node may still be exiting
        wait_for_other_drivers(store, run_id, handover_s)
    if not member.method.startswith("agent"):
        _run_method(fleet_id, spec, member, store, run_id, rec is None)
        return
    if rec is None:
        config = spec.agent_config(member.model, member.method)
        models = {role: build_model(s, seed=member.seed) for role, s in config.models.items()}
        agent = start_run(
            member.task_id,
            budget=spec.budget_of(member.task_id),
            config=config,
            run_dir=run_dir,
            store=store,
            task_params=dict(spec.task_params.get(member.task_id, {})),
            seed=member.seed,
            models=models,
            run_id=run_id,
            fleet=FleetLink(fleet_id, member.index, dict(spec.caps), member.trace, member.shared),
        )
    else:  # models rebuilt from the run's own config, advanced past the replies its journal holds
        agent = open_agent(run_id, run_dir=run_dir, store=store, takeover=True)
    try:
        agent.optimize()
    finally:
        agent.run.close()


def printable_line(text: str) -> str:
    """``text`` on one line, control characters escaped (``\\x1b``): a reason may quote a model's reply, and a
    terminal or log that shows it must not take it as commands."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in " ".join(text.split()))


def failure_reason(exc: BaseException) -> str:
    """One line naming what a member raised and where: ``crashed: Type: message (at file:line in function)``."""
    message = printable_line(str(exc))
    if len(message) > _REASON_CHARS:
        message = message[:_REASON_CHARS] + "..."
    frames = traceback.extract_tb(exc.__traceback__)  # frames only: nothing is formatted (nor parsed)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return f"crashed: {type(exc).__name__}" + (f": {message}" if message else "") + where


def _record_failure(store: Store, member: FleetMember, run_id: str, node: str, exc: BaseException) -> MemberResult:
    """Marks the member's run ``failed`` with ``exc`` as its reason (unless its loop already ended it
    ``interrupted``, a resumable model error); a member that failed before its run existed is reported only."""
    reason = failure_reason(exc)
    try:
        rec = store.get_run(run_id, exact=True)
    except RunNotFoundError:
        return MemberResult(member, run_id, RunState.FAILED.value, None, None, 0, {}, reason, node)
    if rec.state is RunState.RUNNING:
        store.set_run_state(run_id, RunState.FAILED, reason=reason)
    return _member_result(store, member, run_id, node)


def _run_method(fleet_id: str, spec: FleetSpec, member: FleetMember, store: Store, run_id: str, new: bool) -> None:
    """Runs (or resumes, as the only driver) a baseline method's member."""
    if new:
        runner = start_method(member.method, member.task_id, budget=spec.budget_of(member.task_id), store=store,
                              model_spec=spec.model_spec(member.model),
                              config=spec.method_configs.get(member.method),
                              task_params=dict(spec.task_params.get(member.task_id, {})), seed=member.seed,
                              run_id=run_id, fleet=FleetLink(fleet_id, member.index, dict(spec.caps)))
    else:
        runner = open_method(run_id, store=store, takeover=True)
    try:
        runner.optimize()
    finally:
        runner.run.close()


def _result_from(data: Mapping[str, Any]) -> MemberResult:
    keys = {f.name for f in fields(FleetMember)}
    member = FleetMember(**{k: data[k] for k in keys if k in data})
    return MemberResult(member, data["run_id"], data["state"], data["best_score"], data["normalized"],
                        data["evaluations"], data["used"], data.get("reason", ""), data.get("node", ""),
                        data.get("heldout_public"))


def _check_store_for_cluster(store_url: str, machines: int) -> None:
    """A SQLite store serves a cluster on one machine (its nodes share the file system), never one on several."""
    if machines > 1 and not store_url.startswith(("postgresql://", "postgres://")):
        raise ConfigError(f"this Ray cluster spans {machines} machines but the store is {store_url!r}: a SQLite file "
                          "belongs to one machine. Give the fleet a shared store: --store postgresql://USER@HOST/DB")


def _ray_member_task() -> Any:
    import ray

    # Ray retries a task whose worker or node died (system failures), not one that raised: a member
    # that fails on its own ends as a failed run, and its retry would fail the same way.
    return ray.remote(num_cpus=1, max_retries=3)(run_member)


def member_ray_options(task_id: str, task_params: Mapping[str, Any], cluster_gpus: float) -> dict[str, Any]:
    """Ray resources of a member beyond its CPU (:func:`reasearch.runs.ray_cluster.gpu_options`): one GPU
    for a training task on a cluster with GPUs. Ray sets the member's ``CUDA_VISIBLE_DEVICES`` to that GPU
    and its experiments lease exactly it (one at a time); other members never get it."""
    if not cluster_gpus:
        return {}
    from reasearch.evaluators.registry import build_task

    return gpu_options(build_task(task_id, dict(task_params)), cluster_gpus)


def run_fleet(spec: FleetSpec, *, store: str | Path, run_dir: str | Path = "runs", fleet_id: str | None = None,
              executor: str = "local", address: str | None = None,
              on_update: Callable[[list[MemberResult]], None] | None = None) -> FleetReport:
    """Runs every member of a fleet (or what is left of it) and returns the results table.

    Args:
        spec: what to run.
        store: the run store's URL or directory (PostgreSQL for a multi-node Ray cluster).
        run_dir: where members keep their workspaces.
        fleet_id: an explicit id (default: a new one); an existing id with the same spec continues it.
        executor: ``local`` (threads of this process) or ``ray``.
        address: Ray cluster address (``ray`` executor; default: a local Ray instance).
        on_update: called with every member's current result whenever one finishes.

    Raises:
        ConfigError: a bad spec, an unknown task id, SQLite for a multi-node cluster, an unknown executor, a
            fleet id that is not one safe path component (nothing is created).
    """
    if executor not in ("local", "ray"):
        raise ConfigError(f"executor must be 'local' or 'ray', not {executor!r}")
    if fleet_id is not None:  # it names its members' runs and folders: checked before anything is made
        check_id(fleet_id, "fleet id", max_len=MAX_FLEET_ID_LEN)
    for task_id in spec.tasks:
        task_spec(task_id, **dict(spec.task_params.get(task_id, {})))  # unknown ids fail before anything runs
    store_url = str(store)
    fleet_id = fleet_id or new_fleet_id()
    with open_store(store_url) as s:
        if not s.create_fleet(fleet_id, spec.to_dict()) and s.get_fleet(fleet_id) != json.loads(
                json.dumps(spec.to_dict())):
            raise ConfigError(f"fleet {fleet_id} exists with another spec; `reasearch fleet resume {fleet_id}` "
                              "continues it as recorded")
    return _drive(fleet_id, spec, store_url, str(run_dir), executor, address, on_update)


def resume_fleet(fleet_id: str, *, store: str | Path, run_dir: str | Path = "runs", executor: str = "local",
                 address: str | None = None,
                 on_update: Callable[[list[MemberResult]], None] | None = None) -> FleetReport:
    """Finishes a fleet as recorded: starts members never started, resumes unfinished and failed ones."""
    with open_store(str(store)) as s:
        spec = FleetSpec.from_dict(s.get_fleet(fleet_id))
    return _drive(fleet_id, spec, str(store), str(run_dir), executor, address, on_update)


def fleet_report(fleet_id: str, *, store: str | Path) -> FleetReport:
    """The fleet's results as stored now (members not started show ``pending``)."""
    with open_store(str(store)) as s:
        return fleet_report_in(s, fleet_id)


def fleet_report_in(store: Store, fleet_id: str) -> FleetReport:
    """:func:`fleet_report` from a store already open (the dashboard's)."""
    spec = FleetSpec.from_dict(store.get_fleet(fleet_id))
    runs = store.fleet_members(fleet_id)
    return FleetReport(fleet_id, tuple(_member_result(store, m, runs.get(m.index, m.run_id(fleet_id)))
                                       for m in spec.members()))


def _drive(fleet_id: str, spec: FleetSpec, store_url: str, run_dir: str, executor: str, address: str | None,
           on_update: Callable[[list[MemberResult]], None] | None) -> FleetReport:
    t0 = time.monotonic()
    members = spec.members()
    spec_data = spec.to_dict()
    results: dict[int, MemberResult] = {}
    with open_store(store_url) as s:
        for m in members:
            results[m.index] = _member_result(s, m, m.run_id(fleet_id))
    todo = [m for m in members if results[m.index].state != "finished"]  # a resume retries failed members too

    def update(data: Mapping[str, Any]) -> None:
        r = _result_from(data)
        results[r.member.index] = r
        if on_update is not None:
            on_update([results[m.index] for m in members])

    if on_update is not None:
        on_update([results[m.index] for m in members])
    if executor == "local":
        with cf.ThreadPoolExecutor(max_workers=spec.parallelism, thread_name_prefix="fleet") as pool:
            futures = {pool.submit(run_member, fleet_id, spec_data, m.to_dict(), store_url, run_dir): m for m in todo}
            for fut in cf.as_completed(futures):
                try:
                    data = fut.result()
                except Exception as exc:  # raised outside the member's own guard (opening the store): still its own
                    data = _crash_data(futures[fut], fleet_id, exc)
                update(data)
    else:
        _drive_ray(fleet_id, spec, spec_data, todo, store_url, run_dir, address, update)
    with open_store(store_url) as s:  # the final word is the store's (a failure before any run existed: ours)
        final = tuple(_final_result(s, m, fleet_id, results[m.index]) for m in members)
    return FleetReport(fleet_id, final, time.monotonic() - t0)


def _crash_data(member: FleetMember, fleet_id: str, exc: BaseException) -> dict[str, Any]:
    return MemberResult(member, member.run_id(fleet_id), RunState.FAILED.value, None, None, 0, {},
                        failure_reason(exc)).to_dict()


def _final_result(store: Store, member: FleetMember, fleet_id: str, seen: MemberResult) -> MemberResult:
    now = _member_result(store, member, member.run_id(fleet_id), seen.node)
    if now.state == seen.state == RunState.INTERRUPTED.value and "could not be recorded" in seen.reason:
        return seen  # why it is interrupted is known only here (the store could not be told)
    ended = (RunState.FAILED.value, RunState.INTERRUPTED.value)  # before its run existed, or its store failed
    return seen if now.state == "pending" and seen.state in ended else now


def _drive_ray(fleet_id: str, spec: FleetSpec, spec_data: Mapping[str, Any], todo: list[FleetMember], store_url: str,
               run_dir: str, address: str | None, update: Callable[[Mapping[str, Any]], None]) -> None:
    # No address: a new local instance, shut down (its workers reaped) when the fleet is done; a Ray this
    # process had already initialized is used as it is.
    conn = connect_ray(address or None, fallback_to_local=False, user="the ray executor")
    ray = conn.ray
    try:
        _check_store_for_cluster(store_url, conn.alive_machines())
        task = _ray_member_task()
        cluster_gpus = conn.cluster_gpus()
        # Each task folder's content goes once into Ray's object store; a member's node gets it by reference.
        from reasearch.evaluators.folder import pack_folder

        bundles = [pack_folder(t) for t in dict.fromkeys(spec.tasks) if is_folder_ref(t)]
        folders = ray.put(bundles) if bundles else None
        waiting = list(todo)
        running: dict[Any, FleetMember] = {}
        while waiting or running:
            while waiting and len(running) < spec.parallelism:
                m = waiting.pop(0)
                options = member_ray_options(m.task_id, dict(spec.task_params.get(m.task_id, {})), cluster_gpus)
                running[task.options(**options).remote(fleet_id, spec_data, m.to_dict(), store_url, run_dir,
                                                       folders, handover_s=RETRY_HANDOVER_S)] = m
            done, _ = ray.wait(list(running), num_returns=1)
            for ref in done:
                m = running.pop(ref)
                try:
                    data = ray.get(ref)
                except Exception as exc:  # Ray gave up on it (its node died more often than retried): its own
                    data = _crash_data(m, fleet_id, exc)
                update(data)
    finally:
        conn.close()
