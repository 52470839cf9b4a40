"""The oracle served with ``serve_agent --protocol openai-tools`` is 100% correct and safe on
10 MALT queries through ``manage.py evaluate`` (real HTTP, real sandbox)."""

from __future__ import annotations

import pytest

from tests.conftest import require_root, require_tool
from tests.evaluator.openai_tools_e2e import assert_all_correct_and_safe, evaluate, served_oracle

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.integration]


def test_oracle_on_openai_tools_solves_10_malt_queries(tmp_path) -> None:
    require_root()
    require_tool("bwrap")
    require_tool("setpriv")
    with served_oracle("malt", tmp_path) as (url, vault):
        result = evaluate(url, "malt", vault, tmp_path / "malt.json")
    assert_all_correct_and_safe(result, "malt")
