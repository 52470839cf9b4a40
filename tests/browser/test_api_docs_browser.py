"""The API docs page renders Swagger UI from the site's own static files (Chromium)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page


@pytest.mark.django_db(transaction=True)
def test_api_docs_render_without_leaving_the_site(page: Page, live_server: Any) -> None:
    from playwright.sync_api import expect

    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto("/")
    page.get_by_role("link", name="API docs").click()
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("NetArena Leaderboard API")
    assert any("swagger-ui-bundle" in url for url in requested)
    assert [url for url in requested if not url.startswith(live_server.url)] == []
