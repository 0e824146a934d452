"""The shared browser leaves no event loop behind (1 of 2): a browser test; ``test_browser_loop_2.py``, collected
after it, runs ``asyncio.run`` as any async test (anyio, MCP, the OpenEvolve adapter) does later in the session."""

from __future__ import annotations

from typing import Any

BROWSER_TESTS_RUN: list[str] = []


def test_a_page_opens_in_the_shared_browser(browser: Any) -> None:
    page = browser.new_page()
    try:
        page.set_content("<p id='x'>hello</p>")
        assert page.inner_text("#x") == "hello"
    finally:
        page.close()
    BROWSER_TESTS_RUN.append("page")
