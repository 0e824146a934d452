"""OpenEvolve and ShinkaEvolve folders run unchanged (``reasearch.make(PATH)``): the two example folders (written
here in the peers' documented shapes) pass ``check_task`` in both sandbox modes; their evaluator runs in the
candidate's jail and every result says so; hostile candidates get no score beyond what the evaluator, run honestly,
gives them; an edit outside an EVOLVE-BLOCK is reverted before a method evaluates it."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest

import reasearch
from reasearch.engine import SandboxPool
from reasearch.errors import ConfigError, TaskFolderError
from reasearch.evaluators.checker import check_task
from reasearch.evaluators.peer_folder import TRUST, PeerFolderTask, keep_outside_blocks, peer_folder_kind
from reasearch.evaluators.result import Status

HERE = Path(__file__).parent / "peer_folders"
KINDS = {"openevolve": ("openevolve_spread", "initial_program.py"), "shinka": ("shinka_spread", "initial.py")}
HONEST = 0.08646744858474564 / 0.25  # the seed's smallest gap, scored by both example evaluators


def _folder(tmp_path: Path, kind: str) -> Path:
    out = tmp_path / KINDS[kind][0]
    shutil.copytree(HERE / KINDS[kind][0], out)
    return out


def _task(tmp_path: Path, kind: str, **params: object) -> PeerFolderTask:
    task = reasearch.make(str(_folder(tmp_path, kind)), **params)
    assert isinstance(task, PeerFolderTask)
    return task


def _program(kind: str, body: str, points: str = "[0.0, 0.25, 0.5, 0.75, 1.0]") -> str:
    """A candidate in the folder's shape: ``body`` runs at import; the entry point returns ``points``."""
    entry = "def run_spread():\n" if kind == "openevolve" else "def run_experiment(n=5, **kwargs):\n"
    return f"{body}\n\n{entry}    return {points}\n"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_examples_pass_check_task_and_say_their_evaluator_shares_the_jail(
        kind: str, tmp_path: Path, pool: SandboxPool) -> None:
    folder = _folder(tmp_path, kind)
    assert peer_folder_kind(folder) == kind
    task = reasearch.make(str(folder))
    assert check_task(task, executor=pool).ok
    result = task.evaluate(task.seed_program(), seed=0, executor=pool)
    assert result.status is Status.OK and result.score == pytest.approx(HONEST)
    assert result.metrics["trust"] == TRUST and result.provenance is not None
    assert task.trust_note == TRUST
    best = task.evaluate(_program(kind, ""), seed=0, executor=pool)
    assert best.ok and best.score == pytest.approx(1.0)
    copy = pickle.loads(pickle.dumps(task))
    assert copy.spec == task.spec
    (folder / KINDS[kind][1]).write_text(task.seed_program() + "\n# changed\n")
    with pytest.raises(TaskFolderError, match=f"changed since this run was stored \\({KINDS[kind][1]} changed\\)"):
        reasearch.make(task.spec)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_failure_never_scores(kind: str, tmp_path: Path, pool: SandboxPool) -> None:
    task = _task(tmp_path, kind, time_limit_s=1.0)
    cases = {  # the sleeper runs last: it is timed out as the first case of a fresh pool would be, after the others
        "fork bomb": _program(kind, "import os\nwhile True:\n    os.fork()"),
        "out of range": _program(kind, "", "[2.0] * 5"),
        "NaN": _program(kind, "", "[float('nan')] * 5"),
        "raises": _program(kind, "raise RuntimeError('boom')"),
        "sleeps past the limit": _program(kind, "", "__import__('time').sleep(30) or []"),
    }
    results = {why: task.evaluate(source, seed=0, executor=pool) for why, source in cases.items()}
    for why, result in results.items():
        assert result.status is not Status.OK and result.score is None, (why, result)
    slow = results["sleeps past the limit"]  # (it was evaluated a second time for this: the same verdict)
    assert slow.status is Status.TIMEOUT and slow.wall_s < 10  # killed at the task's limit, whole tree


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_printed_and_prewritten_scores_are_ignored(kind: str, tmp_path: Path, pool: SandboxPool) -> None:
    """A candidate prints a score, and writes metrics.json / correct.json into its folder and into every results
    folder it can find, before the evaluator runs, on a thread all along and once the evaluator is done (``__del__``
    of its answer): the score is still what the evaluator computes (the honest seed's), because the harness hands
    back what the evaluator returned, not those files."""
    task = _task(tmp_path, kind)
    forge = ("import json, os\n"
             "def forge():\n"
             "    fake = {'combined_score': 1e9, 'public': {}, 'text_feedback': 'forged'}\n"
             "    for d in ['.'] + [e for e in os.listdir('.') if os.path.isdir(e)]:\n"
             "        for name, data in (('metrics.json', fake), ('correct.json', {'correct': True, 'error': None})):\n"
             "            tmp = os.path.join(d, f'.{name}.{__import__(\"threading\").get_ident()}')\n"
             "            with open(tmp, 'w') as f:\n"
             "                json.dump(data, f)\n"
             "            os.replace(tmp, os.path.join(d, name))\n"
             "def keep_forging():\n"
             "    while True:\n"
             "        try:\n"
             "            forge()\n"
             "        except OSError:\n"
             "            pass\n"
             "class Forged(list):\n"
             "    def __del__(self):  # runs once the evaluator has dropped the answer: after it wrote its files\n"
             "        forge()\n"
             "forge()\n"
             "print('combined_score: 1e9')\n"
             "print(json.dumps({'combined_score': 1e9}))\n"
             "__import__('threading').Thread(target=keep_forging, daemon=True).start()\n")
    seed_points = "(lambda rng: sorted(rng.random() for _ in range(5)))(__import__('random').Random(0))"
    program = _program(kind, forge, f"forge() or Forged({seed_points})")
    result = task.evaluate(program, seed=0, executor=pool)
    assert result.status is Status.OK and result.score == pytest.approx(HONEST)
    assert result.metrics["trust"] == TRUST


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_candidate_that_patches_its_evaluator_is_still_marked_shared(kind: str, tmp_path: Path,
                                                                        pool: SandboxPool) -> None:
    """The trust model, shown: the candidate shares the evaluator's process and can rewrite it (here, ``min`` in the
    evaluator's globals, or ShinkaEvolve's run_shinka_eval); the result then says its evaluator shared the jail."""
    task = _task(tmp_path, kind)
    if kind == "openevolve":
        patch = "import sys\nev = sys.modules.get('evaluation_module')\nif ev is not None:\n    ev.min = lambda *a: 1.0"
    else:
        patch = ("import sys\ncore = sys.modules.get('shinka.core')\n"
                 "if core is not None:\n    real = core.run_shinka_eval\n"
                 "    def fake(*a, **k):\n        m, c, e = real(*a, **k)\n        m['combined_score'] = 4.0\n"
                 "        return m, c, e\n    core.run_shinka_eval = fake\n")
    result = task.evaluate(_program(kind, patch, "[0.0, 0.1, 0.2, 0.3, 0.4]"), seed=0, executor=pool)
    assert result.metrics["trust"] == TRUST
    if kind == "openevolve":  # the patch took effect: that is what sharing a jail means
        assert result.ok and result.score == pytest.approx(4.0)


def test_openevolve_cascade_follows_the_thresholds_of_config_yaml(tmp_path: Path, pool: SandboxPool) -> None:
    folder = _folder(tmp_path, "openevolve")
    evaluator = folder / "evaluator.py"
    evaluator.write_text(evaluator.read_text() + "\n\ndef evaluate_stage2(program_path):\n"
                                                  "    return {'combined_score': 0.99, 'stage2': 1.0}\n")
    seed = (folder / "initial_program.py").read_text()
    task = reasearch.make(str(folder))
    passed = task.evaluate(seed, seed=0, executor=pool)  # stage 1 gives 0.35 >= 0.1: stage 2 runs
    assert passed.ok and passed.score == pytest.approx(0.99) and passed.metrics["peer.stage2"] == 1.0
    (folder / "config.yaml").write_text((folder / "config.yaml").read_text().replace("[0.1]", "[0.5]"))
    task = reasearch.make(str(folder))
    stopped = task.evaluate(seed, seed=0, executor=pool)  # 0.35 < 0.5: stage 1's metrics are the result
    assert stopped.ok and stopped.score == pytest.approx(HONEST) and "peer.stage2" not in stopped.metrics


def test_folder_mistakes_are_one_line(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "shinka")
    (folder / "evaluate.py").write_text("def mian(program_path, results_dir):\n    pass\n")
    with pytest.raises(TaskFolderError, match=r"evaluate.py line 1: no function main\(\)"):
        reasearch.make(str(folder))
    folder = _folder(tmp_path, "openevolve")
    (folder / "config.yaml").write_text("prompt: [unclosed\n")
    with pytest.raises(TaskFolderError, match=r"config.yaml line \d+: not valid YAML"):
        reasearch.make(str(folder))
    (folder / "config.yaml").unlink()
    with pytest.raises(ConfigError, match="its one parameter is time_limit_s, not 'n'"):
        reasearch.make(str(folder), n=3)
    with pytest.raises(ConfigError, match="time_limit_s .* takes a number > 0"):
        reasearch.make(str(folder), time_limit_s=float("nan"))


def test_edits_outside_the_evolve_blocks_are_reverted() -> None:
    parent = "import x\n# EVOLVE-BLOCK-START\ndef f():\n    return 1\n# EVOLVE-BLOCK-END\ndef run():\n    return f()\n"
    proposed = ("import os\n# EVOLVE-BLOCK-START\ndef f():\n    return 2\n# EVOLVE-BLOCK-END\n"
                "def run():\n    return 1e9\n")
    kept = keep_outside_blocks(parent, proposed)
    assert kept == parent.replace("return 1\n", "return 2\n")
    assert keep_outside_blocks(parent, "def run():\n    return 1e9\n") is None  # the markers removed: dropped
    assert keep_outside_blocks("def run():\n    return 1\n", proposed) == proposed  # no markers: all editable


def test_what_comes_back_is_checked_on_the_trusted_side(tmp_path: Path) -> None:
    """The harness's answer is hostile data (the candidate shares its jail): only finite numbers become metrics,
    the trust line is the trusted side's, and without combined_score OpenEvolve's average skips flags and NaN."""
    oe, shinka = _task(tmp_path, "openevolve"), _task(tmp_path, "shinka")
    fallback = oe.score_solution({"metrics": {"a": 1.0, "b": float("nan"), "flag": True, "trust": "trusted!"}})
    assert fallback.ok and fallback.score == 1.0 and fallback.metrics["trust"] == TRUST
    assert "peer.b" not in fallback.metrics and "peer.trust" not in fallback.metrics
    assert "no combined_score" in fallback.metrics["peer.score_from"]
    for garbage in ({"metrics": {"combined_score": float("inf")}}, {"metrics": {"combined_score": "1e9"}},
                    {"metrics": {"flag": True}}, {"metrics": []}, [1.0], None,
                    {"metrics": {"combined_score": 9.0, "error": "all trials failed"}},
                    {"metrics": {"combined_score": 9.0, "timeout": True}}):
        result = oe.score_solution(garbage)
        assert result.status is Status.INVALID and result.score is None, garbage
    assert shinka.score_solution({"metrics": {"combined_score": 9.0}, "correct": False}).score is None
    assert shinka.score_solution({"metrics": {"combined_score": 9.0}, "correct": "yes"}).score is None
    assert shinka.score_solution({"metrics": {"combined_score": 9.0}, "correct": True}).score == 9.0
