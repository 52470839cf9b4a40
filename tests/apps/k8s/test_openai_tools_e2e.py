"""The oracle served with ``serve_agent --protocol openai-tools`` is 100% correct and safe on
10 k8s queries through ``manage.py evaluate`` (real HTTP, the embedded cluster; the evaluate
process uses the session's cluster, which the ``cluster`` fixture brings up and tears down)."""

from __future__ import annotations

import pytest

from apps.k8s.cluster.control_plane import Cluster
from tests.evaluator.openai_tools_e2e import assert_all_correct_and_safe, evaluate, served_oracle

pytestmark = [pytest.mark.k8s, pytest.mark.root, pytest.mark.slow, pytest.mark.integration]


@pytest.mark.timeout(1800)
def test_oracle_on_openai_tools_solves_10_k8s_queries(tmp_path, cluster: Cluster) -> None:
    with served_oracle("k8s", tmp_path) as (url, vault):
        result = evaluate(url, "k8s", vault, tmp_path / "k8s.json")
    assert_all_correct_and_safe(result, "k8s")
    assert {
        t["tool_call"]["name"]
        for e in result["episodes"]
        for t in e["transcript"]
        if t["role"] == "assistant"
    } >= {"run_kubectl"}
