"""The agent under a misbehaving endpoint, the context size after a continued reply, a budget that
allows nothing, what a person sees (event lines, the live panel), the final files, models with a
cheap first attempt and a fallback, the sandbox under a private temp dir, and the lessons library."""

from __future__ import annotations

import io
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import kinds_by_step, toy_source
from misbehaving import BODIES, always

from reasearch.agent import AgentConfig, AnthropicModel, ModelSpec, OpenAICompatibleModel, RetryPolicy
from reasearch.agent.console import RunConsole, sparkline, summary_lines
from reasearch.agent.launch import check_budget, start_run
from reasearch.agent.lessons import lesson_items
from reasearch.agent.loop import require_prices
from reasearch.engine.protocol import Status
from reasearch.errors import ConfigError, ModelError
from reasearch.evaluators.base import candidate_sha256
from reasearch.models.messages import ModelReply, ModelRequest, StopReason, Usage
from reasearch.models.testing import call, say
from reasearch.runs import Budget, Unit
from reasearch.runs.testing import ledger_map, memory_run

BETTER = toy_source([2.0, 2.5])
BEST = toy_source([3.0, 3.0])
REQUEST = ModelRequest("system", [{"role": "user", "content": "hi"}], [])


# ---------------------------------------------------------------- endpoint failures
@pytest.mark.parametrize("provider", ["anthropic", "openai"])
@pytest.mark.parametrize("kind", sorted(BODIES))
def test_a_malformed_200_is_retried_then_a_model_error(provider: str, kind: str) -> None:
    sleeps: list[float] = []
    retry = RetryPolicy(max_attempts=3, sleep=sleeps.append)
    with always(kind) as server:
        if provider == "anthropic":
            model: Any = AnthropicModel(
                ModelSpec(name="claude-haiku-4-5", base_url=server.url), api_key="k", retry=retry
            )
        else:
            model = OpenAICompatibleModel(
                ModelSpec(provider="openai", name="q", base_url=server.url + "/v1"), retry=retry
            )
        with pytest.raises(ModelError, match="answered 3 times with something that is not") as info:
            model.complete(REQUEST)
    assert server.requests == 3 and len(sleeps) == 2  # retried under the policy, with its backoff
    assert "\n" not in str(info.value)  # an HTML page's lines are folded: the message stays one line


def test_a_malformed_reply_between_good_ones_is_retried_transparently() -> None:
    from misbehaving import HTML, RawServer

    from reasearch.models.testing import messages_api_json

    good = str.encode(__import__("json").dumps(messages_api_json(say("fine"))))
    with RawServer([(200, "text/html", HTML), (200, "application/json", good)]) as server:
        model = AnthropicModel(ModelSpec(name="claude-haiku-4-5", base_url=server.url), api_key="k",
                               retry=RetryPolicy(max_attempts=3, sleep=lambda s: None))
        assert model.complete(REQUEST).text == "fine"
    assert server.requests == 2


class _Broken:
    name = "broken-client"

    def complete(self, request: ModelRequest) -> ModelReply:
        raise AttributeError("'str' object has no attribute 'content'")


def test_any_client_exception_interrupts_the_run_with_the_reason(make_agent: Any) -> None:
    agent, run = make_agent([])
    agent.models["agent"] = _Broken()
    with pytest.raises(ModelError, match="broken-client failed: AttributeError"):
        agent.optimize()
    assert run.state == "interrupted" and "AttributeError" in run.store.get_run(run.id).reason


# ---------------------------------------------------------------- context size
def test_context_after_a_continued_reply_comes_from_the_last_call(make_agent: Any) -> None:
    cut = ModelReply(({"type": "text", "text": "I will evaluate the se"},), StopReason.MAX_TOKENS, Usage(3000, 400))
    rest = ModelReply(tuple(say("ed now.", call("evaluate")).content), StopReason.TOOL_USE, Usage(3400, 10))
    agent, run = make_agent([cut, rest, say("", call("finish", reason="done"))], compact_threshold_tokens=5000)
    seen: list[int] = []
    agent.on_progress = lambda p: seen.append(p.context_tokens)
    agent.optimize()
    assert seen[0] == 3410  # the second call's prompt already held the first part: 3400 + 10, not 6810
    assert run.used()[Unit.TOKENS] >= 6810  # the ledger keeps every call
    assert "compaction" not in [e.kind for e in run.events()]  # 6.8k counted would have compacted at 5k


# ---------------------------------------------------------------- a budget that allows nothing
@pytest.mark.parametrize("caps", [{"evaluations": 0}, {"evaluations": 0.5}, {"evaluations": 5, "dollars": 0},
                                  {"evaluations": 5, "tokens": 0}, {"evaluations": 5, "model_calls": 0}])
def test_a_cap_that_allows_nothing_is_refused_before_a_run_exists(caps: dict[str, float], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="allows nothing"):
        check_budget(Budget.from_dict(caps))
    with pytest.raises(ConfigError, match="allows nothing"):
        start_run("heilbronn/n11-v1", budget=caps, run_dir=tmp_path,
                  config=AgentConfig(models={"agent": ModelSpec(provider="scripted", name="")}))
    assert not (tmp_path / "store.sqlite").exists()


# ---------------------------------------------------------------- what a person sees
def test_plain_output_is_one_line_per_event(make_agent: Any) -> None:
    script = [say("", call("evaluate")),
              say("", call("evaluate", code=BETTER)),
              say("", call("bash", command="printf '# Lessons\\n- move both coordinates up\\n' > lessons.md")),
              say("", call("compact")),
              say("", call("evaluate", code=toy_source([0.0, 0.5]))),
              say("", call("get_status")),
              say("", call("finish", reason="better is best"))]
    def exec_fn(argv: list[str], **kw: Any) -> Any:  # a bash that writes lessons.md (no write_file call)
        (kw["workdir"] / "lessons.md").write_text("# Lessons\n- move both coordinates up\n")
        return _Out(Status.OK, 0)

    agent, _ = make_agent(script, summarizer=[say("summary")], max_turns=6, exec_fn=exec_fn)
    out = io.StringIO()
    from rich.console import Console

    with RunConsole(Console(file=out, width=100), agent, "t") as display:
        agent.on_progress = display
        agent.optimize()
    lines = out.getvalue().splitlines()
    steps = [int(re.match(r"\[step (\d+)\] ", ln).group(1)) for ln in lines]  # type: ignore[union-attr]
    assert steps == sorted(steps)
    body = [ln.split("] ", 1)[1] for ln in lines]
    seed = candidate_sha256(agent.task.seed_program())[:12]
    assert body[0] == f"evaluation 1: OK score -18 - new best  [candidate {seed}]"
    assert body[1] == f"evaluation 2: OK score -1.25 - new best (was -18)  [candidate {candidate_sha256(BETTER)[:12]}]"
    assert body[2] == "lessons.md updated (2 lines)"
    assert body[3].startswith("compaction: the agent called compact(); ~") and "transcript transcripts/" in body[3]
    assert body[4].startswith("evaluation 3: OK score -15.25  [candidate")  # not a new best
    assert body[5] == "wrap-up turn: the turn limit (6) is reached; the agent may only call finish"
    assert body[6] == (f"final: candidate {candidate_sha256(BETTER)[:12]} score -1.25 chosen by agent "
                       "(the agent called finish)")
    assert len(lines) == 7  # nothing repainted, no table
    assert not any(ch in out.getvalue() for ch in "┃━│")


def test_the_live_panel_shows_the_score_against_evaluations(make_agent: Any) -> None:
    from rich.console import Console

    script = [say("", call("evaluate")), say("", call("evaluate", code=BETTER)), say("", call("evaluate", code=BEST)),
              say("", call("finish", reason="optimum"))]
    agent, _ = make_agent(script)
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=True)
    with RunConsole(console, agent, "live") as display:
        assert display.live_mode
        agent.on_progress = display
        agent.optimize()
        panel = display.panel(display._last)
    rendered = io.StringIO()
    Console(file=rendered, width=120, force_terminal=False).print(panel)
    text = rendered.getvalue()
    assert "▁██" in text  # -18, -1.25, 0 scaled: lowest, then the two near the top
    assert re.search(r"│ 3 evaluations; best 0 +│", text) and "best score" in text


def test_sparkline_scales_and_leaves_gaps() -> None:
    assert sparkline([0.0, None, 1.0, 0.5]) == "▁ █▅"
    assert sparkline([2.0, 2.0]) == "██" and sparkline([None]) == ""


def test_the_final_candidate_gets_its_own_file_and_a_summary(make_agent: Any, tmp_path: Path) -> None:
    # The agent evaluates BEST, then leaves a worse program in candidate.py before finishing on BEST.
    script = [say("", call("evaluate", code=BEST)), say("", call("write_file", path="candidate.py", content=BETTER)),
              say("", call("finish", reason="best", candidate_id=candidate_sha256(BEST)[:12]))]
    agent, _ = make_agent(script)
    result = agent.optimize()
    ws = agent.workspace.root
    assert (ws / "candidate.py").read_text() == BETTER and (ws / "best_candidate.py").read_text() == BEST
    assert agent.final_files["candidate"] == str(ws / "best_candidate.py")
    assert "picture" not in agent.final_files  # the toy task cannot draw
    lines = summary_lines(agent, result, tmp_path / "runs", agent.final_files)
    text = "\n".join(lines)
    assert f"final candidate {candidate_sha256(BEST)[:12]} score 0" in lines[0]
    assert "spent: 1 evaluations of 10, 3 model calls," in text and "tokens, $0.0000," in text
    assert "active wall time, 3 turns" in text
    for cmd in ("reasearch report", "reasearch show", "reasearch replay", "reasearch resume"):
        assert f"{cmd} {result.run_id} --run-dir {tmp_path / 'runs'}" in text


# ---------------------------------------------------------------- the sandbox under a private temp dir
def test_python_exec_and_bash_work_in_a_run_dir_under_a_0700_parent(make_agent: Any) -> None:
    from reasearch.engine import detect_isolation

    if not detect_isolation().nsjail_ok and os.environ.get("REASEARCH_REQUIRE_NSJAIL") != "1":
        pytest.skip("nsjail cannot run here (the jail uid question does not arise in process mode)")
    private = Path(tempfile.mkdtemp(prefix="reasearch-private-"))  # 0700, like any mkdtemp
    try:
        assert private.stat().st_mode & 0o777 == 0o700
        from reasearch.agent import Agent
        from reasearch.engine.testing import StaticRunner
        from reasearch.evaluators.testing import ToyTask
        from reasearch.models.testing import ScriptedModel
        from reasearch.runs.testing import memory_run

        run = memory_run(ToyTask(dim=2), Budget.from_dict({"evaluations": 3}), runner=StaticRunner())
        script = [say("", call("python_exec", code="open('from_python.txt', 'w').write('py'); print('hello')"),
                      call("bash", command="echo sh > from_bash.txt && cat from_python.txt")),
                  say("", call("evaluate"), call("finish", reason="seed"))]
        agent = Agent(
            run,
            private / "runs" / "r1",
            models={"agent": ScriptedModel(script)},
            config=AgentConfig(models={"agent": ModelSpec(provider="scripted", name="")}, sandbox_mode="nsjail"),
        )
        agent.optimize()
        results = [
            e.payload for e in run.events() if e.kind == "tool_result" and e.payload["name"] in ("python_exec", "bash")
        ]
        assert [r["is_error"] for r in results] == [False, False], results
        assert results[0]["text"].startswith("[status OK, exit code 0") and "sandbox=nsjail" in results[0]["text"]
        assert "stdout:\npy" in results[1]["text"]
        ws = agent.workspace.root
        assert (ws / "from_python.txt").read_text() == "py" and (ws / "from_bash.txt").read_text() == "sh\n"
        assert private.stat().st_mode & 0o777 == 0o700  # the user's folder stayed closed
    finally:
        import shutil

        shutil.rmtree(private, ignore_errors=True)


# ---------------------------------------------------------------- models per role, cheap first
@dataclass(frozen=True)
class _Out:
    status: Status
    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    wall_s: float = 0.1
    cpu_s: float = 0.1
    sandbox_mode: str = "process"


def _fallback_agent(make_agent: Any, cheap: list[Any], strong: list[Any], exec_fn: Any, **kw: Any) -> Any:
    from reasearch.models.testing import ScriptedModel

    agent, run = make_agent([say("", call("edit_code", instruction="go to [3, 3]")), say("", call("evaluate")),
                             say("", call("finish", reason="done"))], editor=cheap, exec_fn=exec_fn, **kw)
    agent.models["editor:fallback"] = ScriptedModel(strong, name="strong-editor")
    return agent, run


def _ok_exec(argv: list[str], **kw: Any) -> _Out:
    return _Out(Status.OK, 0)


@pytest.mark.parametrize("bad, why", [
    ("I would rather not write code.", "no ```python block"),
    ("```python\ndef run(:\n```", "does not compile"),
    ("```python\ndef main():\n    return [3.0, 3.0]\n```", "defines no run()"),
])
def test_a_cheap_edit_that_fails_its_check_is_redone_by_the_fallback(make_agent: Any, bad: str, why: str) -> None:
    agent, run = _fallback_agent(make_agent, [say(bad)], [say(f"```python\n{BEST}```")], _ok_exec)
    result = agent.optimize()
    assert result.final_score == 0.0 and (agent.workspace.root / "candidate.py").read_text() == BEST
    step = next(s for s, kinds in kinds_by_step(run).items() if "edit_reply" in kinds)
    assert kinds_by_step(run)[step] == ["tool_call", "edit_reply", "fallback.edit_reply", "edit_reply.fallback",
                                        "tool_result"]
    fb = next(e.payload for e in run.events() if e.kind == "fallback.edit_reply")
    assert why in fb["reason"] and (fb["from"], fb["to"]) == ("editor-model", "strong-editor")
    notes = sorted(k[2] for k in ledger_map(run) if k[0] == step and k[1] is Unit.MODEL_CALLS)
    assert notes == ["editor:edit_reply", "editor:fallback:edit_reply.fallback"]  # both attempts debited


def test_an_edit_that_does_not_import_goes_to_the_fallback(make_agent: Any) -> None:
    seen: list[list[str]] = []

    def exec_fn(argv: list[str], **kw: Any) -> _Out:
        seen.append(argv)
        (check,) = kw["workdir"].glob(".edit-check-*.py")
        assert argv[-1].count(str(check)) == 1
        code = check.read_text()
        return _Out(Status.CRASH, 1, stderr="ModuleNotFoundError: No module named 'nope'") if "nope" in code \
            else _Out(Status.OK, 0)

    cheap = "```python\nimport nope\n\ndef run():\n    return [1.0, 1.0]\n```"
    agent, run = _fallback_agent(make_agent, [say(cheap)], [say(f"```python\n{BEST}```")], exec_fn)
    agent.optimize()
    fb = next(e.payload for e in run.events() if e.kind == "fallback.edit_reply")
    assert "does not import (CRASH" in fb["reason"] and "No module named 'nope'" in fb["reason"]
    assert len(seen) == 1 and seen[0][0] == "python3"  # the cheap edit was import-checked; the fallback's is used as is
    assert not list(agent.workspace.root.glob(".edit-check-*"))
    assert (agent.workspace.root / "candidate.py").read_text() == BEST


def test_a_good_cheap_edit_never_calls_the_fallback(make_agent: Any) -> None:
    agent, run = _fallback_agent(make_agent, [say(f"```python\n{BEST}```")], [], _ok_exec)
    agent.optimize()
    assert agent.models["editor:fallback"].requests == []
    assert not any(e.kind.startswith("fallback") for e in run.events())


def test_a_fallback_run_resumes_without_calling_any_model_again(make_agent: Any, tmp_path: Path) -> None:
    from reasearch.agent import Agent
    from reasearch.models.testing import ScriptedModel

    agent, run = _fallback_agent(make_agent, [say("no code")], [say(f"```python\n{BEST}```")], _ok_exec)
    agent.optimize()
    used = run.used()
    run.store.db.execute("DELETE FROM events WHERE run_id = ? AND kind = ?", (run.id, "final"))
    twin = Agent(run, tmp_path / "run", config=agent.config, exec_fn=_ok_exec,
                 models={"agent": ScriptedModel([]), "editor": ScriptedModel([]), "summarizer": ScriptedModel([]),
                         "editor:fallback": ScriptedModel([])})
    assert twin.optimize().final_score == 0.0
    assert run.used() == used  # nothing debited twice, no model called


def test_fallback_specs_are_typed_and_need_prices_under_a_dollar_cap() -> None:
    with pytest.raises(ConfigError, match="unknown fallback role"):
        AgentConfig(fallbacks={"critic": ModelSpec()})
    cfg = AgentConfig(models={"agent": ModelSpec(name="claude-haiku-4-5")},
                      fallbacks={"editor": {"provider": "openai", "name": "big", "base_url": "http://127.0.0.1:9/v1"}})
    assert AgentConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="no price is known for the editor fallback model 'big'"):
        require_prices(cfg)


# ---------------------------------------------------------------- lessons
def test_lesson_items_join_continuations_and_drop_library_credits() -> None:
    text = (
        "# Lessons\n\n## What worked\n- rows of 5,5,6,5,5\n  beat the hex grid\n* LP radii _(run "
        "20261201-102154-82d3d587 on "
        "t/n1-v1, step 3, gain +0.1, also in 2 other runs)_\n1. third\n## What failed\nplain prose is not an item\n"
    )
    assert lesson_items(text) == ["rows of 5,5,6,5,5 beat the hex grid", "LP radii", "third"]


# ---------------------------------------------------------------- hostile leftovers at the final files' names
def test_final_files_replace_planted_symlinks_instead_of_following_them(tmp_path: Path) -> None:
    import json

    from reasearch.agent import Agent
    from reasearch.engine.testing import StaticRunner
    from reasearch.evaluators.testing import ToyTask
    from reasearch.models.testing import ScriptedModel

    class DrawingToy(ToyTask):
        def render_png(self, result: Any, path: Any) -> Path:
            Path(path).write_bytes(b"\x89PNG fake " + json.dumps(result.solution).encode())
            return Path(path)

    outside = tmp_path / "outside"
    outside.mkdir()
    victims = {name: outside / name for name in ("code.txt", "picture.txt", "tmp.txt")}
    for v in victims.values():
        v.write_text("precious")
    run = memory_run(DrawingToy(dim=2), Budget.from_dict({"evaluations": 3}), runner=StaticRunner())
    script = [say("", call("evaluate", code=BEST)), say("", call("finish", reason="best"))]
    agent = Agent(run, tmp_path / "run", models={"agent": ScriptedModel(script)},
                  config=AgentConfig(models={"agent": ModelSpec(provider="scripted", name="")}))
    ws = agent.workspace.root
    os.symlink(victims["code.txt"], ws / "best_candidate.py")  # what a jailed `ln -s` would leave
    os.symlink(victims["picture.txt"], ws / "best_candidate.png")
    os.symlink(victims["tmp.txt"], ws / ".best_candidate.py.tmp")
    agent.optimize()
    assert all(v.read_text() == "precious" for v in victims.values())
    assert not (ws / "best_candidate.py").is_symlink() and (ws / "best_candidate.py").read_text() == BEST
    assert (ws / "best_candidate.png").read_bytes() == b'\x89PNG fake {"x": [3.0, 3.0]}'
    assert agent.final_files["picture"] == str(ws / "best_candidate.png")
    assert not [p for p in ws.iterdir() if p.name.startswith(".best_candidate-")]  # no temp file left


def test_a_directory_at_the_final_name_is_reported_not_raised(make_agent: Any) -> None:
    agent, _ = make_agent([say("", call("evaluate", code=BEST)), say("", call("finish", reason="best"))])
    (agent.workspace.root / "best_candidate.py").mkdir()
    result = agent.optimize()
    assert result.final_score == 0.0 and "is a directory" in agent.final_files["candidate_note"]


def test_lessons_collect_reads_no_symlink_and_waits_on_no_fifo(tmp_path: Path) -> None:
    from reasearch.agent.lessons import _read_plain

    secret = tmp_path / "secret"
    secret.write_text("- the root password is hunter2\n")
    link = tmp_path / "lessons.md"
    os.symlink(secret, link)
    assert _read_plain(link) is None
    fifo = tmp_path / "fifo.md"
    os.mkfifo(fifo)
    assert _read_plain(fifo) is None  # returns at once: no writer is waited for
    big = tmp_path / "big.md"
    big.write_text("- " + "x" * 400_000 + "\n")
    text = _read_plain(big)
    assert text is not None and len(text) == 256 * 1024
    assert len(lesson_items(text)[0]) == 1003  # one lesson is capped at 1000 characters (+ "...")


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_an_oversized_answer_is_malformed_not_read_to_the_end(provider: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from misbehaving import RawServer

    import reasearch.models.anthropic as anthropic_mod
    import reasearch.models.openai_compat as openai_mod

    monkeypatch.setattr(anthropic_mod, "MAX_REPLY_BYTES", 4096)
    monkeypatch.setattr(openai_mod, "MAX_REPLY_BYTES", 4096)
    body = b'{"content": [{"type": "text", "text": "' + b"x" * 100_000 + b'"}]}'
    retry = RetryPolicy(max_attempts=2, sleep=lambda s: None)
    with RawServer([(200, "application/json", body)]) as server:
        model: Any = (
            AnthropicModel(ModelSpec(name="claude-haiku-4-5", base_url=server.url), api_key="k", retry=retry)
            if provider == "anthropic"
            else OpenAICompatibleModel(ModelSpec(provider="openai", name="q", base_url=server.url + "/v1"), retry=retry)
        )
        with pytest.raises(ModelError, match="a body over 4,096 bytes"):
            model.complete(REQUEST)
    assert server.requests == 2


def test_a_cheap_model_that_errors_falls_back_and_a_resume_never_calls_it_again(
    make_agent: Any, tmp_path: Path
) -> None:
    from reasearch.agent import Agent
    from reasearch.models.testing import ScriptedModel

    class Down:
        name = "cheap-down"
        calls = 0

        def complete(self, request: ModelRequest) -> ModelReply:
            Down.calls += 1
            raise ModelError("cannot reach http://127.0.0.1:9/v1/chat/completions: refused")

    agent, run = _fallback_agent(make_agent, [], [say(f"```python\n{BEST}```")], _ok_exec)
    agent.models["editor"] = Down()
    assert agent.optimize().final_score == 0.0
    fb = next(e.payload for e in run.events() if e.kind == "fallback.edit_reply")
    assert fb["from"] == "cheap-down" and "no usable reply: cannot reach" in fb["reason"]
    assert Down.calls == 1
    run.store.db.execute("DELETE FROM events WHERE run_id = ? AND kind = ?", (run.id, "final"))
    used = run.used()
    twin = Agent(run, tmp_path / "run", config=agent.config, exec_fn=_ok_exec,
                 models={"agent": ScriptedModel([]), "editor": Down(), "summarizer": ScriptedModel([]),
                         "editor:fallback": ScriptedModel([])})
    assert twin.optimize().final_score == 0.0
    assert Down.calls == 1 and run.used() == used  # the resume replayed the fallback without calling anyone


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_a_connection_cut_mid_body_is_retried_then_a_model_error(provider: str) -> None:
    from misbehaving import CutServer

    retry = RetryPolicy(max_attempts=2, sleep=lambda s: None)
    with CutServer() as server:
        model: Any = (
            AnthropicModel(ModelSpec(name="claude-haiku-4-5", base_url=server.url), api_key="k", retry=retry)
            if provider == "anthropic"
            else OpenAICompatibleModel(ModelSpec(provider="openai", name="q", base_url=server.url + "/v1"), retry=retry)
        )
        with pytest.raises(ModelError) as info:
            model.complete(REQUEST)
    assert server.requests == 2
    assert "peer closed connection" in str(info.value) or "not JSON" in str(info.value)
