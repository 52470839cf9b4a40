"""Steps the browser tests share."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Page


def log_in(page: Page, username: str, password: str) -> None:
    """Log ``username`` in through the site's login form, as a visitor would."""
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
