"""The agent's test doubles live with the layer each doubles (issue 31); ``reasearch.agent.testing`` still
hands out every old name, and the two fake model servers share one request handling."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import reasearch.agent.testing as agent_testing
import reasearch.engine.testing as engine_testing
import reasearch.models.testing as models_testing
import reasearch.runs.testing as runs_testing
from reasearch.models.testing import FakeAnthropicServer, FakeJSONServer, FakeOpenAIServer, say

HOMES = {
    models_testing: ["FakeAnthropicServer", "FakeOpenAIServer", "ScriptedModel", "call", "chat_completion_json",
                     "messages_api_json", "say"],
    runs_testing: ["InstanceExecutor", "executed", "ledger_map", "memory_run"],
    engine_testing: ["StaticRunner"],
}


def test_every_old_name_is_the_double_of_its_own_layer() -> None:
    assert sorted(agent_testing.__all__) == sorted(n for names in HOMES.values() for n in names)
    for home, names in HOMES.items():
        for name in names:
            assert name in home.__all__
            assert getattr(agent_testing, name) is getattr(home, name), name


def _post(url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, str], Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, json.loads(exc.read() or b"null")


def test_both_fake_servers_answer_failures_alike_through_one_base() -> None:
    with FakeAnthropicServer([say("hi")], fail_first=[429]) as anthropic, \
            FakeOpenAIServer(lambda body: say("hi"), fail_first=[503]) as openai:
        assert isinstance(anthropic, FakeJSONServer) and isinstance(openai, FakeJSONServer)
        a = _post(f"{anthropic.url}/v1/messages", {"model": "m"}, {"x-api-key": "k"})
        o = _post(f"{openai.url}/chat/completions", {"model": "m"}, {})
        for _, headers, _ in (a, o):
            assert headers["retry-after"] == "0" and headers["content-type"] == "application/json"
        assert (a[0], a[2]["error"]["type"]) == (429, "rate_limit_error")
        assert (o[0], o[2]) == (503, {"error": {"message": "fake 503"}})
        ok_a = _post(f"{anthropic.url}/v1/messages", {"model": "m"}, {"x-api-key": "k"})
        ok_o = _post(f"{openai.url}/chat/completions", {"model": "m"}, {})
        assert ok_a[0] == ok_o[0] == 200 and "retry-after" not in ok_a[1] and "retry-after" not in ok_o[1]
        assert ok_a[2]["content"] == [{"type": "text", "text": "hi"}]
        assert ok_o[2]["choices"][0]["message"]["content"] == "hi"
        assert len(anthropic.requests) == len(openai.requests) == 2
        with pytest.raises(urllib.error.HTTPError) as err:  # the Messages API fake serves no GET (as before)
            urllib.request.urlopen(f"{anthropic.url}/v1/messages", timeout=10)
        assert err.value.code == 501
        with urllib.request.urlopen(f"{openai.url}/models", timeout=10) as resp:
            assert json.loads(resp.read())["data"][0]["id"] == "fake"


def test_the_run_doubles_need_no_pytest() -> None:
    """``reasearch bench`` runs its agent section on memory_run after a plain ``pip install -e .``."""
    code = ("import sys; sys.modules['pytest'] = None\n"
            "from reasearch.runs.testing import memory_run, executed\n"
            "from reasearch.engine.testing import StaticRunner\n"
            "from reasearch.evaluators.testing import ToyTask\n"
            "run = memory_run(ToyTask(dim=2), {'evaluations': 2}, runner=StaticRunner())\n"
            "r = run.evaluate('def run():\\n    return [1.0, 1.0]\\n', step=0)\n"
            "print(r.status.value, executed(run))\n")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root,
                         env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["OK", "1"]
