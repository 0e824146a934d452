"""A run's budget is parsed once at the edge and checked once (issue 42): one ``reasearch optimize`` and
one ``reasearch fleet run`` member each call ``require_prices`` and ``check_budget`` exactly once, and the
command line's caps go from a mapping to a ``Budget`` once and back (the stored form) once."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reasearch.agent import launch, model_calls
from reasearch.cli import main
from reasearch.models.testing import call, say
from reasearch.runs import Budget, open_store

TASK = "circle_packing/n26-v1"


def _finish_script(path: Path) -> Path:
    replies = [say("", call("evaluate")), say("", call("finish", reason="the seed is all I had"))]
    path.write_text(json.dumps([r.to_dict() for r in replies]))
    return path


def _count(monkeypatch: pytest.MonkeyPatch, calls: Counter[str], name: str, fn: Callable[..., Any]) -> None:
    """Counts calls of ``fn`` under every name a loaded reasearch module holds it by (however callers import it)."""
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return fn(*args, **kwargs)

    for mod_name, mod in list(sys.modules.items()):
        if mod_name.startswith("reasearch") and mod is not None and getattr(mod, fn.__name__, None) is fn:
            monkeypatch.setattr(mod, fn.__name__, counted)


def _key(caps: Any) -> str:
    """The caps as one comparable text (``3`` and ``3.0`` alike)."""
    return json.dumps({str(k): float(v) for k, v in dict(caps or {}).items()}, sort_keys=True)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    import reasearch.agent.loop  # noqa: F401  (loaded, so its names are counted too)

    counts: Counter[str] = Counter()
    _count(monkeypatch, counts, "require_prices", model_calls.require_prices)
    _count(monkeypatch, counts, "check_budget", launch.check_budget)
    from_dict, to_dict = Budget.from_dict.__func__, Budget.to_dict  # type: ignore[attr-defined]

    def counted_from_dict(cls: type[Budget], d: Any) -> Budget:
        counts["from_dict", _key(d)] += 1
        return from_dict(cls, d)  # type: ignore[no-any-return]

    def counted_to_dict(self: Budget) -> dict[str, float]:
        out: dict[str, float] = to_dict(self)
        counts["to_dict", _key(out)] += 1
        return out

    monkeypatch.setattr(Budget, "from_dict", classmethod(counted_from_dict))
    monkeypatch.setattr(Budget, "to_dict", counted_to_dict)
    return counts


def test_optimize_checks_prices_and_caps_once_and_converts_the_budget_once(
        tmp_path: Path, calls: Counter[str], capsys: pytest.CaptureFixture[str]) -> None:
    script = _finish_script(tmp_path / "script.json")
    code = main(["optimize", TASK, "--model", f"scripted/{script}", "--budget", "3", "--max-dollars", "1",
                 "--sandbox", "process", "--run-dir", str(tmp_path), "--quiet"])
    assert code == 0, capsys.readouterr().err
    (record,) = open_store(tmp_path).list_runs()
    assert record.budget == {"evaluations": 3.0, "dollars": 1.0, "tokens": 1e7}  # the stored form: a dict as before
    caps = _key(record.budget)
    assert calls["require_prices"] == 1 and calls["check_budget"] == 1, calls
    assert calls["from_dict", caps] == 1 and calls["to_dict", caps] == 1, calls  # parsed once, stored once


def test_a_fleet_member_checks_prices_and_caps_once(tmp_path: Path, calls: Counter[str],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    script = _finish_script(tmp_path / "script.json")
    spec_file = tmp_path / "fleet.toml"
    spec_file.write_text(f'tasks = ["{TASK}"]\nseeds = [0]\nmodels = ["scripted/{script}"]\n'
                         'budget = {evaluations = 3, dollars = 1}\nagent = {sandbox_mode = "process"}\n')
    assert main(["fleet", "run", "--spec", str(spec_file), "--id", "once", "--store", str(tmp_path / "store"),
                 "--run-dir", str(tmp_path), "--json", "--quiet"]) == 0, capsys.readouterr().err
    assert [m["state"] for m in json.loads(capsys.readouterr().out)["members"]] == ["finished"]
    assert calls["require_prices"] == 1 and calls["check_budget"] == 1, calls


def test_a_resume_with_models_that_lack_prices_is_refused_under_a_dollar_cap(tmp_path: Path) -> None:
    from reasearch.agent import AgentConfig, ModelSpec, open_agent, start_run
    from reasearch.errors import ConfigError

    script = _finish_script(tmp_path / "script.json")
    config = AgentConfig(models={"agent": ModelSpec(provider="scripted", name=str(script))}, sandbox_mode="process")
    agent = start_run(TASK, budget={"evaluations": 3, "dollars": 1}, config=config, run_dir=tmp_path)
    run_id = agent.run.id
    agent.run.close()
    unpriced = {"agent": ModelSpec(provider="openai", name="qwen", base_url="http://127.0.0.1:9/v1")}
    with pytest.raises(ConfigError, match="no price is known for the agent model 'qwen'"):
        open_agent(run_id, run_dir=tmp_path, model_specs=unpriced, allow_endpoint_change=True)
    priced = {"agent": ModelSpec(provider="openai", name="qwen", base_url="http://127.0.0.1:9/v1",
                                 price_in=1.0, price_out=2.0)}
    resumed = open_agent(run_id, run_dir=tmp_path, model_specs=priced, allow_endpoint_change=True)
    resumed.run.close()
    assert resumed.config.models["agent"].name == "qwen"  # the same resume with prices is let through
