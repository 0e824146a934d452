"""Fleets: tasks x seeds x models as agent runs in one store, locally or on Ray (one and two nodes).

Scripted models (script files, so Ray workers load them too) make every run deterministic, so
local and Ray fleets must give identical per-run results, and a fleet that lost a node must end
exactly as one that did not, with ledgers equal to the distinct work done.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import children, reap_orphans

from reasearch.cli import main
from reasearch.errors import ConfigError
from reasearch.evaluators import make
from reasearch.evaluators.result import Status
from reasearch.fleets.fleet import FleetSpec, fleet_report, resume_fleet, run_fleet, run_member
from reasearch.models.testing import call, say
from reasearch.runs import RunState, Unit, open_store
from tests.pg_helpers import IN_CI, PG_URL, pg_schema

TASK = "circle_packing/n26-v1"

# A valid packing of 26 circles (the seed's grid, radius 1/12): its score is the seed's.
_SLOW = '''import time
import numpy as np


def run():
    time.sleep({sleep})
    k = np.arange(36)[:26]
    centers = np.stack([(k % 6 + 0.5) / 6, (k // 6 + 0.5) / 6], axis=1)
    return centers, np.full(26, {radius})
'''


def _script(path: Path, *, sleep: float = 0.0) -> Path:
    """evaluate the seed, evaluate a (slower) smaller packing, finish with the best."""
    replies = [
        say("Baseline.", call("evaluate")),
        say("A variant.", call("evaluate", code=_SLOW.format(sleep=sleep, radius=1 / 13))),
        say("Done.", call("finish", reason="the best scored packing")),
    ]
    path.write_text(json.dumps([r.to_dict() for r in replies]))
    return path


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """Under /var/tmp: the sandbox uid must reach the workspaces."""
    d = Path(tempfile.mkdtemp(prefix="reasearch-fleet-", dir="/var/tmp"))
    d.chmod(0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _spec(script: Path, seeds: tuple[int, ...] = (0, 1), **kw: Any) -> FleetSpec:
    return FleetSpec(tasks=(TASK,), seeds=seeds, models=(f"scripted/{script}",), budget={"evaluations": 5},
                     agent={"sandbox_mode": "process"}, **kw)


def _per_run(report: Any) -> list[tuple[Any, ...]]:
    return [(r.member.index, r.member.seed, r.state, r.best_score, r.evaluations, r.used.get("evaluations"))
            for r in report.members]


def test_fleet_spec_rejects_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown fleet spec keys"):
        FleetSpec.from_dict({"tasks": [TASK], "seed": [1]})
    with pytest.raises(ConfigError, match="non-empty list"):
        FleetSpec(tasks=TASK)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown budget unit"):
        FleetSpec(tasks=(TASK,), budget={"evaluationz": 3})
    with pytest.raises(ConfigError, match="model spending"):
        FleetSpec(tasks=(TASK,), caps={"evaluations": 3})
    with pytest.raises(ConfigError):
        FleetSpec(tasks=(TASK,), agent={"max_turnz": 3})
    bad = tmp_path / "f.toml"
    bad.write_text("tasks = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        FleetSpec.from_file(bad)
    with pytest.raises(Exception, match="unknown task id"):
        run_fleet(FleetSpec(tasks=("circle_packing/n99-v1",)), store=tmp_path / "s")
    assert not (tmp_path / "s").exists()  # nothing was created for a fleet that could not run


def test_sqlite_is_refused_for_a_multi_node_cluster() -> None:
    from reasearch.fleets.fleet import _check_store_for_cluster

    with pytest.raises(ConfigError, match="SQLite file belongs to one machine"):
        _check_store_for_cluster("/var/tmp/runs", machines=2)
    _check_store_for_cluster("/var/tmp/runs", machines=1)
    _check_store_for_cluster("postgresql://u@h/db", machines=3)


def test_local_fleet_runs_every_member_and_resume_is_a_no_op(run_dir: Path) -> None:
    script = _script(run_dir / "script.json")
    spec = _spec(script, parallelism=2)
    report = run_fleet(spec, store=run_dir, run_dir=run_dir, fleet_id="f-local")
    seed_score = make(TASK).spec.seed_score
    assert [(r.member.index, r.member.seed) for r in report.members] == [(0, 0), (1, 1)]
    for r in report.members:
        assert r.state == "finished" and r.best_score == pytest.approx(seed_score)
        assert r.evaluations == 2 and r.used["evaluations"] == 2  # each run paid its own two evaluations
    groups = report.groups()
    assert len(groups) == 1 and groups[0]["runs"] == 2 and groups[0]["std"] == 0.0
    with open_store(run_dir) as store:
        assert store.fleet_members("f-local") == {0: "f-local-m000", 1: "f-local-m001"}
        ledgers = {rid: store.usage(rid) for rid in store.fleet_members("f-local").values()}
    again = resume_fleet("f-local", store=run_dir, run_dir=run_dir)  # everything finished: nothing runs
    assert _per_run(again) == _per_run(report)
    with open_store(run_dir) as store:
        assert {rid: store.usage(rid) for rid in ledgers} == ledgers


def test_fleet_wide_dollar_cap_binds_every_member(run_dir: Path) -> None:
    """Priced scripted replies spend dollars (~$0.006 a call, mostly the prompt): each call reserves its
    worst case against the fleet's cap before it is made, its reply limit lowered to what is left, so a
    fleet cap of $0.01 lets the fleet pay about one call and stops every member once the prompt alone
    no longer fits, although each run's own cap ($100) is far from spent; the fleet never pays past it."""
    script = _script(run_dir / "script.json")
    spec = FleetSpec(tasks=(TASK,), seeds=(0, 1, 2), models=(f"scripted/{script}",),
                     budget={"evaluations": 5, "dollars": 100.0}, caps={"dollars": 0.01}, parallelism=1,
                     agent={"sandbox_mode": "process"}, price_in=3.0, price_out=15.0)
    report = run_fleet(spec, store=run_dir, run_dir=run_dir, fleet_id="f-cap")
    spent = [r.used.get("dollars", 0.0) for r in report.members]
    assert sum(1 for d in spent if d > 0) <= 1 and all(r.evaluations == 0 for r in report.members[1:])
    assert all("dollars budget is spent" in r.reason for r in report.members)
    with open_store(run_dir) as store:
        assert store.fleet_usage("f-cap").get(Unit.DOLLARS, 0.0) == pytest.approx(sum(spent))
        assert sum(spent) <= 0.01


@pytest.mark.ray
def test_local_and_ray_fleets_give_identical_results(run_dir: Path, local_ray: Any) -> None:
    script = _script(run_dir / "script.json")
    spec = _spec(script, seeds=(0, 1, 2), parallelism=2)
    local = run_fleet(spec, store=run_dir / "local", run_dir=run_dir / "local", fleet_id="f")
    # the session's 2-CPU Ray node (local_ray: the job's processes must all be gone after the test)
    remote = run_fleet(spec, store=run_dir / "ray", run_dir=run_dir / "ray", fleet_id="f", executor="ray")
    assert _per_run(remote) == _per_run(local)
    assert all(r.state == "finished" for r in remote.members)
    import socket  # the node column is filled on Ray: live, at the end and read back by `fleet show`

    shown = fleet_report("f", store=run_dir / "ray")
    assert [r.node for r in remote.members] == [r.node for r in shown.members] == [socket.gethostname()] * 3


@pytest.fixture
def pg_url() -> Iterator[str]:
    if not PG_URL and not IN_CI:
        pytest.skip("no PostgreSQL here (REASEARCH_TEST_POSTGRES_URL); CI runs this test")
    yield from pg_schema("f")


@pytest.mark.ray
@pytest.mark.postgres
def test_two_node_cluster_loses_a_node_mid_fleet_and_loses_nothing(run_dir: Path, ray_node: Any, pg_url: str) -> None:
    """The session's cluster (a head that takes no work, a node of 2 CPUs) and a node of this test's own (separate
    raylet processes, 1 CPU): that node dies (its raylet killed) while a member runs on it (four members, three at
    once: one must)."""
    from reasearch.engine import descendants_of, process_table
    from reasearch.engine._procs import set_child_subreaper
    from tests.conftest import ray_driver

    # As in the whole suite (a test before used a sandbox pool), the dead node's workers come back to this process
    # and stay zombies until reaped: its retried member must take over all the same (the CI failure).
    assert set_child_subreaper()
    script = _script(run_dir / "script.json", sleep=2.0)
    spec = _spec(script, seeds=(0, 1, 2, 3), parallelism=4)
    known = set(children())
    killed = threading.Event()
    with ray_node.extra_node(num_cpus=1) as lost, ray_driver(ray_node):
        raylet = lost.all_processes["raylet"][0].process.pid

        def kill_the_node_when_a_member_runs_there() -> None:
            deadline = time.monotonic() + 120
            with open_store(pg_url) as store:
                while time.monotonic() < deadline:
                    on_it = set(descendants_of(raylet, process_table()))
                    busy = [rid for rid in store.fleet_members("f2").values()
                            if any(not d.stopped and d.pid in on_it for d in store.drivers(rid))]
                    if any(store.evaluations(rid) for rid in busy):
                        ray_node.remove_node(lost)  # kills that node's raylet and its workers
                        killed.set()
                        return
                    time.sleep(0.05)

        killer = threading.Thread(target=kill_the_node_when_a_member_runs_there, daemon=True)
        killer.start()
        try:
            report = run_fleet(spec, store=pg_url, run_dir=run_dir, fleet_id="f2", executor="ray")
        finally:
            killer.join(timeout=5)
    reap_orphans(known)  # the dead node's workers and jails included: nothing may outlive the fleet
    assert killed.is_set(), "the second node was never killed while members ran"
    seed_score = make(TASK).spec.seed_score
    assert [r.state for r in report.members] == ["finished"] * 4, [(r.state, r.reason) for r in report.members]
    assert all(r.best_score == pytest.approx(seed_score) for r in report.members)
    with open_store(pg_url) as store:
        retried = 0
        for r in report.members:
            evals = store.evaluations(r.run_id)
            assert [e.step for e in evals] == sorted({e.step for e in evals})  # each step once
            assert all(e.result.status is Status.OK for e in evals)
            ledger = [e for e in store.ledger(r.run_id) if e.unit is Unit.EVALUATIONS]
            in_flight = [e for e in ledger if e.note.startswith("charged at reservation")]  # issue 40 item 3
            paid = sum(e.amount for e in ledger if e not in in_flight)
            detail = ([(e.step, e.candidate_id[:8], e.result.cached) for e in evals],
                      [(ev.step, ev.kind) for ev in store.events(r.run_id)], [(e.step, e.note) for e in in_flight])
            assert paid == len(evals) == 2, detail  # no double spend: the ledger equals the distinct work
            # an evaluation in flight on the lost node is charged once, at its reservation (the sandbox may have
            # run it), and only where the member was resumed elsewhere
            assert sum(e.amount for e in in_flight) <= 1 and (not in_flight or len(store.drivers(r.run_id)) > 1), detail
            assert store.reserved(r.run_id) == {}
            assert store.get_run(r.run_id).state is RunState.FINISHED
            retried += len(store.drivers(r.run_id)) > 1
        assert retried >= 1  # at least one member was resumed on the surviving node


_DRIVE_MEMBER = """import json, sys
from reasearch.fleets.fleet import run_member
run_member(*json.loads(sys.argv[1]))
"""


def test_a_retried_member_waits_for_the_driver_of_its_dead_node_then_takes_over(run_dir: Path) -> None:
    """A Ray retry of a member can start while the worker of the node that died still exists (a node whose raylet
    is killed leaves its workers running until they notice), and once that worker exited it can linger as a
    zombie: the retry must neither cut in beside it (two drivers) nor end the member ``failed`` (the takeover
    refuses a run a live process holds), but wait for it to exit and then resume the run. Here that worker is a
    process driving the member, killed 2 s into the retry while its second evaluation (8 s) is in flight."""
    import signal
    import subprocess
    import sys

    from reasearch.engine import descendants_of

    script = _script(run_dir / "script.json", sleep=8.0)
    spec = _spec(script, seeds=(0,))
    member = spec.members()[0]
    args = ["ho", spec.to_dict(), member.to_dict(), str(run_dir), str(run_dir)]
    run_id = member.run_id("ho")
    with open_store(run_dir) as store:
        store.create_fleet("ho", spec.to_dict())
    first = subprocess.Popen([sys.executable, "-c", _DRIVE_MEMBER, json.dumps(args)], start_new_session=True)
    tree = {first.pid}
    try:
        with open_store(run_dir) as store:
            deadline = time.monotonic() + 120
            while not (store.fleet_members("ho") and store.evaluations(run_id) and store.reserved(run_id)):
                assert first.poll() is None and time.monotonic() < deadline, "the first driver never got that far"
                time.sleep(0.05)
        tree |= set(descendants_of(first.pid))
        # a retry that may not wait fails the member rather than drive it beside the live process
        refused = run_member(*args, handover_s=0.5)
        assert refused["state"] == "failed" and f"driven by a live process (pid {first.pid}" in refused["reason"]
        with open_store(run_dir) as store:
            assert len(store.drivers(run_id)) == 1  # it never drove the run
        # it exits 2 s into the retry and is not reaped (a zombie until `first.wait()` below): so a dead Ray node's
        # worker stays below a child subreaper, the test process once a test before used a sandbox pool
        threading.Timer(2.0, os.killpg, (first.pid, signal.SIGKILL)).start()
        retried = run_member(*args, handover_s=60.0)
    finally:
        try:
            os.killpg(first.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        first.wait()
        reap_orphans(set(children()) - tree)  # what the killed driver started came back here: all must end
    assert retried["state"] == "finished", retried["reason"]
    assert retried["best_score"] == pytest.approx(make(TASK).spec.seed_score)
    with open_store(run_dir) as store:
        evals = store.evaluations(run_id)
        assert [e.step for e in evals] == sorted({e.step for e in evals}) and len(evals) == 2  # each step once
        drivers = store.drivers(run_id)
        assert len(drivers) == 2 and all(d.stopped or d.pid == first.pid for d in drivers)
        assert store.get_run(run_id).state is RunState.FINISHED


def test_fleet_cli_run_show_resume_list(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = _script(run_dir / "script.json")
    spec_file = run_dir / "fleet.toml"
    spec_file.write_text(f'tasks = ["{TASK}"]\nseeds = [0, 1]\nmodels = ["scripted/{script}"]\n'
                         f'budget = {{evaluations = 5}}\nparallelism = 2\nagent = {{sandbox_mode = "process"}}\n')
    store = str(run_dir / "store")
    assert main(["fleet", "run", "--spec", str(spec_file), "--id", "fcli", "--store", store, "--run-dir",
                 str(run_dir), "--json", "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [m["state"] for m in data["members"]] == ["finished", "finished"] and data["groups"][0]["runs"] == 2
    assert main(["fleet", "show", "fcli", "--store", store, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [m["run_id"] for m in shown["members"]] == ["fcli-m000", "fcli-m001"]
    assert main(["fleet", "resume", "fcli", "--store", store, "--run-dir", str(run_dir), "--quiet", "--json"]) == 0
    assert [m["state"] for m in json.loads(capsys.readouterr().out)["members"]] == ["finished", "finished"]
    assert main(["fleet", "list", "--store", store]) == 0
    assert "fcli" in capsys.readouterr().out
    assert main(["fleet", "run", "--task", TASK, "--executor", "mpi", "--store", store]) == 2
    assert main(["fleet", "show", "nope", "--store", store]) == 2
    assert main(["fleet", "show", "fcli", "--store", str(run_dir / "missing")]) == 2
    assert fleet_report("fcli", store=store).members[0].state == "finished"


_GOOD = '''import numpy as np
from reasearch.native.lp import optimal_radii

ROWS = (5, 5, 6, 5, 5)


def run():
    pts = [((c + 0.5) / n, (r + 0.5) / len(ROWS)) for r, n in enumerate(ROWS) for c in range(n)]
    centers = np.array(pts)
    return centers, optimal_radii(centers)
'''


def _trace_script(path: Path) -> Path:
    """adopt what another trace found, evaluate candidate.py, write lessons, evaluate a good packing, finish."""
    replies = [
        say("Anything better from the other traces?", call("adopt_best")),
        say("Score what candidate.py holds now.", call("evaluate")),
        say("", call("write_file", path="lessons.md", content="staggered rows 5,5,6,5,5 with LP radii: 2.5\n")),
        say("", call("evaluate", code=_GOOD)),
        say("Done.", call("finish", reason="best")),
    ]
    path.write_text(json.dumps([r.to_dict() for r in replies]))
    return path


@pytest.mark.parametrize("share", [True, False])
def test_multi_trace_fleet_shares_lessons_and_best_candidates(run_dir: Path, share: bool) -> None:
    """Trace 1 starts after trace 0 ended: shared, it sees trace 0's lessons (attributed) and adopts its best,
    so its first evaluation already scores 2.5; independent, it starts from the seed like trace 0 did."""
    script = _trace_script(run_dir / "script.json")
    spec = FleetSpec(tasks=(TASK,), seeds=(0,), models=(f"scripted/{script}",), budget={"evaluations": 5},
                     traces=2, parallelism=1, share_traces=share, agent={"sandbox_mode": "process"})
    report = run_fleet(spec, store=run_dir, run_dir=run_dir, fleet_id=f"mt-{share}")
    seed_score = make(TASK).spec.seed_score
    assert [r.state for r in report.members] == ["finished", "finished"]
    with open_store(run_dir) as store:
        t0, t1 = (store.evaluations(r.run_id) for r in report.members)
        assert t0[0].result.score == pytest.approx(seed_score)  # nothing to adopt for the first trace
        first_of_t1 = t1[0].result.score
        snapshots = [e.payload["text"] for e in store.events(report.members[1].run_id, kind="snapshot")]
        adopt = next(e.payload for e in store.events(report.members[1].run_id, kind="tool_result")
                     if e.payload.get("name") == "adopt_best")
    if share:
        assert first_of_t1 == pytest.approx(2.5, abs=1e-6)  # adopted trace 0's best before evaluating
        assert not adopt["is_error"] and "trace 0's best" in adopt["text"]
        assert any(f"### trace 0 (run mt-True-m000, best {t0[-1].result.score:.10g}" in s
                   and "staggered rows 5,5,6,5,5" in s for s in snapshots)
    else:
        assert first_of_t1 == pytest.approx(seed_score)  # independent: the same start as trace 0
        assert adopt["is_error"] and "no tool named 'adopt_best'" in adopt["text"]
        assert not any("Lessons from the other traces" in s for s in snapshots)
    assert report.members[1].best_score == pytest.approx(2.5, abs=1e-6)


def test_share_traces_both_compares_shared_and_independent_traces_at_the_same_budget(run_dir: Path) -> None:
    script = _trace_script(run_dir / "script.json")
    spec = FleetSpec(tasks=(TASK,), seeds=(0,), models=(f"scripted/{script}",), budget={"evaluations": 5},
                     traces=2, parallelism=1, share_traces="both", agent={"sandbox_mode": "process"})
    assert [(m.trace, m.shared) for m in spec.members()] == [(0, True), (1, True), (0, False), (1, False)]
    report = run_fleet(spec, store=run_dir, run_dir=run_dir, fleet_id="both")
    with open_store(run_dir) as store:
        firsts = [store.evaluations(r.run_id)[0].result.score for r in report.members]
    seed_score = make(TASK).spec.seed_score
    assert firsts == [pytest.approx(seed_score), pytest.approx(2.5, abs=1e-6),  # shared: trace 1 adopted 2.5
                      pytest.approx(seed_score), pytest.approx(seed_score)]  # independent: both start at the seed
    groups = {g["traces"]: g for g in report.groups()}
    assert set(groups) == {"shared", "independent"} and groups["shared"]["runs"] == groups["independent"]["runs"] == 2
    assert groups["shared"]["evaluations"] == groups["independent"]["evaluations"]  # the same budget spent
    with pytest.raises(ConfigError, match="share_traces"):
        FleetSpec(tasks=(TASK,), share_traces="sometimes")


def test_a_training_member_on_a_ray_cluster_with_gpus_takes_one_gpu() -> None:
    from reasearch.fleets.fleet import member_ray_options

    assert member_ray_options("nanogpt/v2", {}, 2.0) == {"num_gpus": 1}
    assert member_ray_options("nanogpt/v2", {"slot": "gpu"}, 1.0) == {"num_gpus": 1}
    assert member_ray_options("nanogpt/v2", {"slot": "cpu"}, 2.0) == {}  # CPU slots: Ray's GPUs stay free
    assert member_ray_options("nanogpt/v2", {}, 0.0) == {}  # no GPU in the cluster
    assert member_ray_options("circle_packing/n26-v1", {}, 2.0) == {}  # not a training task


@pytest.mark.parametrize("unit, cap", [("model_calls", 2.0), ("dollars", 0.25)])
def test_fleet_caps_are_reserved_by_members_calling_at_once(tmp_path: Path, unit: str, cap: float) -> None:
    """Attack (a race, not a bug of one member): four fleet members pass the fleet-wide check at the same
    moment and all call the model, so a fleet cap of 2 model calls made and paid 4 (5 in the field).
    Each call now reserves its worst case (1 call; prompt + max tokens, at the price) in the store
    under the fleet's caps before it is made: with all four held at a barrier just before their first
    call, exactly 2 calls are made (dollars: a worst case of $0.10 each under a $0.25 cap), the two
    refused members stop saying the fleet's cap refused them, and no reservation is left held."""
    from reasearch.agent.config import AgentConfig
    from reasearch.agent.loop import Agent
    from reasearch.engine.testing import StaticRunner
    from reasearch.evaluators.testing import ToyTask
    from reasearch.models import ModelSpec, Price, ScriptedModel
    from reasearch.models.messages import Usage
    from reasearch.runs import Run
    from reasearch.runs.testing import InstanceExecutor

    path = tmp_path / "runs"
    with open_store(path) as store:
        store.create_fleet("f-race", {"caps": {unit: cap}})
    runs: list[Run] = []
    for i in range(4):  # one store connection per member, as separate processes would have
        task = ToyTask(dim=2)
        run = Run.create(open_store(path), task=task, budget={"evaluations": 5}, seed=i,
                         config={"fleet": {"id": "f-race", "caps": {unit: cap}, "member": i}},
                         executor=InstanceExecutor(task, StaticRunner()))
        run.store.add_fleet_member("f-race", i, run.id)
        runs.append(run)
    barrier = threading.Barrier(4, timeout=30)
    # a reply of max tokens (1000, or the lower limit a call near the cap is sent with) at $100 per million
    # output tokens: $0.10 at most, what it reserves (the prompt is free); a real endpoint honours the limit
    def reply(request: Any) -> Any:
        return replace(say("", call("list_files")), usage=Usage(0, min(1000, request.max_tokens or 1000)))

    models = [ScriptedModel([reply] * 4, name=f"m{i}", price=Price(0.0, 100.0)) for i in range(4)]
    cfg = AgentConfig(models={"agent": ModelSpec(provider="scripted", name="unused", max_tokens=1000,
                                                 price_in=0.0, price_out=100.0)})
    agents = [Agent(run, tmp_path / f"m{i}", config=cfg, models={"agent": models[i]}) for i, run in enumerate(runs)]
    for agent in agents:  # every member checks the caps, then all reserve and call at the same moment
        check = agent.calls._check_money

        fresh: list[bool] = []  # one list per member (as the default argument was)

        def checked_then_wait(check: Any = check, waited: list[bool] = fresh) -> None:
            check()
            if not waited:
                waited.append(True)
                barrier.wait()

        agent.calls._check_money = checked_then_wait  # type: ignore[method-assign]
    results: list[Any] = [None] * 4
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, agents[i].optimize())) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        calls = sum(len(m.requests) for m in models)
        with open_store(path) as store:
            used = store.fleet_usage("f-race")
            assert used[Unit.MODEL_CALLS] == calls and all(store.reserved(r.id) == {} for r in runs)
            if unit == "model_calls":  # a member may make both: the fleet holds 2 in all
                assert calls == 2
            else:  # 2 calls of $0.10, then (after waiting for their holds) one sent with its limit lowered
                assert calls >= 2 and used[Unit.DOLLARS] <= 0.25 + 1e-9
        assert all(r is not None for r in results)  # every member ended cleanly (no ModelError, no hang)
        assert sum("budget is spent" in r.reason for r in results) >= 2  # stopped on the fleet's cap
    finally:
        for run in runs:
            run.close()
            run.store.close()
