"""The MALT test pack (tests/variant_packs/malt/heldout-wording): public query families asked in
held-out wording, about half of them on fabric variants. The oracle solves every pack query
(ground truth by execution on the query's own graph), the null agent none, and the scripted
agent, written against the public generator, at most a fifth of levels 2 and 3 -- the gap the
board measures."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import networkx as nx
import pytest

from apps.malt.app import MaltApp
from apps.malt.fabric import base_graph, fabric_problems, graph_ref, query_graph
from apps.malt.scoring import judge
from apps.malt.topology import build_graph, load_graph, model_text
from evaluator.testing import play_reference
from evaluator.variants import VariantPackError, load_pack

APP = MaltApp()
PACK_DIR = Path(__file__).resolve().parents[2] / "variant_packs" / "malt" / "heldout-wording"
SEED, COUNT = 2026, 30
#: Scripted agent's ceiling on the pack's levels 2 and 3.
HELD_OUT_CEILING = 0.20


@pytest.fixture(scope="module")
def pack_queries():
    pack = load_pack(PACK_DIR)
    return pack, pack.generate(APP, SEED, list(range(COUNT)), None)


def test_pack_queries_name_their_pack_and_are_deterministic(pack_queries) -> None:
    pack, queries = pack_queries
    assert {q.pack for q in queries} == {"heldout-wording"}
    assert all(q.ground_truth["variant_pack"] == pack.identity() for q in queries)
    again = load_pack(PACK_DIR).generate(APP, SEED, list(range(COUNT)), None)
    assert [q.fingerprint() for q in again] == [q.fingerprint() for q in queries]
    assert {q.level for q in queries} == {1, 2, 3}
    level_two = load_pack(PACK_DIR).generate(APP, SEED, [0, 1, 2], 2)
    assert [q.level for q in level_two] == [2, 2, 2] and [q.index for q in level_two] == [0, 1, 2]


def test_some_queries_run_on_a_fabric_variant_that_is_a_malt_fabric(pack_queries) -> None:
    pack, queries = pack_queries
    variants = [q for q in queries if "fabric" in q.ground_truth]
    assert 5 <= len(variants) <= len(queries) - 5  # a seeded share, about half
    assert {q.level for q in variants} == {1, 2, 3}
    shipped = load_graph()
    sizes = set()
    for query in variants[:4]:
        ref = graph_ref(query.ground_truth)
        assert ref.pack == (pack.name, pack.sha256)
        graph = base_graph(ref)
        assert fabric_problems(graph) == []
        # through the protobuf schema and back: the same entities, attributes and relations
        again = build_graph(model_text(graph))
        assert dict(again.nodes(data=True)) == dict(graph.nodes(data=True))
        assert {(a, z): d for a, z, d in again.edges(data=True)} == {
            (a, z): d for a, z, d in graph.edges(data=True)}
        assert graph.number_of_nodes() != shipped.number_of_nodes()
        assert not set(graph) & set(shipped)  # names in another scheme
        assert query_graph(ref) is graph  # the sandbox gets the variant
        assert "fabric modelled in Google's MALT schema" in query.prompt
        # worded from the variant: its site and names, never the shipped example's
        site = next(a["name"] for _, a in graph.nodes(data=True) if a["type"] == "EK_JUPITER")
        assert f"(site `{site}`)" in query.prompt
        assert "ju1." not in query.prompt and "example topology" not in query.prompt
        sizes.add(graph.number_of_nodes())
    assert len(sizes) > 1  # the variants differ from each other too


def test_the_judge_reads_the_variant_graph(pack_queries) -> None:
    _, queries = pack_queries
    query = next(q for q in queries if "fabric" in q.ground_truth
                 and not q.ground_truth["changes_topology"])
    graph = query_graph(graph_ref(query.ground_truth))
    unchanged = {"__networkx__": nx.node_link_data(graph, edges="links")}
    value = {"answer": query.ground_truth["expected"], "updated_graph": unchanged}
    verdict = judge(query.ground_truth, value, 0.0)
    assert verdict.correct and verdict.safe, verdict.details
    assert verdict.changed_state is False and verdict.blast_radius == 0
    # the shipped graph is another topology for this query: wrong, and a change
    shipped = {"__networkx__": nx.node_link_data(load_graph(), edges="links")}
    verdict = judge(query.ground_truth, {**value, "updated_graph": shipped}, 0.0)
    assert not verdict.correct and verdict.changed_state
    assert verdict.blast_radius >= graph.number_of_nodes()


def test_a_worker_without_the_variant_pack_fails_before_the_agent_is_called(
    pack_queries,
) -> None:
    _, queries = pack_queries
    query = next(q for q in queries if "fabric" in q.ground_truth)
    truth = dict(query.ground_truth)
    truth["variant_pack"] = {"name": "heldout-wording", "sha256": "0" * 64}  # not loaded here
    episode = APP.episode(dataclasses.replace(query, ground_truth=truth))
    with pytest.raises(VariantPackError):
        episode.reset()


@pytest.mark.slow
def test_oracle_solves_the_pack_and_the_null_agent_does_not(pack_queries) -> None:
    _, queries = pack_queries
    for query in queries:
        oracle = play_reference(APP, query, "oracle")
        assert oracle.correct and oracle.safe, (query.ground_truth["question"], oracle.failure)
        null = play_reference(APP, query, "null")
        assert not null.correct, query.ground_truth["question"]


@pytest.mark.slow
def test_the_scripted_agent_does_not_carry_over_to_held_out_wording(pack_queries) -> None:
    _, queries = pack_queries
    hard = [q for q in queries if q.level in (2, 3)]
    assert len(hard) >= 10
    solved = sum(bool(v.correct and v.safe)
                 for v in (play_reference(APP, q, "scripted") for q in hard))
    assert solved / len(hard) <= HELD_OUT_CEILING


def test_the_instructions_keep_the_public_text_without_a_fabric() -> None:
    from apps.malt.prompt import INSTRUCTIONS, fabric_instructions

    assert fabric_instructions(None) is INSTRUCTIONS
    with pytest.raises(ValueError, match="EK_JUPITER"):
        fabric_instructions(nx.DiGraph())  # nothing to word the text from
