"""``reasearch mcp --steer``: a supervising MCP client steers the runs of a store through the SDK's client;
each intervention is journaled with the client's name, and bad input is an error answer, never a crash."""

from __future__ import annotations

from pathlib import Path

from reasearch.agent.mcp import build_server
from reasearch.agent.mcp.steering import SteeringService
from reasearch.runs import open_store
from reasearch.runs.ledger import LedgerEntry, Unit
from reasearch.runs.steering import history
from reasearch.runs.store import EvaluationRecord, RunState
from reasearch.runs.testing import make_candidate, make_result, make_run_record
from tests.agent.mcp_helpers import drive, text

RID = "20260103-000000-cccc"


def test_a_supervising_client_steers_lists_and_forks(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        store.create_run(make_run_record(RID, budget={"evaluations": 10.0}))
        store.record_evaluation(EvaluationRecord(RID, 0, "ab12cd34", 7, make_result(score=1.5), 1.0),
                                make_candidate("ab12cd34", run_id=RID))
        store.debit(LedgerEntry(RID, 0, Unit.EVALUATIONS, 3.0, "evaluate", 1.0))
        listed, runs, hint, ban, cap_low, unknown_verb, pin, shown, forked, missing = drive(
            build_server(SteeringService(store), name="reasearch-steering"), [
                ("list_runs", {}),
                ("steer", {"run": RID[:10], "verb": "hint", "text": "try a hexagonal start\x1b[2J"}),
                ("steer", {"run": RID, "verb": "ban", "text": "no random restarts"}),
                ("steer", {"run": RID, "verb": "cap", "unit": "evaluations", "value": 2}),
                ("steer", {"run": RID, "verb": "launch"}),
                ("steer", {"run": RID, "verb": "pin", "candidate": "ab12"}),
                ("interventions", {"run": RID}),
                ("fork", {"run": RID, "candidate": "ab12", "evaluations": 5, "twin": True}),
                ("steer", {"run": "nosuchrun", "verb": "stop"}),
            ])
        assert {t.name for t in listed.tools} == {"list_runs", "steer", "interventions", "fork"}
        verb_schema = next(t for t in listed.tools if t.name == "steer").input_schema["properties"]["verb"]
        assert set(verb_schema["enum"]) == {"hint", "pin", "ban", "lift", "pause", "resume", "cap", "stop"}
        assert RID in text(runs) and "best 1.5" in text(runs)
        assert not hint.is_error and "queued #1 hint" in text(hint)
        assert not ban.is_error and not pin.is_error
        assert cap_low.is_error and "below" in text(cap_low)  # 3 spent: a cap of 2 is refused
        assert unknown_verb.is_error  # the schema's enum refuses it before the store is touched
        assert missing.is_error and "nosuchrun" in text(missing)
        got = history(store, RID)
        assert [i.verb for i in got] == ["hint", "ban", "pin"]
        assert {i.who for i in got} == {"mcp:mcp/0.1.0"}  # the name and version the SDK's client announced
        assert "\x1b" not in got[0].args["text"] and "\\x1b" in got[0].args["text"]  # escaped, visible
        assert "#2 ban 'no random restarts'" in text(shown) and "pending" in text(shown)
        assert not forked.is_error
        new = forked.structured_content["run"]
        assert store.get_run(new).state is RunState.INTERRUPTED and forked.structured_content["twin"]
