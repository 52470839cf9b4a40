"""Two users in two browser contexts: one creates a team and invites, the other joins (Chromium)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

PASSWORD = "orbit-Lantern-42"


def _sign_up(page: Page, username: str, *, go: bool = True) -> None:
    if go:
        page.goto("/accounts/signup/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Email").fill(f"{username}@example.org")
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_label("Password confirmation").fill(PASSWORD)
    page.get_by_role("button", name="Create account").click()


@pytest.mark.django_db(transaction=True)
def test_create_team_invite_join_remove(
    page: Page, chromium_browser: Browser, live_server: Any
) -> None:
    from playwright.sync_api import expect

    _sign_up(page, "olga")
    page.get_by_label("Team name").fill("route-runners")
    page.get_by_role("button", name="Create team").click()
    team = page.get_by_test_id("team-route-runners")
    expect(team).to_contain_text("owner")
    team.get_by_role("button", name="Create an invitation link").click()
    link = page.get_by_test_id("invite-link").input_value()
    assert link.startswith(f"{live_server.url}/accounts/join/")

    other = chromium_browser.new_context(base_url=live_server.url)
    guest = other.new_page()
    try:
        guest.goto(link)
        expect(guest.get_by_role("heading", name="Join route-runners")).to_be_visible()
        guest.get_by_role("main").get_by_role("link", name="sign up").click()
        _sign_up(guest, "gus", go=False)  # back on the invitation afterwards
        guest.get_by_role("button", name="Join route-runners").click()
        expect(guest.get_by_test_id("team-route-runners")).to_contain_text("olga")
        expect(guest.get_by_test_id("team-route-runners")).to_contain_text("gus")
        expect(guest.get_by_role("button", name="Remove olga")).to_have_count(0)

        page.reload()
        page.get_by_role("button", name="Remove gus").click()
        expect(page.get_by_test_id("team-route-runners")).not_to_contain_text("gus")
        guest.reload()
        expect(guest.get_by_test_id("no-team")).to_be_visible()
    finally:
        other.close()
