"""``reasearch tasks`` and ``reasearch eval``: listings, results, exit codes, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reasearch import cli
from reasearch.evaluators.circle_packing.task import SEED_SCORES, CirclePackingTask


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """Runs ``reasearch`` through ``cli.main`` (with only the tasks commands), returning (code, out, err)."""
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("reasearch._cli.tasks",))
    monkeypatch.setenv("COLUMNS", "200")

    def _run(*argv: str) -> tuple[int, str, str]:
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return _run


@pytest.fixture
def seed_file(tmp_path: Path) -> Path:
    path = tmp_path / "seed.py"
    path.write_text(CirclePackingTask(n=26).seed_program())
    return path


def test_tasks_table(run) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run("tasks")
    assert code == 0
    assert "circle_packing/n26-v1" in out and "2.63598308492" in out
    assert "heilbronn/n15-v1" in out and "0.0212105410055" in out
    assert "arc_agi_2/{task_id}-v1" in out and "--all lists them" in out


def test_tasks_json_filter_and_all(run) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run("tasks", "heilbronn", "--json")
    rows = json.loads(out)
    assert code == 0 and [r["id"] for r in rows] == [f"heilbronn/n{n}-v1" for n in range(11, 16)]
    assert rows[0]["best_known"] == 1 / 27 and rows[0]["best_known_source"] == "Goldberg 1972"
    code, out, _ = run("tasks", "circle_packing/n26", "--json")
    (row,) = json.loads(out)
    assert row["seed_score"] == SEED_SCORES[26] and row["direction"] == "maximize"
    code, out, _ = run("tasks", "arc_agi_2/", "--json", "--all")
    ids = [r["id"] for r in json.loads(out)]
    assert len(ids) > 1000 and all("{" not in i for i in ids)


def test_eval_json_ok(run, seed_file: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run("eval", "circle_packing/n26-v1", str(seed_file), "--json", "--seed", "3")
    res = json.loads(out)
    assert code == 0 and res["status"] == "OK" and res["score"] == SEED_SCORES[26]
    assert res["provenance"]["seed"] == 3 and res["provenance"]["task_id"] == "circle_packing/n26-v1"


def test_eval_table_and_png(run, seed_file: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    png = tmp_path / "packing.png"
    code, out, err = run("eval", "circle_packing/n26-v1", str(seed_file), "--png", str(png), "-p", "time_limit_s=20")
    assert code == 0
    assert "OK" in out and "lp_sum" in out and "2.1666666645" in out
    assert png.read_bytes()[:4] == b"\x89PNG" and "wrote" in err


def test_candidate_failures_exit_1_with_their_status(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.py"
    bad.write_text("def run(:\n    pass\n")
    code, out, _ = run("eval", "heilbronn/n12-v1", str(bad), "--json")
    assert code == 1 and json.loads(out)["status"] == "CRASH" and json.loads(out)["score"] is None
    invalid = tmp_path / "invalid.py"
    invalid.write_text("def run():\n    return [[2.0, 0.5]] * 12\n")
    code, out, _ = run("eval", "heilbronn/n12-v1", str(invalid))
    assert code == 1 and "INVALID" in out and "outside" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("eval", "circle_packing/n26-v2", "{file}"), "Did you mean 'circle_packing/n26-v1'"),
        (("eval", "circle_packing/n26-v1", "{file}", "-p", "bogus=1"), "has no parameter 'bogus'"),
        (("eval", "circle_packing/n26-v1", "{file}", "-p", "novalue"), "write -p key=value"),
        (("eval", "circle_packing/n26-v1", "/nonexistent/cand.py"), "no such candidate file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(run, seed_file: Path, argv: tuple[str, ...], needle: str) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run(*(a.format(file=seed_file) for a in argv))
    assert code == 2 and out == ""
    assert needle in err and "Traceback" not in err and err.count("\n") == 1


def _families() -> list[tuple[str, list[str], bool]]:
    """Each family pattern of the registry and its real ids (families with none listed, e.g. without data, left out)."""
    from reasearch.evaluators.registry import list_tasks, registered_entry

    out = []
    for pattern in list_tasks(include_families=True, expand=False):
        if "{" in pattern:
            entry, _ = registered_entry(pattern)
            members = [pattern.format(**f) for f in entry.enumerate()] if entry.enumerate else []
            if members:
                out.append((pattern, members, entry.open_ids))
    return out


def _near_miss(pattern: str, member: str) -> str:
    """``member`` with its varying part lower-cased and cut short (rl/HalfCheetah-v5-v2 -> rl/halfcheetah-v2)."""
    head, tail = pattern.split("{", 1)[0], pattern.rsplit("}", 1)[1]
    field = member[len(head):len(member) - len(tail)]
    return head + field.lower().split("-v")[0][:-1] + tail


@pytest.mark.parametrize("command", [("seed", "{id}", "-o", "{out}"), ("tasks", "{id}", "--params"),
                                     ("eval", "{id}", "{out}")])
def test_a_family_id_that_is_not_a_member_is_one_line_with_did_you_mean(run, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                         command: tuple[str, ...]) -> None:
    families = _families()
    assert {p.split("/")[0] for p, _, _ in families} >= {"rl", "atari"}
    for pattern, members, open_ids in families:
        head, tail = pattern.split("{", 1)[0], pattern.rsplit("}", 1)[1]
        near = _near_miss(pattern, members[0])
        for bad in (near, head + "zzqx" + tail):
            assert bad not in members
            argv = [a.format(id=bad, out=str(tmp_path / "x.py")) for a in command]
            code, out, err = run(*argv)
            assert code == 2, (argv, out, err)
            assert err.count("\n") == 1 and err.startswith("reasearch: error: ") and "Traceback" not in err, err
            assert not (tmp_path / "x.py").exists()  # nothing written for a bad id
            if open_ids:  # the task checks its ids itself (ARC: against the data), naming the closest one
                assert bad != near or members[0][len(head):len(members[0]) - len(tail)] in err, err
            else:
                assert err.startswith(f"reasearch: error: unknown task id {bad!r}")
                assert (f"Did you mean {members[0]!r}" if bad == near else members[0]) in err, err


def test_the_listing_shows_a_real_id_of_each_family(run) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run("tasks", "--json")
    assert code == 0
    rows = {r["id"]: r for r in json.loads(out)}
    for pattern, members, _ in _families():
        assert rows[pattern]["example"] == members[0]
        assert run("tasks", members[0], "--params")[0] == 0  # the example is an id the registry takes
    code, out, _ = run("tasks")
    for pattern, members, _ in _families():
        assert members[0] in " ".join(out.split()), pattern


def test_seed_into_a_missing_folder_names_the_folder(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "missing" / "dir" / "x.py"
    code, _, err = run("seed", "circle_packing/n26-v1", "-o", str(out))
    assert code == 2 and err.count("\n") == 1
    assert f"the folder {out.parent} does not exist" in err and "no such file" not in err
    assert not out.parent.exists()


def _repository_task_id() -> str:
    from reasearch.evaluators.registry import list_tasks, registered_entry

    for task_id in list_tasks(include_families=False, expand=False):
        if registered_entry(task_id)[0].load().candidate_kind == "repository":
            return task_id
    raise AssertionError("no repository task is registered")


def test_eval_of_a_repository_task_on_one_file_says_so_before_training(run, seed_file: Path,  # type: ignore[no-untyped-def]
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from reasearch.evaluators import training

    task_id = _repository_task_id()

    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("an experiment started")

    monkeypatch.setattr(training, "lease_slot", no_training)
    code, out, err = run("eval", task_id, str(seed_file))
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"{task_id} evaluates a repository: give a folder holding" in err and str(seed_file) in err


def test_params_at_80_columns_are_not_a_tall_narrow_table(run, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from reasearch.evaluators.params import describe_params
    from reasearch.evaluators.registry import list_tasks, registered_entry

    monkeypatch.setenv("COLUMNS", "80")
    for task_id in list_tasks(include_families=False, expand=False):
        entry, implied = registered_entry(task_id)
        params = [p for p in describe_params(entry.load()) if p.name not in implied or p.name in entry.kwargs]
        code, out, _ = run("tasks", task_id, "--params")
        assert code == 0
        lines = out.splitlines()
        assert all(len(ln) <= 80 for ln in lines)
        # Each meaning takes at most the lines it needs at ~70 columns, plus one line of facts per parameter.
        room = 2 + 2 * len(params) + sum(len(p.meaning) // 60 for p in params) + 4
        assert len(lines) <= room, (task_id, len(lines), room)
        text = " ".join(out.split())
        for p in params:
            assert " ".join(p.meaning.split()) in text, (task_id, p.name)  # never folded mid-word
            if not p.required:
                assert repr(p.default) in out  # a default is whole on one line
