"""The dashboard's write path (``serve --steer``): every refusal an attacker tries first, and, in a real
browser, a hint sent from a run page's panel landing in the run's journal while a page of another origin
cannot write."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from test_serve import LiveServer, _wait_for

from reasearch.cli import main
from reasearch.errors import ConfigError
from reasearch.reports import steer_web
from reasearch.reports.serve import create_app
from reasearch.reports.steer_web import MAX_BODY, NONCE_HEADER, TOKEN_HEADER, SteerGate
from reasearch.runs import open_store
from reasearch.runs.ledger import LedgerEntry, Unit
from reasearch.runs.steering import history
from reasearch.runs.store import EvaluationRecord, RunState, Store
from reasearch.runs.testing import make_candidate, make_result, make_run_record

RID = "20260102-000000-bbbb"
WRITE = "write-t0ken-0123456789abcdef"
READ = "read-t0ken-0123456789abcdef"


def _store(path: Path) -> Store:
    store = open_store(path)
    store.create_run(make_run_record(RID, budget={"evaluations": 10.0}))
    for step, (cid, score) in enumerate((("ab12cd34", 1.0), ("ef56ab78", 2.5))):
        store.record_evaluation(EvaluationRecord(RID, step, cid, 7, make_result(score=score), 1.0),
                                make_candidate(cid, run_id=RID))
        store.debit(LedgerEntry(RID, step, Unit.EVALUATIONS, 1.0, "evaluate", 1.0))
    return store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = _store(tmp_path)
    yield s
    s.close()


def _client(store: Store, *, token: str | None = None, host: str = "127.0.0.1") -> TestClient:
    return TestClient(create_app(store, token=token, steer=SteerGate(WRITE)), base_url=f"http://{host}")


def _headers(client: TestClient, **extra: str) -> dict[str, str]:
    nonce = client.post("/steer/nonce", json={}, headers={TOKEN_HEADER: WRITE}).json()["nonce"]
    return {TOKEN_HEADER: WRITE, NONCE_HEADER: nonce, **extra}


def test_a_hint_with_the_write_token_and_a_fresh_nonce_is_journaled_with_who(store: Store) -> None:
    client = _client(store)
    r = client.post(f"/run/{RID[:12]}/steer", json={"verb": "hint", "args": {"text": "try a hexagonal start"},
                                                    "who": "alice"}, headers=_headers(client))
    assert r.status_code == 200, r.text
    (i,) = history(store, RID)
    assert (i.verb, i.args, i.who, i.applied_step) == ("hint", {"text": "try a hexagonal start"},
                                                       "alice (dashboard@testclient)", None)
    state = client.get(f"/run/{RID}/steer.json").json()
    assert [row["line"] for row in state["interventions"]] == [i.describe()]
    assert [c["id"] for c in state["candidates"]] == ["ef56ab78", "ab12cd34"]  # best first


def test_every_write_without_what_it_needs_is_refused_and_nothing_is_journaled(store: Store) -> None:
    client = _client(store)
    body = {"verb": "hint", "args": {"text": "x"}}
    url = f"/run/{RID}/steer"
    refused = {
        "no token": client.post(url, json=body, headers={NONCE_HEADER: "n"}),
        "wrong token": client.post(url, json=body, headers=_headers(client) | {TOKEN_HEADER: WRITE[:-1] + "X"}),
        "token in the query": client.post(f"{url}?token={WRITE}", json=body, headers={NONCE_HEADER: "n"}),
        "unknown nonce": client.post(url, json=body, headers={TOKEN_HEADER: WRITE, NONCE_HEADER: "made-up"}),
        "another origin": client.post(url, json=body, headers=_headers(client, Origin="http://evil.example")),
        "cross-site fetch": client.post(url, json=body, headers=_headers(client, **{"Sec-Fetch-Site": "cross-site"})),
        "a form post": client.post(url, content=b"verb=hint", headers=_headers(
            client, **{"Content-Type": "application/x-www-form-urlencoded"})),
        "text/plain": client.post(url, content=json.dumps(body).encode(), headers=_headers(
            client, **{"Content-Type": "text/plain"})),
        "oversized": client.post(url, json={**body, "pad": "x" * MAX_BODY}, headers=_headers(client)),
        "a foreign Host": client.post(url, json=body, headers=_headers(client, Host="evil.example")),
    }
    expected = {"no token": 401, "wrong token": 401, "token in the query": 401, "unknown nonce": 409,
                "another origin": 403, "cross-site fetch": 403, "a form post": 415, "text/plain": 415,
                "oversized": 413, "a foreign Host": 400}
    assert {k: r.status_code for k, r in refused.items()} == expected
    assert history(store, RID) == []
    # The same origin's own fetch (Origin equal to the page's) passes.
    ok = client.post(url, json=body, headers=_headers(client, Origin="http://127.0.0.1", **{"Sec-Fetch-Site":
                                                                                            "same-origin"}))
    assert ok.status_code == 200 and len(history(store, RID)) == 1


def test_a_replayed_request_is_refused(store: Store) -> None:
    client = _client(store)
    headers = _headers(client)
    body = {"verb": "ban", "args": {"text": "no random restarts"}}
    assert client.post(f"/run/{RID}/steer", json=body, headers=headers).status_code == 200
    again = client.post(f"/run/{RID}/steer", json=body, headers=headers)
    assert again.status_code == 409 and "replayed" in again.json()["error"]
    assert len(history(store, RID)) == 1


def test_a_reader_of_the_dashboard_cannot_steer(store: Store) -> None:
    """The read token (header or its cookie) opens every page, and still no write passes without the write token."""
    client = _client(store, token=READ)
    assert client.get(f"/run/{RID}?token={READ}").status_code == 200  # sets the read cookie
    assert "id='steer-panel'" in client.get(f"/run/{RID}").text
    nonce = client.post("/steer/nonce", json={}, headers={"Authorization": f"Bearer {READ}"})
    assert nonce.status_code == 401
    r = client.post(f"/run/{RID}/steer", json={"verb": "stop", "args": {}},
                    headers={"Authorization": f"Bearer {READ}", TOKEN_HEADER: READ, NONCE_HEADER: "n"})
    assert r.status_code == 401
    # Non-loopback binds answer writes only for the bound host.
    gate_client = TestClient(create_app(store, token=READ, steer=SteerGate(WRITE, {"dashboard.example"})),
                             base_url="http://dashboard.example")
    assert gate_client.get(f"/run/{RID}?token={READ}").status_code == 200
    ok = gate_client.post(f"/run/{RID}/steer", json={"verb": "stop", "args": {}}, headers=_headers(gate_client))
    assert ok.status_code == 200
    rebound = gate_client.post(f"/run/{RID}/steer", json={"verb": "stop", "args": {}},
                               headers=_headers(gate_client, Host="attacker.example"))
    assert rebound.status_code == 400
    assert [i.verb for i in history(store, RID)] == ["stop"]


def test_bad_input_gets_one_line_and_a_finished_run_takes_nothing(store: Store) -> None:
    client = _client(store)
    cases = [({"verb": "launch"}, "unknown steering verb"), ({"verb": "hint", "args": {"text": "x" * 5000}},
                                                             "at most 4096"),
             ({"verb": "cap", "args": {"unit": "evaluations", "value": 1}}, "below"), ([1, 2], "JSON object"),
             ({"verb": "pin", "args": {"candidate": "zz"}}, "candidate")]
    for body, match in cases:
        r = client.post(f"/run/{RID}/steer", json=body, headers=_headers(client))
        assert r.status_code == 400 and match in r.json()["error"], (body, r.text)
        assert "\n" not in r.json()["error"]
    missing = client.post("/run/nosuchrun/steer", json={"verb": "stop"}, headers=_headers(client))
    assert missing.status_code in (400, 404) and "nosuchrun" in missing.json()["error"]
    store.set_run_state(RID, RunState.FINISHED)
    r = client.post(f"/run/{RID}/steer", json={"verb": "hint", "args": {"text": "late"}}, headers=_headers(client))
    assert r.status_code == 400 and "finished" in r.json()["error"]
    assert history(store, RID) == []


def test_fork_from_the_dashboard_makes_a_run_and_its_twin(store: Store) -> None:
    client = _client(store)
    r = client.post(f"/run/{RID}/fork", json={"candidate": "ef56", "budget": {"evaluations": 5}, "twin": True},
                    headers=_headers(client))
    assert r.status_code == 200, r.text
    new, twin = r.json()["run"], r.json()["twin"]
    assert store.get_run(new).state is RunState.INTERRUPTED and store.get_run(twin).id == twin
    bad = client.post(f"/run/{RID}/fork", json={"candidate": "ef56", "budget": {}}, headers=_headers(client))
    assert bad.status_code == 400 and "budget" in bad.json()["error"]


def test_without_steer_the_dashboard_takes_no_write_and_shows_no_panel(store: Store) -> None:
    client = TestClient(create_app(store), base_url="http://127.0.0.1")
    assert client.post("/steer/nonce", json={}, headers={TOKEN_HEADER: WRITE}).status_code in (404, 405)
    assert client.post(f"/run/{RID}/steer", json={}, headers={TOKEN_HEADER: WRITE}).status_code in (404, 405)
    assert "steer-send" not in client.get(f"/run/{RID}").text and "steer.js" not in client.get(f"/run/{RID}").text


def test_nonces_are_single_use_bounded_and_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = SteerGate(WRITE)
    first = gate.issue()
    for _ in range(steer_web.MAX_NONCES + 10):
        gate.issue()
    assert len(gate._nonces) == steer_web.MAX_NONCES and not gate.consume(first)  # the oldest were dropped
    n = gate.issue()
    now = steer_web.time.monotonic()
    monkeypatch.setattr(steer_web.time, "monotonic", lambda: now + steer_web.NONCE_TTL_S + 1)
    assert not gate.consume(n)
    with pytest.raises(ConfigError, match="at least 16"):
        SteerGate("short")


def test_cli_prints_the_write_token_once_and_refuses_it_equal_to_the_read_token(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    got: dict[str, Any] = {}
    monkeypatch.setattr("reasearch.reports.serve.serve", lambda store, **kw: got.update(kw))
    monkeypatch.setattr("reasearch._cli._port.check_port_free", lambda host, port: None)
    monkeypatch.delenv("REASEARCH_STEER_TOKEN", raising=False)
    monkeypatch.delenv("REASEARCH_SERVE_TOKEN", raising=False)
    _store(tmp_path).close()
    assert main(["serve", "--run-dir", str(tmp_path), "--steer"]) == 0
    err = capsys.readouterr().err
    token = got["steer_token"]
    assert len(token) >= 16 and err.count(token) == 1 and f"?token={token}" not in err
    assert main(["serve", "--run-dir", str(tmp_path)]) == 0 and got["steer_token"] is None
    monkeypatch.setenv("REASEARCH_STEER_TOKEN", READ)
    assert main(["serve", "--run-dir", str(tmp_path), "--steer", "--token", READ]) == 2
    assert "equals the read token" in capsys.readouterr().err


class _EvilSite:
    """A page of another origin (a plain HTTP server on another port) that tries to write to the dashboard."""

    def __init__(self, target: str) -> None:
        page = f"""<!doctype html><html><body><script>
        var t = {json.dumps(target)};
        var tries = [
          fetch(t + "/run/{RID}/steer", {{method: "POST", headers: {{"Content-Type": "application/json",
               "X-Reasearch-Steer-Token": "guess", "X-Reasearch-Nonce": "n"}},
               body: JSON.stringify({{verb: "stop", args: {{}}}})}})
            .then(function (r) {{ return "fetch " + r.status; }}, function (e) {{ return "fetch blocked"; }}),
          fetch(t + "/run/{RID}/steer", {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}},
               body: JSON.stringify({{verb: "stop", args: {{}}}})}}).then(function () {{ return "no-cors sent"; }},
               function () {{ return "no-cors blocked"; }})
        ];
        Promise.all(tries).then(function (r) {{ document.title = "done: " + r.join(", "); }});
        </script></body></html>""".encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://localhost:{self.server.server_address[1]}/"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_panel_sends_every_verb_in_a_browser_and_another_origin_cannot(tmp_path: Path, browser: Any,
                                                                        screenshots: Path) -> None:
    from report_runs import save_shot

    with _store(tmp_path) as store, LiveServer(create_app(store, steer=SteerGate(WRITE), poll_interval_s=0.2)) as url:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            page.goto(f"{url}/run/{RID}")
            page.wait_for_selector("#steer-panel #steer-send")
            _wait_for(page, "body", "data-interventions", "0", 30)
            hostile = "<img src=x onerror='window.__pwned=1'> try a hexagonal start"
            page.fill("#steer-text", hostile)
            page.click("#steer-send")
            _wait_for(page, "body", "data-interventions", "0", 5)  # no token yet: nothing is sent
            assert "token" in page.locator("#steer-status").inner_text()
            page.fill("#steer-token", WRITE)
            page.fill("#steer-who", "alice")
            page.click("#steer-send")
            _wait_for(page, "body", "data-interventions", "1", 30)
            (i,) = history(store, RID)
            assert i.verb == "hint" and i.args["text"] == hostile and i.who.startswith("alice (dashboard@")
            assert hostile in page.locator("#steer-history tr.intervention").inner_text()  # shown as text
            assert page.evaluate("window.__pwned === undefined")
            save_shot(screenshots, "steering-panel.png", lambda p: page.locator("#steer-panel").screenshot(path=str(p)))
            # every other verb through the panel: what each sends is what the run's journal holds
            steps = [("ban", {"#steer-text": "no brute force"}), ("pin", {}), ("lift", {"#steer-ban": "2"}),
                     ("cap", {"#steer-value": "8"}), ("pause", {}), ("resume", {}), ("stop", {"#steer-text": "done"})]
            page.select_option("#steer-candidate", "ab12cd34")
            for n, (verb, fields) in enumerate(steps, start=2):
                page.select_option("#steer-verb", verb)
                for selector, value in fields.items():
                    page.fill(selector, value)
                page.click("#steer-send")
                _wait_for(page, "body", "data-interventions", str(n), 30)
            got = history(store, RID)
            assert [x.verb for x in got] == ["hint", *[v for v, _ in steps]]
            assert got[1].args == {"text": "no brute force"} and got[2].args == {"candidate": "ab12cd34"}
            assert got[3].args == {"ban": 2} and got[4].args["value"] == 8 and got[7].args == {"text": "done"}
            page.check("#fork-twin")
            page.fill("#fork-evals", "5")
            page.click("#steer-fork")
            for _ in range(300):
                if "forked: run" in page.locator("#steer-status").inner_text():
                    break
                page.wait_for_timeout(100)
            forked = [r for r in store.list_runs() if r.id != RID]
            assert len(forked) == 2 and all(r.budget == {"evaluations": 5.0} for r in forked)
            assert errors == []
            before = [x.seq for x in history(store, RID)]
            with _EvilSite(url) as evil:
                attacker = browser.new_page()
                try:
                    attacker.goto(evil)
                    for _ in range(100):
                        if attacker.title().startswith("done"):
                            break
                        attacker.wait_for_timeout(100)
                    assert attacker.title() in ("done: fetch blocked, no-cors sent", "done: fetch blocked, no-cors "
                                                                                     "blocked"), attacker.title()
                finally:
                    attacker.close()
            assert [x.seq for x in history(store, RID)] == before  # the attacker's stop never landed
        finally:
            page.close()


class _FailingReads:
    """The store, but every read of a run fails as a failed store does (a disk error), not as "no such run"."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get_run(self, run_id: str, *, exact: bool = False) -> Any:
        from reasearch.errors import StoreError

        raise StoreError("database disk image is malformed")


def test_a_store_that_fails_answers_503_and_a_missing_run_404(store: Store) -> None:
    """A failed store is a server-side failure (503, its reason in one line), never "not found" (404) nor the
    caller's fault (400); an id the store does not hold stays 404 where the route reads it."""
    client = TestClient(create_app(_FailingReads(store), steer=SteerGate(WRITE)), base_url="http://127.0.0.1")  # type: ignore[arg-type]
    r = client.post(f"/run/{RID}/steer", json={"verb": "hint", "args": {"text": "x"}}, headers=_headers(client))
    assert r.status_code == 503 and "malformed" in r.json()["error"], r.text
    r = client.get(f"/run/{RID}/steer.json")
    assert r.status_code == 503 and "malformed" in r.json()["error"], r.text
    assert client.get(f"/run/{RID}").status_code == 503
    assert _client(store).get("/run/nosuchrun/steer.json").status_code == 404
    assert _client(store).get("/run/nosuchrun").status_code == 404
