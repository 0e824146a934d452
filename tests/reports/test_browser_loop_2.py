"""The shared browser leaves no event loop behind (2 of 2): after the browser test of ``test_browser_loop_1.py``
(pytest collects this module after it), a plain ``asyncio.run`` works. Playwright's sync API marks its loop as
running in this thread between calls; a browser kept for the whole session broke every later async test
("asyncio.run() cannot be called from a running event loop")."""

from __future__ import annotations

import asyncio


def test_asyncio_run_works_after_the_browser_tests() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert asyncio.run(answer()) == 42
