"""The live dashboard: bind and token rules, the Host check, read-only routes, and, in a real browser,
a new evaluation showing up on the run page and the runs list within seconds of being stored."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from report_runs import save_shot
from starlette.testclient import TestClient

from reasearch.cli import main
from reasearch.errors import ConfigError
from reasearch.evaluators.testing import ToyTask, toy_candidate
from reasearch.reports.serve import check_bind, create_app, is_loopback
from reasearch.runs import Run, open_store
from reasearch.runs.executor import LocalExecutor

TOKEN = "t0ken-for-tests-0123456789"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_binds_without_a_token(host: str) -> None:
    assert is_loopback(host)
    check_bind(host, None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "example.org", ""])
def test_other_addresses_need_a_token(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(ConfigError, match="without an access token"):
        check_bind(host, None)
    check_bind(host, TOKEN)
    with pytest.raises(ConfigError, match="at least 16"):
        check_bind(host, "short")


def test_cli_refuses_a_public_bind_without_a_token(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REASEARCH_SERVE_TOKEN", raising=False)
    assert main(["serve", "--run-dir", str(tmp_path), "--host", "0.0.0.0"]) == 2
    assert "without an access token" in capsys.readouterr().err
    assert not (tmp_path / "store.sqlite").exists()  # refused before anything was opened


@pytest.fixture(scope="module")
def toy_store(tmp_path_factory: pytest.TempPathFactory, executor: LocalExecutor) -> Iterator[tuple[Path, str]]:
    """A store with one running toy run of two evaluations."""
    d = tmp_path_factory.mktemp("serve")
    with open_store(d) as store:
        run = Run.create(store, task=ToyTask(dim=3), budget={"evaluations": 20}, executor=executor)
        run.evaluate(toy_candidate([0, 0, 0]), step=0, note="zeros")
        run.evaluate(toy_candidate([1, 1, 1]), step=1, note="ones")
        yield d, run.id


def test_without_a_token_only_loopback_hosts_are_answered(toy_store: tuple[Path, str]) -> None:
    d, run_id = toy_store
    with open_store(d) as store:
        client = TestClient(create_app(store), base_url="http://127.0.0.1")
        assert client.get("/").status_code == 200
        assert run_id in client.get("/runs.json").json()["html"]
        data = client.get(f"/run/{run_id[:12]}/data.json").json()  # a unique prefix works
        assert data["counts"]["evaluations"] == 2 and data["run_id"] == run_id
        assert client.get("/run/nosuchrun").status_code == 404
        assert client.get("/run/%25").status_code == 404  # a LIKE wildcard is no prefix
        # DNS rebinding: a page of another site that resolves to 127.0.0.1 sends its own Host.
        assert client.get("/", headers={"Host": "evil.example"}).status_code == 400
        assert client.get(f"/run/{run_id}/data.json", headers={"Host": "evil.example:8765"}).status_code == 400
        assert client.get("/", headers={"Host": "localhost:8765"}).status_code == 200
        # Read only: no route accepts a write.
        assert client.post(f"/run/{run_id}/data.json").status_code == 405
        assert client.delete("/").status_code == 405


def test_with_a_token_every_request_must_carry_it(toy_store: tuple[Path, str]) -> None:
    d, run_id = toy_store
    with open_store(d) as store:
        client = TestClient(create_app(store, token=TOKEN), base_url="http://dashboard.example")
        for path in ("/", "/runs.json", f"/run/{run_id}", f"/run/{run_id}/data.json", "/static/plotly.min.js",
                     f"/run/{run_id}/report.html"):
            assert client.get(path).status_code == 401, path
        assert client.get("/", headers={"Authorization": "Bearer wrong-token-0123456789"}).status_code == 401
        assert client.get("/?token=" + TOKEN[:-1]).status_code == 401
        assert client.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert client.get("/", headers={"Cookie": "reasearch_token=nope"}).status_code == 401
        # The token in the query sets an HttpOnly, SameSite=Strict cookie; later requests need nothing else.
        first = client.get(f"/run/{run_id}?token={TOKEN}")
        assert first.status_code == 200
        cookie = first.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert client.get(f"/run/{run_id}/data.json").status_code == 200  # the client kept the cookie
        download = client.get(f"/run/{run_id}/report.html")
        assert download.status_code == 200 and "attachment" in download.headers["content-disposition"]
        assert download.text.count("<script") == 3  # plotly inline, the JSON data, the page script


class LiveServer:
    """The dashboard under uvicorn in a thread, on a free loopback port."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                                    timeout_graceful_shutdown=2))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the dashboard did not start"
            time.sleep(0.05)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()


def _wait_for(page: Any, selector: str, attribute: str | None, expected: str, timeout_s: float) -> float:
    """Seconds until ``selector`` shows ``expected`` (its text or an attribute); polled from here (the
    page's CSP forbids the eval that wait_for_function needs)."""
    t0 = time.monotonic()
    while True:
        loc = page.locator(selector)
        value = (loc.get_attribute(attribute) if attribute else loc.inner_text()) if loc.count() else None
        if value == expected:
            return time.monotonic() - t0
        assert time.monotonic() - t0 < timeout_s, f"{selector} shows {value!r}, not {expected!r}, after {timeout_s} s"
        page.wait_for_timeout(100)


@pytest.mark.parametrize("token", [None, TOKEN])
def test_dashboard_shows_a_new_evaluation_within_seconds(tmp_path: Path, executor: LocalExecutor, browser: Any,
                                                         screenshots: Path, token: str | None) -> None:
    with open_store(tmp_path) as writer:
        run = Run.create(writer, task=ToyTask(dim=3), budget={"evaluations": 20}, executor=executor)
        run.evaluate(toy_candidate([0, 0, 0]), step=0, note="zeros")
        with open_store(tmp_path) as reader, LiveServer(create_app(reader, token=token, poll_interval_s=0.2)) as url:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            try:
                suffix = f"?token={token}" if token else ""
                page.goto(f"{url}/{suffix}")
                row = f"tr.run[data-run-id='{run.id}'] td.evals"
                _wait_for(page, row, None, "1", 30)
                page.goto(f"{url}/run/{run.id}")  # the cookie set above carries the token
                page.wait_for_selector("body[data-ready='1']", timeout=60_000)
                assert page.locator("#fig-evals .point").count() == 1
                page.locator("#sec-evaluations details").first.evaluate("d => d.open = true")  # the reader unfolds
                # A new evaluation lands in the store (another connection, as a running driver's would).
                run.evaluate(toy_candidate([2, 2, 2]), step=1, parent=None, note="twos")
                seconds = _wait_for(page, "body", "data-evaluations", "2", 30)
                assert page.locator("#fig-evals .point").count() == 2
                assert page.locator("#fig-tree .point").count() == 2
                # The sections were replaced in place (the new best is drawn), and what was unfolded stays so.
                assert page.locator("#sec-evaluations table.grid-table tr").count() == 3
                assert page.locator("#sec-evaluations details").first.evaluate("d => d.open")
                assert "step 1" in page.locator("#sec-solution").inner_text()
                assert "2 evaluations" in page.locator("#sec-headline").inner_text()
                print(f"\nthe run page showed the new evaluation after {seconds:.2f} s")
                page.goto(f"{url}/")
                run.evaluate(toy_candidate([3, 3, 3]), step=2, note="optimum")
                _wait_for(page, row, None, "3", 30)
                assert errors == []
            finally:
                page.close()


def test_dashboard_lists_every_run_and_opens_each(runs: tuple[Any, Any], report_dir: Path, browser: Any,
                                                  screenshots: Path) -> None:
    store, rr = runs
    with open_store(report_dir) as reader, LiveServer(create_app(reader)) as url:
        page = browser.new_page(viewport={"width": 1280, "height": 520})
        try:
            page.goto(f"{url}/")
            rows = page.locator("#runs tr.run")
            assert rows.count() == len(store.list_runs()) == len(rr.ids)
            for family, run_id in rr.ids.items():
                evals = page.locator(f"tr.run[data-run-id='{run_id}'] td.evals").inner_text()
                assert evals == str(rr.evaluations[family])
            save_shot(screenshots, "dashboard.png", lambda p: page.screenshot(path=str(p)))
            page.locator(f"tr.run[data-run-id='{rr.ids['heilbronn']}'] a.run-link").click()
            page.wait_for_selector("body[data-ready='1']", timeout=60_000)
            assert page.locator("#fig-evals .point").count() == rr.evaluations["heilbronn"]
            assert page.locator("figure.solution").get_attribute("data-family") == "heilbronn"
            assert page.evaluate("window.__pwned === undefined")
        finally:
            page.close()
