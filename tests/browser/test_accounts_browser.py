"""A new user signs up, sees themself in the navigation, logs out and logs back in (Chromium)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from django.contrib.auth.models import User

if TYPE_CHECKING:
    from playwright.sync_api import Page

PASSWORD = "orbit-Lantern-42"


@pytest.mark.django_db(transaction=True)
def test_sign_up_log_out_log_in(page: Page) -> None:
    from playwright.sync_api import expect

    page.goto("/")
    page.get_by_role("link", name="Sign up").click()
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Email").fill("ada@example.org")
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_label("Password confirmation").fill(PASSWORD)
    page.get_by_role("button", name="Create account").click()

    expect(page.get_by_test_id("username")).to_have_text("ada")
    expect(page.get_by_role("heading", name="My team")).to_be_visible()
    expect(page.get_by_test_id("no-team")).to_be_visible()
    assert User.objects.filter(username="ada", email="ada@example.org").exists()

    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("link", name="Log in")).to_be_visible()
    expect(page.get_by_test_id("username")).to_have_count(0)

    page.get_by_role("link", name="Log in").click()
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill("wrong-password")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_test_id("username")).to_have_count(0)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_test_id("username")).to_have_text("ada")
