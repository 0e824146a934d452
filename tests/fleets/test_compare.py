"""The numbers of a methods comparison: equal budgets are checked (unequal caps are not ranked), the
paired bootstrap interval, the fleet spec of a comparison (one cap of each task's own unit)."""

from __future__ import annotations

from typing import Any

import pytest

from reasearch.errors import ConfigError
from reasearch.fleets.compare import _budget_check, compare_spec, paired_bootstrap, rank_rows
from reasearch.fleets.fleet import FleetSpec


def _run(method: str, seed: int, best: float, caps: dict[str, float], used: float) -> dict[str, Any]:
    return {"run_id": f"{method}-{seed}", "method": method, "seed": seed, "best_score": best, "caps": caps,
            "used": {"evaluations": used}, "unit": "evaluations", "direction": "maximize", "points": [],
            "failures": {}}


def test_runs_whose_caps_differ_are_not_ranked() -> None:
    same = [_run("agent", 0, 1.0, {"evaluations": 10}, 10), _run("evolve", 0, 2.0, {"evaluations": 10}, 10)]
    assert _budget_check(same)["equal"]
    differ = [*same, _run("evolve", 1, 3.0, {"evaluations": 20}, 20)]
    check = _budget_check(differ)
    assert not check["equal"] and "caps differ" in check["why"]
    over = [_run("agent", 0, 1.0, {"evaluations": 10}, 11), same[1]]
    assert not _budget_check(over)["equal"] and "past their cap" in _budget_check(over)["why"]


def test_paired_bootstrap_interval_brackets_the_mean_gain() -> None:
    lo, hi = paired_bootstrap([1.0, 2.0, 3.0, 4.0])
    assert 1.0 <= lo <= 2.5 <= hi <= 4.0
    assert paired_bootstrap([0.5]) == (0.5, 0.5) and paired_bootstrap([]) is None


def test_a_comparison_caps_every_task_in_its_own_unit() -> None:
    spec = compare_spec(["heilbronn/n11-v1"], ["agent", "agent:no-snapshot", "evolve"], seeds=[0, 1], budget=7,
                        model="claude-sonnet-4-6")
    assert spec.budget_of("heilbronn/n11-v1") == {"evaluations": 7.0}
    members = spec.members()
    assert len(members) == 6 and {m.method for m in members} == {"agent", "agent:no-snapshot", "evolve"}
    assert spec.agent_config("claude-sonnet-4-6", "agent:no-snapshot").use_snapshot is False
    assert FleetSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(ConfigError, match="unknown method"):
        compare_spec(["heilbronn/n11-v1"], ["annealing"], seeds=[0], budget=5, model="m")
    with pytest.raises(ConfigError, match="unknown agent ablation"):
        compare_spec(["heilbronn/n11-v1"], ["agent:no-tools"], seeds=[0], budget=5, model="m")


def test_a_plain_fleet_spec_is_stored_as_before() -> None:
    """A fleet without methods writes no new keys: fleets recorded before methods existed compare equal."""
    spec = FleetSpec(tasks=("heilbronn/n11-v1",))
    assert not {"methods", "task_budgets", "method_configs"} & set(spec.to_dict())
    assert [m.method for m in spec.members()] == ["agent"]


def test_a_method_member_interrupted_by_its_model_resumes_through_the_fleet(tmp_path: Any,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from reasearch.errors import ModelError
    from reasearch.fleets.fleet import resume_fleet, run_fleet
    from reasearch.methods.testing import MutatingModel
    from reasearch.runs import RunState, Unit, open_store

    class Failing(MutatingModel):
        def complete(self, request: Any) -> Any:
            if self.calls >= 2:
                raise ModelError("endpoint down")
            return super().complete(request)

    monkeypatch.setattr("reasearch.methods.build_model", lambda spec, **kw: Failing(3))
    spec = compare_spec(["heilbronn/n11-v1"], ["reflect"], seeds=[0], budget=5, model="scripted/none")
    store = str(tmp_path / "runs")
    (stopped,) = run_fleet(spec, store=store, run_dir=store, fleet_id="f1").members  # the fleet is not aborted
    assert stopped.state == "interrupted" and stopped.reason == "model error: endpoint down"
    with open_store(store) as s:
        (run_id,) = s.fleet_members("f1").values()
        assert s.get_run(run_id).state is RunState.INTERRUPTED and 0 < s.usage(run_id)[Unit.EVALUATIONS] < 5
    monkeypatch.setattr("reasearch.methods.build_model", lambda spec, **kw: MutatingModel(4))
    report = resume_fleet("f1", store=store, run_dir=store)
    (member,) = report.members
    assert member.state == "finished" and member.member.method == "reflect"
    with open_store(store) as s:
        assert s.usage(run_id)[Unit.EVALUATIONS] == 5


def test_ranks_follow_the_direction_and_ties_share_a_rank() -> None:
    rows = [{"method": m, "mean": v} for m, v in (("a", 2.0), ("b", 3.0), ("c", 2.0), ("d", None))]
    rank_rows(rows, "maximize")
    assert [r.get("rank") for r in rows] == [2, 1, 2, None]
    rank_rows(rows, "minimize")
    assert [r.get("rank") for r in rows] == [1, 3, 1, None]
    x = 2.1666666645
    rows = [{"mean": x * (1 + 1e-15)}, {"mean": x}, {"mean": 2.1666666649}, {"mean": 2.5}]
    rank_rows(rows, "maximize")
    assert [r["rank"] for r in rows] == [3, 3, 2, 1]  # a rounding error ties, a real difference (4e-10) ranks


@pytest.mark.ray
def test_method_members_give_the_same_results_on_ray_as_locally(tmp_path: Any, local_ray: Any) -> None:
    """Baseline members run as Ray tasks like agent members (their model rebuilt from the spec there)."""
    import json

    from reasearch.evaluators.registry import build_task
    from reasearch.fleets.fleet import run_fleet

    seed = build_task("heilbronn/n11-v1").seed_program()
    replies = [{"content": [{"type": "text", "text": "```python\n" + seed.replace("ITERATIONS = 12000",
                                                                                  f"ITERATIONS = {9000 + 1500 * k}")
                             + "```"}]} for k in range(6)]
    script = tmp_path / "script.json"
    script.write_text(json.dumps(replies))
    spec = compare_spec(["heilbronn/n11-v1"], ["best-of-n", "reflect"], seeds=[0, 1], budget=4,
                        model=f"scripted/{script}")
    local = run_fleet(spec, store=str(tmp_path / "local"), run_dir=str(tmp_path / "local"), fleet_id="f")
    # the session's 2-CPU Ray node (local_ray: the job's processes must all be gone after the test)
    remote = run_fleet(spec, store=str(tmp_path / "ray"), run_dir=str(tmp_path / "ray"), fleet_id="f",
                       executor="ray")

    def per_run(report: Any) -> list[tuple[Any, ...]]:
        return sorted((m.member.method, m.member.seed, m.state, m.best_score, m.evaluations) for m in report.members)

    assert per_run(remote) == per_run(local)
    assert all(m.state == "finished" and m.used["evaluations"] == 4 for m in remote.members)


def test_bad_compare_input_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    from reasearch.cli import main

    store = str(tmp_path / "runs")
    assert main(["compare", "heilbronn/n11-v1", "--methods", "agent,annealing", "--store", store]) == 2
    assert main(["compare", "nanogpt/v2", "--methods", "evolve", "--store", store]) == 2
    assert main(["compare", "heilbronn/n11-v1", "--budget", "0", "--store", store]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "unknown method 'annealing'" in err[0] and "repository task" in err[1]
    assert "--budget must be above 0" in err[2]


def test_a_prompt_comparison_counts_the_optimizers_spend_only(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sealed test pass is debited to each run (as 'shared:' when another run paid those calls first)
    but is not the optimizer's spend: both runs spent exactly their cap and the task is ranked."""
    from reasearch.evaluators.prompt.testing import FakeStudentServer, gsm8k_answer_key, write_synthetic_gsm8k
    from reasearch.fleets.compare import comparison, run_compare
    from reasearch.methods.testing import MutatingModel

    monkeypatch.setattr("reasearch.methods.build_model", lambda spec, **kw: MutatingModel(1))
    folder = write_synthetic_gsm8k(tmp_path / "gsm8k")
    store = str(tmp_path / "runs")
    with FakeStudentServer(gsm8k_answer_key(folder)) as srv:
        params = {"student": "openai/fake", "base_url": srv.url, "n_train": 30, "n_validation": 20, "n_test": 20,
                  "data_dir": str(folder)}
        spec = compare_spec(["gsm8k/v1"], ["evolve", "reflect"], seeds=[0], budget=60, model="scripted/none",
                            task_params={"gsm8k/v1": params}, parallelism=1)
        report = run_compare(spec, store=store, run_dir=store)
    data = comparison(store, report.fleet_id)
    (task,) = data["tasks"]
    assert task["unit"] == "student_calls" and task["ranked"], task["budget_check"]
    assert all(0 < r["used"]["student_calls"] <= 60 and r["test_score"] is not None for r in data["runs"])


def test_a_comparison_says_when_a_task_scores_public_held_out_data(tmp_path: Any, experiment_root: Any) -> None:
    """Issue 36 item 1: a method comparison on ``img`` with ``data=digits`` (public) warns beside the task's
    table that its held-out data is public and not sealed; the default glyphs say private and sealed."""
    from reasearch.evaluators import make
    from reasearch.fleets.compare import _run_data
    from reasearch.fleets.fleet import FleetMember
    from reasearch.reports.compare_methods import _task_section
    from reasearch.runs import Run, open_store

    with open_store(tmp_path) as store:
        got = {}
        for name, params in (("digits", {"data": "digits"}), ("glyphs", {})):
            run = Run.create(store, task=make("img/folder-v2", **params), budget={"experiments": 1})
            got[name] = _run_data(store, FleetMember(0, "img/folder-v2", 0, "m", method="evolve"), run.id)
    assert got["digits"]["heldout_public"] is True and got["glyphs"]["heldout_public"] is False
    task = {"task_id": "img/folder-v2", "direction": "maximize", "unit": "experiments", "ranked": False,
            "budget_check": {"equal": False, "why": "one run", "caps": []}, "table": [], "published": None}
    public = _task_section({**task, "heldout_public": True}, [], "agent")
    assert "class='warn heldout-public'>Scored on PUBLIC held-out data" in public and "not sealed" in public
    private = _task_section({**task, "heldout_public": False}, [], "agent")
    assert "heldout-private'>Scored on private held-out data: sealed" in private and "PUBLIC" not in private
    assert "held-out data" not in _task_section(task, [], "agent")  # a task that states nothing


# ------------------------------------------------------------ issue 39 item 7: paired statistics, reference rows
@pytest.mark.parametrize("direction, mine, theirs, wtl, delta", [
    # mixed: seed 0 lost, 1 tied, 2 and 3 won; seed 9 has no pair. Cliff: 8 of the 16 cross pairs above, 5 below
    ("maximize", {0: 1.0, 1: 2.0, 2: 3.0, 3: 5.0}, {0: 2.0, 1: 2.0, 2: 1.0, 3: 4.0, 9: 7.0}, (2, 1, 1), 3 / 16),
    ("minimize", {0: 1.0, 1: 2.0, 2: 3.0, 3: 5.0}, {0: 2.0, 1: 2.0, 2: 1.0, 3: 4.0, 9: 7.0}, (1, 1, 2), -3 / 16),
    # all ties (one within the tolerance): no win, no loss, and the cross pairs cancel
    ("maximize", {0: 1.0, 1: 2.0}, {0: 1.0 + 1e-12, 1: 2.0}, (0, 2, 0), 0.0),
    # one-sided: every seed won; Cliff 8/9 (3 vs 3 across seeds ties), 1 when the samples do not overlap
    ("maximize", {0: 3.0, 1: 4.0, 2: 5.0}, {0: 1.0, 1: 2.0, 2: 3.0}, (3, 0, 0), 8 / 9),
    ("maximize", {0: 3.0, 1: 4.0, 2: 5.0}, {0: 0.0, 1: 0.0, 2: 0.0}, (3, 0, 0), 1.0),
    ("minimize", {0: 3.0, 1: 4.0, 2: 5.0}, {0: 0.0, 1: 0.0, 2: 0.0}, (0, 0, 3), -1.0),
    # the tolerance: 1e-9 x max(1, |a|, |b|)
    ("maximize", {0: 1.0 + 2e-9, 1: 1.0 + 5e-10}, {0: 1.0, 1: 1.0}, (1, 1, 0), 0.5),
    ("maximize", {0: 1000.0, 1: 1000.0}, {0: 1000.0 + 5e-7, 1: 1000.0 + 2e-6}, (0, 1, 1), -0.5),
])
def test_wins_ties_losses_and_cliffs_delta_on_hand_made_pairs(direction: str, mine: dict[int, float],
                                                              theirs: dict[int, float], wtl: tuple[int, int, int],
                                                              delta: float) -> None:
    from reasearch.fleets.compare import paired_stats

    got = paired_stats(mine, theirs, direction)
    assert (got["wins"], got["ties"], got["losses"]) == wtl and got["pairs"] == sum(wtl)
    assert got["cliffs_delta"] == pytest.approx(delta, abs=1e-12)
    back = paired_stats(theirs, mine, direction)  # the other side of the same pairs
    assert (back["wins"], back["ties"], back["losses"]) == wtl[::-1]
    assert back["cliffs_delta"] == pytest.approx(-delta, abs=1e-12)


def test_no_shared_seed_gives_no_statistics() -> None:
    from reasearch.fleets.compare import paired_stats

    assert paired_stats({0: 1.0}, {1: 2.0}, "maximize") == {"pairs": 0, "wins": 0, "ties": 0, "losses": 0,
                                                             "cliffs_delta": None}


def test_the_statistics_stand_beside_the_bootstrap_interval_in_the_table_and_the_page() -> None:
    from reasearch._cli.compare import final_table
    from reasearch.fleets.compare import _pairwise, _task_table
    from reasearch.reports.compare_methods import _task_section

    caps = {"evaluations": 4}
    runs = [_run("agent", s, v, caps, 4) for s, v in enumerate((2.0, 2.0, 1.0, 4.0))]
    runs += [_run("evolve", s, v, caps, 4) for s, v in enumerate((1.0, 2.0, 3.0, 5.0))]
    runs += [_run("reflect", s, 2.0, caps, 4) for s in range(4)]
    table = _task_table(runs, ["agent", "evolve", "reflect"], "agent")
    evolve = table[1]["vs_reference"]
    assert (evolve["wins"], evolve["ties"], evolve["losses"], evolve["pairs"]) == (2, 1, 1, 4)
    assert evolve["cliffs_delta"] == pytest.approx(3 / 16) and evolve["ci95"] is not None
    assert table[0]["vs_reference"] is None  # the reference itself
    pairs = {(p["method"], p["versus"]): p for p in _pairwise(runs, ["agent", "evolve", "reflect"], "maximize")}
    assert len(pairs) == 6 and (pairs["reflect", "evolve"]["wins"], pairs["reflect", "evolve"]["losses"]) == (1, 2)
    assert pairs["evolve", "agent"]["cliffs_delta"] == pytest.approx(3 / 16)
    task = {"task_id": "heilbronn/n11-v1", "direction": "maximize", "unit": "evaluations", "ranked": True,
            "budget_check": {"equal": True, "why": "", "caps": [caps]}, "table": table, "published": None,
            "pairwise": list(pairs.values()), "references": []}
    from rich.console import Console

    console = Console(width=250, record=True)
    console.print(final_table(task, "agent"))
    text = console.export_text()
    assert "W/T/L vs agent" in text and "Cliff's delta" in text
    evolve_line = next(line for line in text.splitlines() if "│ evolve " in line)
    assert "2/1/1" in evolve_line and "+0.19" in evolve_line
    html = _task_section(task, [], "agent")
    assert "<th>W/T/L vs agent</th><th>Cliff's delta</th>" in html
    assert "<td class='wtl'>2/1/1</td><td class='cliffs-delta'>+0.19</td>" in html
    assert "pairwise-table" in html and "<td>reflect</td><td>evolve</td><td>4</td><td>1/1/2</td>" in html


def test_reference_rows_are_checked_data_for_registered_tasks(tmp_path: Any) -> None:
    import json

    from reasearch.evaluators.registry import build_task
    from reasearch.fleets.references import load_references, references_for

    rows = load_references()
    assert rows and all(r["source"] and r["budget"] for r in rows)
    for r in rows:  # a typo in an id or a parameter name would hide a row for ever
        task = build_task(r["task"])
        assert set(r.get("params", {})) <= set(task.spec.params), r
    assert [r["method"] for r in references_for("circle_packing/n26-v1")] == [
        "AlphaEvolve", "OpenEvolve (circle-packing example)", "OpenEvolve (issue #156 run)", "ShinkaEvolve",
        "Claude Code, Opus 4.6 (AutoEvolver)"]
    assert references_for("heilbronn/n11-v1") == []
    txn = references_for("txn_scheduling/v1", build_task("txn_scheduling/v1").spec.params)
    assert [(r["score"], r["metric"]) for r in txn] == [(225, "score"), (241, "score"),
                                                        (0.34, "makespan_reduction_vs_smf")]
    # ADRS's leaderboard scores are on its 0-100 scale: shown for score=adrs only, never beside makespans or the
    # combined score, and every one of them on that scale (a makespan tagged adrs would be out of it)
    leaderboard = [f"{m} (ADRS leaderboard)"
                   for m in ("Human SOTA", "AutoEvolve", "GEPA", "OpenEvolve", "ShinkaEvolve")]
    levi = {"txn_scheduling/v1": [("LEVI (ADRS blog, Table 1)", 71.1)] + [
        (f"{m}, Qwen3-30B-A3B, 750 evaluations (ADRS blog)", v) for m, v in (("LEVI", 64.9), ("OpenEvolve", 59.9),
                                                                             ("GEPA", 54.4))],
        "eplb/v1": [("LEVI (ADRS blog, Table 1)", 74.6)]}
    for task_id, other in (("txn_scheduling/v1", "makespan"), ("eplb/v1", "combined")):
        adrs = [r for r in references_for(task_id, {"score": "adrs"}) if r["metric"] == "score"]
        board = [r for r in adrs if "(ADRS leaderboard)" in r["method"]]
        assert [r["method"] for r in board] == leaderboard
        assert all("ucbskyadrs.github.io/leaderboard" in r["source"] for r in board)
        assert [(r["method"], r["score"]) for r in adrs if r not in board] == levi[task_id]
        assert all(0 <= r["score"] <= 100 and "ucbskyadrs.github.io" in r["source"] and r["params"] == {"score": "adrs"}
                   for r in adrs)
        assert not {r["method"] for r in references_for(task_id, {"score": other})} & {r["method"] for r in adrs}
    # peers' circle-packing figures were checked with a slack this task does not allow: every such row says so
    peers = [r for r in references_for("circle_packing/n26-v1") if r["method"] != "AlphaEvolve"]
    assert peers and all("1e-6" in r["note"] and "allows none" in r["note"] for r in peers)
    assert references_for("nanogpt/v2", {"corpus": "generated"}) == []
    for i, (row, msg) in enumerate((({"task": "t", "method": "m", "score": 1.0, "source": "s"}, "missing budget"),
                     ({"task": "t", "method": "m", "score": 1.0, "source": "s", "budget": "b", "x": 1}, "unknown x"),
                     ({"task": "t", "method": "m", "score": "1", "source": "s", "budget": "b"}, "finite number"),
                     ({"task": "t", "method": "m", "score": 1.0, "source": " ", "budget": "b"}, "non-empty"),
                     ({"task": "t", "method": "m", "score": float("nan"), "source": "s", "budget": "b"}, "finite"),
                     ({"task": "t", "method": "m", "score": 1.0, "source": "s", "budget": "b", "metric": ""},
                      "metric must be non-empty text"),
                     ({"task": "t", "method": "m", "score": 1.0, "source": "s", "budget": "b", "note": 3},
                      "note must be non-empty text"),
                     ({"task": "t", "method": "m", "score": 1.0, "source": "s", "budget": "b",
                       "params": {"score": ["adrs"]}}, "params must be an object of plain values"))):
        bad = tmp_path / f"refs{i}.json"
        bad.write_text(json.dumps({"rows": [row]}))
        with pytest.raises(ConfigError, match=rf"row 0 \(t: m\): .*{msg}"):
            load_references(bad)
    bad = tmp_path / "broken.json"  # a hand edit that breaks the JSON is a clear error, not a traceback
    bad.write_text('{"rows": [{"task": "t",}]}')
    with pytest.raises(ConfigError, match=r"broken.json: not valid JSON \(.* at line 1, column \d+\)"):
        load_references(bad)


def test_reference_rows_appear_marked_in_the_printed_table_and_the_page(tmp_path: Any,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``reasearch compare`` on circle_packing/n26-v1 shows AlphaEvolve's published sum as a reference row (source,
    budget, "published, not measured here") in the printed table, the page and the JSON; heilbronn/n11-v1, which has
    no reference row, shows none."""
    import json

    from reasearch.cli import main

    store = str(tmp_path / "runs")
    out_html, out_json = tmp_path / "c.html", tmp_path / "c.json"
    rc = main(["compare", "circle_packing/n26-v1", "heilbronn/n11-v1", "--methods", "best-of-n,evolve", "--seeds",
               "0,1", "--budget", "2", "--model", "demo", "--quiet", "--store", store, "--run-dir", store,
               "-o", str(out_html), "--json", str(out_json)])
    assert rc == 0
    printed = capsys.readouterr().out
    cp, hb = printed.split("heilbronn/n11-v1 (")
    (row,) = [line for line in cp.splitlines() if "reference: AlphaEvolve" in line]
    assert "published" in row and "2.6358627564" in row
    caption = " ".join(cp.split("┘")[-1].split())
    assert caption.startswith("Reference rows are published, not measured here: AlphaEvolve (AlphaEvolve, as TASKS.md")
    assert "budget: budget not stated" in caption
    assert "reference:" not in hb and "Reference rows" not in hb and "AlphaEvolve" not in hb
    data = json.loads(out_json.read_text())
    refs = {t["task_id"]: t["references"] for t in data["tasks"]}
    assert refs["heilbronn/n11-v1"] == []
    alpha, *peers = refs["circle_packing/n26-v1"]
    assert alpha["method"] == "AlphaEvolve" and alpha["score"] == 2.6358627564 and "AlphaEvolve" in alpha["source"]
    assert alpha["budget"] == "budget not stated"
    assert [p["method"] for p in peers] == ["OpenEvolve (circle-packing example)", "OpenEvolve (issue #156 run)",
                                            "ShinkaEvolve", "Claude Code, Opus 4.6 (AutoEvolver)"]
    assert all(t["table"][1]["vs_reference"]["pairs"] == 2 for t in data["tasks"])  # statistics over both seeds
    html = out_html.read_text()
    cp_html, hb_html = html.split("<section id='task-heilbronn-n11-v1'>")
    assert cp_html.count("<tr class='reference' data-method='AlphaEvolve'>") == 1
    row = cp_html.split("<tr class='reference' data-method='AlphaEvolve'>")[1].split("</tr>")[0]
    assert "reference: AlphaEvolve" in row and "2.6358627564" in row and "published, not measured here" in row
    assert "budget: budget not stated" in row and "source: AlphaEvolve, as TASKS.md" in row
    assert "class='reference'" not in hb_html
    # a published figure is shown with every digit it was published with, in the table and on the page
    (issue,) = [line for line in cp.splitlines() if "2.635977394746595" in line]
    assert "published" in issue and "reference: OpenEvolve" in issue
    row = cp_html.split("<tr class='reference' data-method='OpenEvolve (issue #156 run)'>")[1].split("</tr>")[0]
    assert "<td>2.635977394746595</td>" in row and "budget: found at iteration 206" in row



def _curve_run(method: str, seed: int, scores_at: list[tuple[float, float | None]], cap: float = 6.0,
               reason: str = "the evaluations budget is spent") -> dict[str, Any]:
    points = [{"step": i, "spent": spent, "dollars": 0.0, "wall_s": 0.0, "status": "OK" if s is not None else "INVALID",
               "score": s, "cached": False} for i, (spent, s) in enumerate(scores_at)]
    used = max((sp for sp, _ in scores_at), default=0.0)
    return {**_run(method, seed, max(s for _, s in scores_at if s is not None), {"evaluations": cap}, used),
            "points": points, "task_id": "t", "stop_reason": reason, "under_cap": used + 1 <= cap}


def test_ranks_are_computed_at_equal_spend_and_short_runs_are_marked() -> None:
    """Issue 39 item 1: a method that stopped after 2 of 6 evaluations is ranked against the others' best after
    2, not against their best after 6; the short run is marked with its stop rule; the curve goes k = 1..2."""
    from reasearch.fleets.compare import best_after, spend_matched, task_numbers
    from reasearch.reports.compare_methods import under_cap_text

    runs = [  # 'late' wins at full spend (5.0) but is worse than 'early' after 2 evaluations
        _curve_run("late", 0, [(1, 1.0), (2, 1.5), (6, 5.0)]), _curve_run("late", 1, [(1, 1.0), (2, 1.2), (6, 4.0)]),
        _curve_run("early", 0, [(1, 1.0), (2, 3.0)], reason="25 proposals in a row spent nothing"),
        _curve_run("early", 1, [(1, 1.0), (2, 2.0), (6, 2.5)]),
    ]
    assert best_after(runs[0]["points"], 2, "maximize") == 1.5
    assert best_after(runs[0]["points"], 0.5, "maximize") is None
    assert best_after(runs[0]["points"], 2, "minimize") == 1.0
    matched = spend_matched(runs, ["late", "early"])
    assert matched["k_equal"] == 2 and matched["k"] == [1.0, 2.0]
    assert matched["at_k"] == {"late": pytest.approx(1.35), "early": pytest.approx(2.5)}
    assert matched["curves"]["early"] == [pytest.approx(1.0), pytest.approx(2.5)]
    numbers = task_numbers(runs, ["late", "early"], "late")
    assert numbers["ranked"] and numbers["spend_matched"] == matched
    table = numbers["table"]
    assert {r["method"]: r["rank"] for r in table} == {"early": 1, "late": 2}  # the final means would say late
    early = next(r for r in table if r["method"] == "early")
    assert early["under_cap"] == [{"seed": 0, "spent": 2.0, "cap": 6.0,
                                   "stop_reason": "25 proposals in a row spent nothing"}]
    assert under_cap_text(early) == "UNDER CAP seed 0: 2/6 (25 proposals in a row spent nothing)"
    assert under_cap_text(next(r for r in table if r["method"] == "late")) == "full"


def test_demo_seeds_differ_its_method_proposals_are_as_valid_as_the_agents_and_tables_say_demo(
        tmp_path: Any) -> None:
    """Issue 39 item 3: with --model demo, seeds 0 and 1 make different runs (the run's seed reaches the demo),
    evolve's and best-of-n's proposals are INVALID no more often than the agent's edits (on main: 10 of 12 and
    8 of 12 against 0 of 12), and the table and report state that the demo model is not an LLM."""
    from rich.console import Console

    from reasearch._cli.compare import final_table
    from reasearch.fleets.compare import DEMO_NOTE, comparison, run_compare
    from reasearch.reports.compare_methods import compare_methods_html
    from reasearch.runs import open_store

    store = str(tmp_path / "runs")
    spec = compare_spec(["circle_packing/n26-v1"], ["agent", "evolve", "best-of-n"], seeds=[0, 1], budget=6,
                        model="demo", parallelism=2)
    data = comparison(store, run_compare(spec, store=store, run_dir=store).fleet_id)
    runs = {(r["method"], r["seed"]): r for r in data["runs"]}
    with open_store(store) as s:
        for method in ("agent", "evolve", "best-of-n"):
            moves = [[ev.candidate_id for ev in s.evaluations(runs[method, seed]["run_id"])] for seed in (0, 1)]
            assert moves[0][0] == moves[1][0] and moves[0] != moves[1], method  # the same seed program, then apart
    rate = {}
    for method in ("agent", "evolve", "best-of-n"):
        mine = [r for (m, _), r in runs.items() if m == method]
        evals = sum(len(r["points"]) for r in mine)
        assert evals == 12 and all(not r["under_cap"] for r in mine), method  # each spent its 6 evaluations
        rate[method] = sum(r["failures"].get("INVALID", 0) for r in mine) / evals
    assert rate["evolve"] <= rate["agent"] + 0.25 and rate["best-of-n"] <= rate["agent"] + 0.25, rate
    assert data["model_note"] == DEMO_NOTE and "not an LLM" in DEMO_NOTE
    console = Console(width=300, record=True)
    console.print(final_table(data["tasks"][0], data["reference"], data["model_note"]))
    assert "not an LLM" in console.export_text()
    html = compare_methods_html(data, plotly_src="")
    assert "not an LLM" in html and "fig-circle-packing-n26-v1-matched" in html  # the spend-matched curve is drawn
    assert data["tasks"][0]["ranked"] and data["tasks"][0]["spend_matched"]["k"] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_a_published_figure_is_shown_with_every_digit_and_no_more() -> None:
    """Reference rows print 12 significant digits when that is the figure itself, and every digit when fewer would
    round it: a published 2.634292402141039 is never shown as 2.63429240214."""
    from reasearch._cli.compare import reference_value
    from reasearch.reports.compare_methods import figure_text

    for value, text in ((2.634292402141039, "2.634292402141039"), (2.6358627564, "2.6358627564"), (0.21, "0.21"),
                        (225.0, "225"), (70.0, "70"), (0.1 + 0.2, "0.30000000000000004"), (1e-300, "1e-300"),
                        (123456789012345.0, "123456789012345.0"), (-0.0037, "-0.0037")):
        assert figure_text(value) == text and float(figure_text(value)) == value
    assert reference_value({"score": 2.63598325, "as_published": "2.63598325 sum"}) == "2.63598325 (2.63598325 sum)"
    assert reference_value({"score": 0.0196, "metric": "t_alg_s"}) == "-"  # a metric is never in a score column


def test_a_reference_row_of_another_metric_is_never_ranked_nor_shown_as_a_score() -> None:
    """EPLB's published rebalance times and GPU balance (metric t_alg_s, bal_gpu) are shown beside the measured rows,
    but never in a score column and never with a rank: a t_alg of 0.54 s or a balance of 0.66 would otherwise
    outrank every measured combined score here (0.1-0.3). The rows in the task's own score (the paper's 0.21 / 0.23)
    keep their figure in the score column, also unranked."""
    from rich.console import Console

    from reasearch._cli.compare import final_table
    from reasearch.evaluators.svg import esc
    from reasearch.fleets.compare import task_numbers
    from reasearch.fleets.references import references_for
    from reasearch.reports.compare_methods import _task_section

    scores = {"agent": (0.2, 0.3), "evolve": (0.1, 0.1)}
    runs = [_curve_run(m, s, [(1, v), (2, v + 0.01)], cap=2) for m, vs in scores.items() for s, v in enumerate(vs)]
    numbers = task_numbers(runs, ["agent", "evolve"], "agent")
    refs = references_for("eplb/v1", {"score": "combined"})
    metric_rows = [r for r in refs if r["metric"] != "score"]
    assert {r["metric"] for r in metric_rows} == {"t_alg_s", "bal_gpu"} and len(refs) - len(metric_rows) == 2
    assert max(r["score"] for r in metric_rows) > max(r["best_score"] for r in runs)  # would rank first if ranked
    task = {"task_id": "eplb/v1", "direction": "maximize", "unit": "evaluations", "published": None,
            "pairwise": [], "references": refs, **numbers}
    assert numbers["ranked"] and [(r["method"], r["rank"]) for r in numbers["table"]] == [("agent", 1), ("evolve", 2)]
    console = Console(width=400, record=True)
    console.print(final_table(task, "agent"))
    text = console.export_text()
    head = [c.strip() for c in next(line for line in text.splitlines() if "┃ method" in line).split("┃")]
    lines = [line.split("│") for line in text.splitlines() if line.startswith("│")]
    at = {name: head.index(name) for name in ("method", "rank", "best @ equal spend", "mean best")}
    cells = {row[at["method"]].strip(): row for row in lines}
    assert [cells[m][at["rank"]].strip() for m in ("agent", "evolve")] == ["1", "2"]
    for ref in refs:
        (name,) = [k for k in cells if k.startswith(f"reference: {ref['method']}") and
                   (ref["metric"] in k if ref["metric"] != "score" else "not the score" not in k)]
        row = cells[name]
        assert row[at["rank"]].strip() == "published" and row[at["best @ equal spend"]].strip() == "-"
        if ref["metric"] == "score":
            assert row[at["mean best"]].strip() == str(ref["score"])
        else:  # the figure is in the method cell, labelled; the score columns hold none
            assert row[at["mean best"]].strip() == "-" and "a metric, not the score" in name
            assert f"{ref['metric']} = {ref['score']:g} ({ref['as_published']})" in name
    html = _task_section(task, [], "agent")
    for ref in refs:
        tag = f"<tr class='reference' data-method='{esc(ref['method'])}'"
        tag += f" data-metric='{ref['metric']}'>" if ref["metric"] != "score" else ">"
        cells_html = html.split(tag)[1].split("</tr>")[0].split("<td")
        score_cell = cells_html[3].split(">", 1)[1].removesuffix("</td>")
        if ref["metric"] == "score":
            assert score_cell == str(ref["score"]) and "a metric" not in cells_html[4]
        else:
            assert score_cell == "-" and f"{ref['metric']} = " in cells_html[4] and "not the score" in cells_html[4]
    assert html.count("data-metric=") == len(metric_rows)
