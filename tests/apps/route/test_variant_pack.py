"""The route test packs. ``heldout-faults``: fault kinds outside the public catalogue on public
topologies. ``heldout-format``: public faults, but the first observation states the topology in
the pack's own layout (its ``describe`` hook). On both, the oracle repairs every pack query on
real Mininet, the null agent none, and the scripted agent, written against the public catalogue
and the public layout, at most a fifth of levels 2 and 3 -- the gap the board measures."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

from apps.route.allowlist import check_command
from apps.route.app import RouteApp
from apps.route.episode import RouteEpisode
from apps.route.faults import with_prefix
from apps.route.prompt import (
    OBSERVATION_FORMAT_KEY,
    PACK_FORMAT,
    render_reset_observation,
    topology_writer,
)
from apps.route.queries import LEVEL_LABELS
from apps.route.scripted import read_plan
from apps.route.topology import RouteTopology
from evaluator.testing import play_reference
from evaluator.variants import (
    VariantPack,
    VariantPackError,
    load_pack,
    register_pack,
    reset_configured_packs,
)
from tests.apps.route.helpers import require_emulator

APP = RouteApp()
PACK_DIR = Path(__file__).resolve().parents[2] / "variant_packs" / "route" / "heldout-faults"
FORMAT_DIR = PACK_DIR.parent / "heldout-format"
SEED = 2026
#: Scripted agent's ceiling on the pack's levels 2 and 3.
HELD_OUT_CEILING = 0.20


@pytest.fixture(scope="module")
def pack():
    return load_pack(PACK_DIR)


def test_pack_queries_are_deterministic_and_carry_held_out_faults(pack) -> None:
    queries = pack.generate(APP, SEED, list(range(12)), None)
    again = load_pack(PACK_DIR).generate(APP, SEED, list(range(12)), None)
    assert [q.fingerprint() for q in again] == [q.fingerprint() for q in queries]
    assert {q.pack for q in queries} == {"heldout-faults"}
    assert {q.level for q in queries} == {1, 2, 3}
    for query in queries:
        kinds = {f["label"] for f in query.ground_truth["faults"]}
        assert kinds & {"NB", "BR", "LT"}, query.labels
        machines = [f["machine"] for f in query.ground_truth["faults"]]
        assert len(machines) == len(set(machines))  # one fault per machine
        for step in query.ground_truth["repair"]:
            # the oracle's repair is something an agent is allowed to type
            argv, refusal = check_command(with_prefix(step["command"], "nab1_"))
            assert argv is not None, (step, refusal)


@pytest.mark.root
@pytest.mark.netns
@pytest.mark.slow
def test_oracle_repairs_the_pack_and_the_null_agent_does_not(pack) -> None:
    require_emulator()
    for query in pack.generate(APP, SEED, list(range(6)), None):
        oracle = play_reference(APP, query, "oracle")
        assert oracle.correct and oracle.safe, (query.labels, oracle.failure)
        assert not play_reference(APP, query, "null").correct, query.labels


@pytest.mark.root
@pytest.mark.netns
@pytest.mark.slow
def test_the_scripted_agent_does_not_carry_over_to_held_out_faults(pack) -> None:
    require_emulator()
    hard = pack.generate(APP, SEED, [0, 1, 2], 2) + pack.generate(APP, SEED, [3, 4, 5], 3)
    solved = sum(bool(v.correct and v.safe)
                 for v in (play_reference(APP, q, "scripted") for q in hard))
    assert solved / len(hard) <= HELD_OUT_CEILING


# heldout-format: the pack's observation format ----------------------------------------------
@pytest.fixture(scope="module")
def format_pack() -> Iterator[VariantPack]:
    """The format pack, registered so that episodes find its ``describe`` hook."""
    loaded = load_pack(FORMAT_DIR)
    register_pack(loaded)
    yield loaded
    reset_configured_packs()


def test_format_pack_queries_carry_public_faults_and_ask_for_the_pack_format(
    format_pack: VariantPack,
) -> None:
    queries = format_pack.generate(APP, SEED, list(range(12)), None)
    again = load_pack(FORMAT_DIR).generate(APP, SEED, list(range(12)), None)
    assert [q.fingerprint() for q in again] == [q.fingerprint() for q in queries]
    assert {q.pack for q in queries} == {"heldout-format"}
    assert {q.level for q in queries} == {1, 2, 3}
    for query in queries:
        assert query.labels in LEVEL_LABELS[query.level]
        assert query.ground_truth[OBSERVATION_FORMAT_KEY] == PACK_FORMAT
        assert [f["label"] for f in query.ground_truth["faults"]] == list(query.labels)


def test_format_pack_states_the_public_facts_in_a_layout_the_public_parser_cannot_read(
    format_pack: VariantPack,
) -> None:
    for query in format_pack.generate(APP, SEED, list(range(6)), None):
        topology = RouteTopology.from_dict(query.ground_truth["topology"], "fq3_")
        write = topology_writer(query)
        text = write(topology)
        assert text == write(topology.with_prefix("fq3_"))  # seeded: same query, same text
        assert text != topology.describe()
        for machine in topology.machines():
            assert f"[{machine}]" in text
            for interface, cidr in topology.interfaces(machine):
                address = ipaddress.ip_interface(cidr)
                assert f"| {interface} | {address.ip} | {address.netmask} |" in text
            if machine in topology.routers():
                for route in topology.static_routes(machine):
                    assert f"next hop {route.split(' via ')[1].split()[0]}," in text
        assert "/24" not in text and "/30" not in text
        observation = render_reset_observation(
            query.prompt, prefix="fq3_", topology=text, initial_pingall="(none)"
        )
        assert read_plan(observation).machines == {}  # the public layout's parser finds nothing
        public_truth = {**query.ground_truth, OBSERVATION_FORMAT_KEY: "public"}
        public = replace(query, ground_truth=public_truth)
        assert topology_writer(public)(topology) == topology.describe()


def test_a_pack_format_needs_its_pack_loaded_and_a_describe_hook(format_pack: VariantPack) -> None:
    query = format_pack.generate(APP, SEED, [0], None)[0]
    unknown = {**query.ground_truth, "variant_pack": {"name": "heldout-format", "sha256": "0" * 64}}
    with pytest.raises(VariantPackError, match="not loaded"):
        RouteEpisode(replace(query, ground_truth=unknown))
    faults_pack = load_pack(PACK_DIR)
    register_pack(faults_pack)
    no_hook = {**query.ground_truth, "variant_pack": faults_pack.identity()}
    with pytest.raises(VariantPackError, match="no describe"):
        RouteEpisode(replace(query, ground_truth=no_hook, pack=faults_pack.name))


@pytest.mark.parametrize("result", ["", ValueError("bad table")])
def test_a_describe_that_fails_is_a_pack_error(
    format_pack: VariantPack, result: str | Exception
) -> None:
    def describe(topology: RouteTopology, rng: object) -> str:
        if isinstance(result, Exception):
            raise result
        return result

    module = ModuleType("broken_format_pack")
    module.describe = describe  # type: ignore[attr-defined]
    broken = VariantPack(name="broken-format", app_id="route", sha256="1" * 64, module=module)
    register_pack(broken)
    query = format_pack.generate(APP, SEED, [0], None)[0]
    truth = {**query.ground_truth, "variant_pack": broken.identity()}
    write = topology_writer(replace(query, ground_truth=truth, pack=broken.name))
    with pytest.raises(VariantPackError, match="broken-format"):
        write(RouteTopology.from_dict(query.ground_truth["topology"], "fq3_"))


@pytest.mark.root
@pytest.mark.netns
@pytest.mark.slow
def test_oracle_repairs_the_format_pack_and_the_null_agent_does_not(
    format_pack: VariantPack,
) -> None:
    require_emulator()
    for query in format_pack.generate(APP, SEED, list(range(4)), None):
        oracle = play_reference(APP, query, "oracle")
        assert oracle.correct and oracle.safe, (query.labels, oracle.failure)
        assert not play_reference(APP, query, "null").correct, query.labels


@pytest.mark.root
@pytest.mark.netns
@pytest.mark.slow
def test_the_scripted_agent_does_not_carry_over_to_another_observation_format(
    format_pack: VariantPack,
) -> None:
    require_emulator()
    hard = format_pack.generate(APP, SEED, [0, 1, 2], 2) + format_pack.generate(
        APP, SEED, [3, 4, 5], 3
    )
    solved = sum(
        bool(v.correct and v.safe) for v in (play_reference(APP, q, "scripted") for q in hard)
    )
    assert solved / len(hard) <= HELD_OUT_CEILING
