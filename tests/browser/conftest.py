"""Browser test harness: a live Django server and Debian's headless Chromium under Playwright.

The browser is the system's ``chromium`` binary (scripts/setup.sh installs it); Playwright never
downloads one. Locally a missing Chromium skips these tests; under ``CI=true`` it fails them
(``tests.conftest.require_tool``). Every test here carries the ``browser`` marker.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import require, require_tool

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

# Playwright's sync API runs an event loop in the test thread; Django would then refuse ORM calls
# made by the test itself (fixtures creating users). The test thread is still single-threaded.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

#: Flags for a quiet, sandbox-less headless Chromium that never phones home.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: Upper bound for one page action or expectation, in milliseconds.
ACTION_TIMEOUT_MS = 15_000


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/browser with ``browser``."""
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="module")
def chromium_browser() -> Iterator[Browser]:
    """One headless Chromium per test module (the system binary, never a download).

    Module scope, not session scope: Playwright's event loop runs in the test thread while the
    browser lives, and must be gone before tests outside tests/browser (``asyncio.run`` callers,
    Django's async-safety check) run in the same process.
    """
    executable = require_tool("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - requirements-dev.txt pins playwright
        require(False, "the playwright Python package is not installed")
        raise
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()


@pytest.fixture
def page(chromium_browser: Browser, live_server: Any) -> Iterator[Page]:
    """A fresh browser context (no cookies) whose relative URLs resolve against the live server."""
    from playwright.sync_api import expect

    context = chromium_browser.new_context(base_url=live_server.url)
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    expect.set_options(timeout=ACTION_TIMEOUT_MS)  # expectations wait as long as actions
    new_page = context.new_page()
    yield new_page
    context.close()
