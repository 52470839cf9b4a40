"""The MALT graph: entity counts, identity, relation triples, schema and cache."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from google.protobuf import text_format

from apps.malt import schema, topology
from apps.malt.checks import NormalizedGraph, check_safety
from apps.malt.overlay import TopologyView
from apps.malt.topology import ALLOWED_RELATIONS, build_graph, load_graph

#: Entity counts per kind in the MALT example file.
EXPECTED_KINDS = {
    "EK_JUPITER": 1,
    "EK_SUPERBLOCK": 4,
    "EK_SPINEBLOCK": 4,
    "EK_AGG_BLOCK": 16,
    "EK_PACKET_SWITCH": 320,
    "EK_CHASSIS": 320,
    "EK_CONTROL_POINT": 320,
    "EK_PORT": 5120,
    "EK_RACK": 20,
    "EK_CONTROL_DOMAIN": 8,
}


def test_counts_per_kind_and_relation() -> None:
    graph = load_graph()
    assert graph.number_of_nodes() == 6133
    assert graph.number_of_edges() == 7064
    assert Counter(a["type"] for _, a in graph.nodes(data=True)) == EXPECTED_KINDS
    relations = Counter(a["type"] for _, _, a in graph.edges(data=True))
    assert relations == {"RK_CONTAINS": 6744, "RK_CONTROLS": 320}


def test_relation_triples_are_exactly_the_allowed_hierarchy() -> None:
    graph = load_graph()
    triples = {
        (graph.nodes[u]["type"], a["type"], graph.nodes[v]["type"])
        for u, v, a in graph.edges(data=True)
    }
    assert triples == ALLOWED_RELATIONS


def test_switch_chassis_and_control_point_are_distinct_nodes() -> None:
    graph = load_graph()
    name = "ju1.a1.m1.s2c1"
    ids = [f"{kind}:{name}" for kind in ("EK_PACKET_SWITCH", "EK_CHASSIS", "EK_CONTROL_POINT")]
    assert all(graph.nodes[i]["name"] == name for i in ids)
    assert [graph.nodes[i]["type"] for i in ids] == [
        "EK_PACKET_SWITCH",
        "EK_CHASSIS",
        "EK_CONTROL_POINT",
    ]
    switch, chassis, control_point = ids
    assert graph.edges[chassis, switch]["type"] == "RK_CONTAINS"
    assert graph.edges[chassis, control_point]["type"] == "RK_CONTAINS"
    assert graph.edges[control_point, switch]["type"] == "RK_CONTROLS"
    assert not any(graph.has_edge(n, n) for n in graph)


def test_attributes_are_typed_and_flattened() -> None:
    graph = load_graph()
    port = graph.nodes["EK_PORT:ju1.a1.m1.s2c1.p1"]
    assert port == {"name": "ju1.a1.m1.s2c1.p1", "type": "EK_PORT", "physical_capacity_bps": 10**9}
    assert type(port["physical_capacity_bps"]) is int
    assert graph.nodes["EK_PACKET_SWITCH:ju1.a1.m1.s3c2"]["switch_loc"] == {"stage": 3}
    assert graph.nodes["EK_SUPERBLOCK:ju1.a3"]["index_within_jupiter"] == 3
    assert graph.nodes["EK_JUPITER:ju1"]["jupiter_type"] == "JDT_COLO"
    assert graph.nodes["EK_CHASSIS:ju1.a1.m1.s2c1"] == {
        "name": "ju1.a1.m1.s2c1",
        "type": "EK_CHASSIS",
    }


def test_initial_topology_is_safe() -> None:
    report = check_safety(NormalizedGraph.from_view(TopologyView(load_graph())))
    assert report.safe, report.to_dict()


def test_parser_rejects_unknown_fields_and_enum_values() -> None:
    good = 'entity { id { kind: EK_PORT name: "x" } port_attr { physical_capacity_bps: 5 } }'
    assert build_graph(good).nodes["EK_PORT:x"]["physical_capacity_bps"] == 5
    with pytest.raises(text_format.ParseError):
        build_graph('entity { id { kind: EK_PORT name: "x" } colour: 3 }')
    with pytest.raises(text_format.ParseError):
        build_graph('entity { id { kind: EK_TOASTER name: "x" } }')
    with pytest.raises(ValueError, match="unknown entity"):
        build_graph(
            'entity { id { kind: EK_RACK name: "r" } } '
            'relationship { kind: RK_CONTAINS a { kind: EK_RACK name: "r" } '
            'z { kind: EK_CHASSIS name: "missing" } }'
        )
    with pytest.raises(ValueError, match="duplicate"):
        build_graph(
            'entity { id { kind: EK_RACK name: "r" } } entity { id { kind: EK_RACK name: "r" } }'
        )


def test_proto_file_matches_runtime_descriptor() -> None:
    """apps/malt/proto/malt.proto (documentation) and schema.py (runtime) must not drift."""
    text = (Path(schema.__file__).parent / "proto" / "malt.proto").read_text()
    fields = set(re.findall(r"^\s+(optional|repeated) (\w+) (\w+) = (\d+);", text, re.M))
    expected_fields = {
        (label, type_name, name, str(number))
        for fields_of in schema.MESSAGES.values()
        for name, number, label, type_name in fields_of
    }
    assert fields == expected_fields
    values = set(re.findall(r"^\s+([A-Z][A-Z_]+) = (\d+);", text, re.M))
    assert values == {(v, str(i)) for vals in schema.ENUMS.values() for i, v in enumerate(vals)}
    assert set(re.findall(r"^message (\w+)", text, re.M)) == set(schema.MESSAGES)
    assert set(re.findall(r"^enum (\w+)", text, re.M)) == set(schema.ENUMS)


def test_pickle_cache_is_written_and_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NETARENA_CACHE_DIR", str(tmp_path))
    first = topology._load_uncached(topology.DATA_FILE)
    files = list((tmp_path / "malt").glob("graph-v*.pickle"))
    assert len(files) == 1 and files[0].stat().st_mode & 0o777 == 0o600
    calls = []
    monkeypatch.setattr(topology, "build_graph", lambda text: calls.append(1))
    second = topology._load_uncached(topology.DATA_FILE)
    assert calls == []  # served from the cache, not reparsed
    assert second.number_of_nodes() == first.number_of_nodes() == 6133
    files[0].chmod(0o666)  # a cache file others can write is not trusted (pickle runs code)
    topology._load_uncached(topology.DATA_FILE)
    assert calls == [1]  # reparsed instead of unpickling the untrusted file
