"""Model clients: scripted replays, prices, the OpenAI-compatible client and the Anthropic client
(the real SDK against a local fake of the Messages API; no network)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reasearch.errors import ConfigError, ModelError
from reasearch.models import (
    NO_KEY_MESSAGE,
    AnthropicModel,
    ModelSpec,
    OpenAICompatibleModel,
    Price,
    RetryPolicy,
    ScriptedModel,
    build_model,
    call,
    price_for,
    say,
)
from reasearch.models.messages import ModelReply, ModelRequest, StopReason, ToolSchema, Usage
from reasearch.models.openai_compat import to_openai_messages
from reasearch.models.testing import FakeAnthropicServer, FakeJSONServer
from reasearch.runs import Unit
from reasearch.runs.model_budget import HARD_UNITS, spent_hard_cap
from reasearch.runs.testing import memory_run

TOOLS = [ToolSchema("evaluate", "Scores the program.", {"type": "object", "properties": {"code": {"type": "string"}},
                                                         "required": [], "additionalProperties": False})]


def _request(text: str = "hi") -> ModelRequest:
    return ModelRequest("You optimize.", [{"role": "user", "content": [{"type": "text", "text": text}]}], TOOLS)


class _Sleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


# ---------------------------------------------------------------- scripted
def test_scripted_model_replays_in_order_and_estimates_usage(tmp_path: Path) -> None:
    first = say("thinking", call("evaluate", code="x"))
    model = ScriptedModel([first, lambda req: say(f"saw {len(req.messages)} messages")], price=Price(1.0, 2.0))
    r1 = model.complete(_request("a" * 400))
    assert r1.content == first.content and r1.stop_reason is StopReason.TOOL_USE
    assert r1.usage.input_tokens > 100  # 400 characters of prompt alone are 100 tokens at 4 characters each
    assert r1.cost_usd == pytest.approx((r1.usage.input_tokens * 1.0 + r1.usage.output_tokens * 2.0) / 1e6)
    assert model.complete(_request()).text == "saw 1 messages"
    assert model.remaining == 0 and len(model.requests) == 2
    with pytest.raises(ModelError, match="no reply left"):
        model.complete(_request())


def test_scripted_model_keeps_reported_usage_and_loads_files(tmp_path: Path) -> None:
    reply = ModelReply(({"type": "text", "text": "x"},), StopReason.MAX_TOKENS, Usage(10, 20), 0.5, "m")
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"replies": [reply.to_dict(), reply.to_dict()]}))
    model = ScriptedModel.from_file(path)
    got = model.complete(_request())
    assert got.usage == Usage(10, 20) and got.cost_usd == 0.5 and got.truncated
    model.advance(5)
    assert model.remaining == 0
    assert model.name == "scripted:script.json"
    assert build_model(ModelSpec(provider="scripted", name=str(path))).complete(_request()).text == "x"


def test_reply_round_trip_and_properties() -> None:
    reply = say("", call("finish", reason="done"))
    again = ModelReply.from_dict(json.loads(json.dumps(reply.to_dict())))
    assert again == reply
    assert [c.name for c in again.tool_calls] == ["finish"] and not again.is_empty
    assert say("   ").is_empty and say("   ").as_message()["content"] == [{"type": "text", "text": "(no reply)"}]
    assert say(" ", call("get_status")).as_message()["content"][0]["type"] == "tool_use"
    assert ModelReply((), StopReason.END_TURN).as_message()["content"][0]["text"] == "(no reply)"


# ---------------------------------------------------------------- specs and prices
def test_prices_by_longest_prefix_and_cost() -> None:
    assert price_for("claude-sonnet-4-5-20250929") == Price(3.0, 15.0)
    assert price_for("claude-opus-4-5") == Price(5.0, 25.0)
    assert price_for("claude-opus-4-1-2025") == Price(15.0, 75.0)
    assert price_for("my-local-model") is None
    usage = Usage(input_tokens=1000, output_tokens=500, cache_read_tokens=10_000, cache_write_tokens=2000)
    # 1000*3 + 500*15 + 10000*0.3 + 2000*3.75 = 3000 + 7500 + 3000 + 7500 = 21000 (per million)
    assert Price(3.0, 15.0).cost(usage) == pytest.approx(0.021)


def test_model_spec_parse_validate_round_trip() -> None:
    assert ModelSpec.parse("claude-haiku-4-5") == ModelSpec(provider="anthropic", name="claude-haiku-4-5")
    spec = ModelSpec.parse("openai/qwen2.5", base_url="http://127.0.0.1:1/v1", price_in=0.1, price_out=0.2)
    assert spec.provider == "openai" and spec.price == Price(0.1, 0.2)
    assert ModelSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(ConfigError, match="base URL"):
        ModelSpec(provider="openai", name="x")
    with pytest.raises(ConfigError, match="unknown model spec keys"):
        ModelSpec.from_dict({"provider": "anthropic", "nme": "x"})
    with pytest.raises(ConfigError, match="both price_in and price_out"):
        ModelSpec(price_in=1.0)


def test_retry_delay_honours_retry_after_and_grows() -> None:
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=8.0)
    assert policy.delay(0, retry_after=2.5) == 2.5
    assert policy.delay(3, retry_after=100) == 8.0
    assert 0.5 <= policy.delay(0) <= 1.0 and 4.0 <= policy.delay(3) <= 8.0 and policy.delay(10) <= 8.0


# ---------------------------------------------------------------- OpenAI-compatible
def test_to_openai_messages_translates_tool_use_and_results() -> None:
    msgs = [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "ok"},
                {"type": "tool_use", "id": "t1", "name": "evaluate", "input": {"code": "x"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "bad", "is_error": True},
                {"type": "text", "text": "snapshot"},
            ],
        },
    ]
    assert to_openai_messages("sys", msgs) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "ok", "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "evaluate", "arguments": '{"code": "x"}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "ERROR: bad"},
        {"role": "user", "content": "snapshot"},
    ]


class _ChatServer(FakeJSONServer):
    """Answers every POST with the next of ``answers`` (HTTP status, JSON payload), as the test scripts them."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[tuple[int, Any]] = []
        self.headers: list[dict[str, str]] = []

    def answer_post(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            return self.answers.pop(0)


@pytest.fixture()
def chat_server() -> Iterator[dict[str, Any]]:
    with _ChatServer() as server:
        yield {"bodies": server.requests, "headers": server.headers, "answers": server.answers,
               "url": f"{server.url}/v1"}


def test_openai_compatible_client_round_trip_with_retry(chat_server: dict[str, Any]) -> None:
    chat_server["answers"] += [
        (429, {"error": "slow down"}),
        (200, {"model": "qwen", "usage": {"prompt_tokens": 100, "completion_tokens": 20}, "choices": [{
            "finish_reason": "tool_calls",
            "message": {"content": "let me score it", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "evaluate", "arguments": '{"code": "y"}'}}]}}]}),
        (200, {"choices": [{"finish_reason": "length", "message": {"content": "cut"}}]}),
    ]
    sleeps = _Sleeps()
    spec = ModelSpec(
        provider="openai", name="qwen", base_url=chat_server["url"], price_in=1.0, price_out=2.0, max_tokens=77
    )
    model = OpenAICompatibleModel(spec, api_key="k", retry=RetryPolicy(sleep=sleeps))
    reply = model.complete(_request())
    assert len(sleeps) == 1  # one retry after the 429
    assert reply.stop_reason is StopReason.TOOL_USE and reply.text == "let me score it"
    assert [(c.id, c.name, dict(c.input)) for c in reply.tool_calls] == [("c1", "evaluate", {"code": "y"})]
    assert reply.usage == Usage(100, 20) and reply.cost_usd == pytest.approx((100 * 1.0 + 20 * 2.0) / 1e6)
    body = chat_server["bodies"][-1]
    assert body["model"] == "qwen" and body["max_tokens"] == 77
    assert body["messages"][0] == {"role": "system", "content": "You optimize."}
    assert body["tools"][0]["function"]["name"] == "evaluate"
    assert chat_server["headers"][-1]["authorization"] == "Bearer k"
    assert model.complete(_request()).truncated


def test_openai_compatible_client_gives_up_on_client_errors(chat_server: dict[str, Any]) -> None:
    chat_server["answers"].append((400, {"error": "bad request"}))
    model = OpenAICompatibleModel(ModelSpec(provider="openai", name="q", base_url=chat_server["url"]),
                                  retry=RetryPolicy(sleep=_Sleeps()))
    with pytest.raises(ModelError, match="HTTP 400"):
        model.complete(_request())
    assert len(chat_server["bodies"]) == 1


# ---------------------------------------------------------------- Anthropic (real SDK, fake server)
def test_anthropic_model_request_shape_retries_and_cost() -> None:
    reply = ModelReply(({"type": "text", "text": "hello"},
                        {"type": "tool_use", "id": "toolu_1", "name": "evaluate", "input": {"code": "z"}}),
                       StopReason.TOOL_USE, Usage(100, 200, 500, 10))  # what a request of this size can use
    sleeps = _Sleeps()
    with FakeAnthropicServer([reply], fail_first=[529, 429]) as server:
        spec = ModelSpec(name="claude-sonnet-4-6", base_url=server.url, max_tokens=321, temperature=0.5)
        model = AnthropicModel(spec, api_key="sk-test", retry=RetryPolicy(sleep=sleeps))
        got = model.complete(_request())
    assert sleeps == [0.0, 0.0]  # two retries, each after the server's retry-after: 0
    assert got.text == "hello" and got.stop_reason is StopReason.TOOL_USE
    assert [(c.name, dict(c.input)) for c in got.tool_calls] == [("evaluate", {"code": "z"})]
    assert got.usage == Usage(100, 200, 500, 10)
    # sonnet: 100*3 + 200*15 + 500*0.3 + 10*3.75 = 300 + 3000 + 150 + 37.5 per million
    assert got.cost_usd == pytest.approx(3487.5 / 1e6)
    body = server.requests[-1]
    assert server.headers[-1]["authorization"] == "Bearer sk-test"
    assert body["model"] == "claude-sonnet-4-6" and body["max_tokens"] == 321 and body["temperature"] == 0.5
    assert body["system"] == [{"type": "text", "text": "You optimize.", "cache_control": {"type": "ephemeral"}}]
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


def test_anthropic_model_raises_on_bad_request_without_retry() -> None:
    sleeps = _Sleeps()
    with FakeAnthropicServer([], fail_first=[400]) as server:
        model = AnthropicModel(ModelSpec(base_url=server.url), api_key="k", retry=RetryPolicy(sleep=sleeps))
        with pytest.raises(ModelError, match="Anthropic API error 400"):
            model.complete(_request())
    assert sleeps == [] and len(server.requests) == 1


def test_anthropic_model_without_key_says_how_to_set_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with pytest.raises(ModelError) as info:
        AnthropicModel(ModelSpec())
    assert str(info.value) == NO_KEY_MESSAGE
    assert "ANTHROPIC_API_KEY" in NO_KEY_MESSAGE and "--base-url" in NO_KEY_MESSAGE


def test_importing_the_agent_does_not_import_the_sdk() -> None:
    import subprocess
    import sys

    code = "import sys, reasearch.agent, reasearch._cli.agent; print('anthropic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"  # the SDK costs over a second to import: only a real call loads it


def test_openai_compatible_model_drives_a_full_agent_run(chat_server: dict[str, Any], tmp_path: Path) -> None:
    from reasearch.agent import Agent, AgentConfig
    from reasearch.engine.testing import StaticRunner
    from reasearch.evaluators.testing import ToyTask
    from reasearch.runs import Budget

    def tool_call(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
        return {"model": "local", "usage": {"prompt_tokens": 50, "completion_tokens": 5}, "choices": [{
            "finish_reason": "tool_calls", "message": {"content": None, "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}}]}

    chat_server["answers"] += [
        (200, tool_call("c1", "evaluate", {})),
        (200, tool_call("c2", "finish", {"reason": "ok"})),
    ]
    spec = ModelSpec(provider="openai", name="local", base_url=chat_server["url"])
    run = memory_run(ToyTask(dim=2), Budget.from_dict({"evaluations": 3}), runner=StaticRunner())
    agent = Agent(run, tmp_path / "run", config=AgentConfig(models={"agent": spec}))
    result = agent.optimize()
    assert result.chosen_by == "agent" and result.final_score == -18.0
    second = chat_server["bodies"][1]["messages"]
    assert second[-2]["role"] == "tool" and second[-2]["tool_call_id"] == "c1" and "status: OK" in second[-2]["content"]
    assert second[-1]["role"] == "user" and second[-1]["content"].startswith("## State snapshot")
    assert second[-3]["tool_calls"][0]["function"]["name"] == "evaluate"
    assert run.used()[Unit.TOKENS] == 110 and run.used()[Unit.DOLLARS] == 0.0  # a local model has no price


def test_spent_hard_cap_names_the_first_hard_unit_with_nothing_left() -> None:
    """One rule for the agent's and the methods' "no further model call": a token, dollar or model-call
    cap at or below zero; other units (evaluations) and uncapped ones (None) never stop a call."""
    assert HARD_UNITS == (Unit.TOKENS, Unit.DOLLARS, Unit.MODEL_CALLS)
    assert spent_hard_cap({}) is None
    assert spent_hard_cap({Unit.TOKENS: None, Unit.DOLLARS: 0.01, Unit.MODEL_CALLS: 1.0,
                           Unit.EVALUATIONS: 0.0}) is None
    assert spent_hard_cap({Unit.MODEL_CALLS: 0.0}) == "the model_calls budget is spent"
    assert spent_hard_cap({Unit.DOLLARS: -0.5, Unit.TOKENS: 0.0}) == "the tokens budget is spent"
    assert spent_hard_cap({Unit.TOKENS: 1.0, Unit.DOLLARS: -1e-9}) == "the dollars budget is spent"


def test_a_call_near_a_cap_is_sent_with_a_reply_limit_that_fits() -> None:
    """A call reserves its worst case (prompt + reply limit, at the price); near a token or dollar cap the
    reply limit is lowered so the worst case fits, and a prompt that alone would break the cap is refused."""
    from reasearch.models.base import ModelSpec, call_ceiling, fit_call
    from reasearch.models.messages import ModelRequest

    spec = ModelSpec(provider="openai", name="m", base_url="http://h/v1", max_tokens=1000, price_in=1.0,
                     price_out=100.0)
    request = ModelRequest("s" * 400, [{"role": "user", "content": "u" * 396}])  # ~100 + ~100 prompt tokens
    tokens, dollars = call_ceiling(request, spec)
    prompt = tokens - 1000
    assert dollars == pytest.approx((prompt * 1.0 + 1000 * 100.0) / 1e6)
    assert fit_call(request, spec) == (request, tokens, dollars)  # uncapped: as configured
    fitted = fit_call(request, spec, tokens_left=prompt + 300)
    assert fitted is not None and fitted[0].max_tokens == 300 and fitted[1] == prompt + 300
    fitted = fit_call(request, spec, dollars_left=0.05)
    assert fitted is not None and fitted[2] <= 0.05 and fitted[0].max_tokens == int((0.05 - prompt / 1e6) * 1e4)
    assert fit_call(request, spec, tokens_left=prompt) is None  # not even a one-token reply fits


# ---------------------------------------------------------------- hostile usage (issue 36 item 3)
_HOSTILE_COUNTS = [float("inf"), float("-inf"), float("nan"), 10**12, 10**500, "many", [1, [2]], {"n": 1}, True]


@pytest.mark.parametrize("raw", _HOSTILE_COUNTS, ids=repr)
def test_openai_compatible_client_clamps_hostile_usage(chat_server: dict[str, Any], raw: object) -> None:
    from reasearch.usage import PROMPT_OVERHEAD_TOKENS

    chat_server["answers"].append((200, {"usage": {"prompt_tokens": raw, "completion_tokens": raw},
                                         "choices": [{"finish_reason": "stop", "message": {"content": "fine"}}]}))
    spec = ModelSpec(provider="openai", name="q", base_url=chat_server["url"], price_in=1.0, price_out=2.0,
                     max_tokens=77)
    reply = OpenAICompatibleModel(spec, retry=RetryPolicy(sleep=_Sleeps())).complete(_request())
    sent = len(json.dumps(chat_server["bodies"][-1]).encode())
    assert reply.text == "fine" and len(chat_server["bodies"]) == 1  # answered once: not retried, not an error
    assert 0 <= reply.usage.input_tokens <= sent + PROMPT_OVERHEAD_TOKENS and 0 <= reply.usage.output_tokens <= 77
    assert 0 <= reply.cost_usd <= ((sent + PROMPT_OVERHEAD_TOKENS) * 1.0 + 77 * 2.0) / 1e6


@pytest.mark.parametrize("raw", ["1e400", "NaN", "-Infinity", "1000000000000", "1" * 401, '"many"', "[[1]]", "{}"])
def test_anthropic_client_clamps_hostile_usage(raw: str) -> None:
    model = AnthropicModel(ModelSpec(name="claude-sonnet-4-6", max_tokens=50), api_key="sk-test")
    usage = ", ".join(f'"{k}": {raw}' for k in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                                                 "cache_creation_input_tokens"))
    body = ('{"type": "message", "role": "assistant", "content": [{"type": "text", "text": "fine"}], '
            '"stop_reason": "end_turn", "usage": {' + usage + '}}')
    reply = model._reply(body.encode(), bounds=(500, 50))
    u = reply.usage
    assert reply.text == "fine" and 0 <= u.output_tokens <= 50
    assert min(u.input_tokens, u.cache_read_tokens, u.cache_write_tokens) >= 0
    assert u.input_tokens + u.cache_read_tokens + u.cache_write_tokens <= 500
