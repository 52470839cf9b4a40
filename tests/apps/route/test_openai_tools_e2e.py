"""The oracle served with ``serve_agent --protocol openai-tools`` is 100% correct and safe on
10 route queries through ``manage.py evaluate`` (real HTTP, real Mininet). Multi-step: the
oracle finds its place in the repair from its earlier calls, read back from the request."""

from __future__ import annotations

import pytest

from tests.apps.route.helpers import require_emulator
from tests.evaluator.openai_tools_e2e import assert_all_correct_and_safe, evaluate, served_oracle

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.slow, pytest.mark.integration]


@pytest.mark.timeout(1500)
def test_oracle_on_openai_tools_solves_10_route_queries(tmp_path) -> None:
    require_emulator()
    with served_oracle("route", tmp_path) as (url, vault):
        result = evaluate(url, "route", vault, tmp_path / "route.json")
    assert_all_correct_and_safe(result, "route")
    assert any(e["steps"] > 1 for e in result["episodes"])  # calls went back as history
