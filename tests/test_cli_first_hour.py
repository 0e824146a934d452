"""A new user's first hour (issue 27): each test drives the ``reasearch`` command as a user does.

Model endpoints are local fakes (:class:`FakeOpenAIServer`, :class:`FakeAnthropicServer`): nothing
leaves the machine, and every run is deterministic.
"""

from __future__ import annotations

import json
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reasearch.agent.testing import FakeAnthropicServer, FakeOpenAIServer, call, say
from reasearch.cli import main
from reasearch.models.messages import ModelReply
from reasearch.runs import open_store


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """Under /var/tmp: the sandbox uid must reach the workspaces."""
    d = Path(tempfile.mkdtemp(prefix="reasearch-first-hour-", dir="/var/tmp"))
    d.chmod(0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _evaluate_then_finish(messages: list[Any]) -> ModelReply:
    """First turn: evaluate the seed; then finish (decided from the conversation, so stateless)."""
    if not any(m.get("role") == "assistant" for m in messages):
        return say("Baseline first.", call("evaluate"))
    return say("Done.", call("finish", reason="the seed is the best scored"))


# ---------------------------------------------------------------- item 1: the README's fleet command
# The README's fleet example, verbatim but for the local endpoint (its optional [...] parts left out).
README_FLEET = ("reasearch fleet run --task circle_packing/n26-v1 --task heilbronn/n11-v1 --seeds 0-4 "
                "--model claude-sonnet-4-6 --model openai/qwen2.5-coder --base-url http://127.0.0.1:11434/v1 "
                "--budget 50 --fleet-dollars 20 --parallelism 4")


def test_the_readmes_fleet_command_runs_against_local_endpoints(run_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with FakeOpenAIServer(lambda body: _evaluate_then_finish(body["messages"])) as oa, \
            FakeAnthropicServer([lambda body: _evaluate_then_finish(body["messages"])] * 40) as an:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", an.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
        argv = shlex.split(README_FLEET.replace("http://127.0.0.1:11434/v1", oa.url))[1:]
        code = main([*argv, "--run-dir", str(run_dir), "--json", "--quiet"])
        out = capsys.readouterr()
        assert code == 0, out.err
        data = json.loads(out.out)
        assert len(data["members"]) == 20 and {m["state"] for m in data["members"]} == {"finished"}
        assert len(oa.requests) == 20 and {r["model"] for r in oa.requests} == {"qwen2.5-coder"}
        assert len(an.requests) == 20 and {r["model"] for r in an.requests} == {"claude-sonnet-4-6"}


def test_a_fleet_specs_base_url_reaches_its_openai_members(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeOpenAIServer(lambda body: _evaluate_then_finish(body["messages"])) as oa:
        spec = run_dir / "fleet.toml"
        spec.write_text(f'tasks = ["circle_packing/n26-v1"]\nmodels = ["openai/qwen"]\nbase_url = "{oa.url}"\n'
                        'budget = {evaluations = 3}\n')
        assert main(["fleet", "run", "--spec", str(spec), "--run-dir", str(run_dir), "--json", "--quiet"]) == 0
        assert json.loads(capsys.readouterr().out)["members"][0]["state"] == "finished"
        assert len(oa.requests) == 2
