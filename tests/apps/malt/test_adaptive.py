"""The MALT adaptive agent (apps/malt/adaptive.py) learns a held-out pack from one exposed batch
(prompts and ground truths, what a team sees once a pack is spent) and answers a fresh batch of
that pack, but nothing of a pack it never saw: the reason packs are rotated once exposed.

Fast: the replies are run in-process (our own code, no sandbox) and judged by the real judge
(:func:`apps.malt.scoring.judge`), on the shipped fabric and the packs' fabric variants. The
full measurement through the episode runner and sandbox is ``benchmarks/bench_difficulty.py
--agents oracle,scripted,adaptive --exposed-pack ... --sealed-pack ...``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from apps.malt.adaptive import abstract, clauses, learner_from
from apps.malt.app import MaltApp
from apps.malt.fabric import GBPS, graph_ref, query_graph
from apps.malt.prompt import SANDBOX_PREAMBLE
from apps.malt.reference import request_text
from apps.malt.replies import extract_code
from apps.malt.scoring import judge
from apps.malt.scripted import program_reply
from evaluator.sandbox._child import encode_result
from evaluator.types import Query
from evaluator.variants import generate_batch, load_pack

APP = MaltApp()
PACKS = Path(__file__).resolve().parents[2] / "variant_packs" / "malt"
EXPOSED, SEALED = PACKS / "heldout-families", PACKS / "heldout-wording"
EXPOSURE_SEED, EXPOSURE_COUNT = 7, 120
SEED, COUNT = 31, 20
#: Targets of the module docstring of apps/malt/adaptive.py.
EXPOSED_FLOOR, SEALED_CEILING = 0.80, 0.20


def correct_in_process(query: Query, reply: str) -> bool:
    """Run the reply's ``process_graph`` here on a copy of the query graph, encode the result as
    the sandbox does and judge it: correct and safe."""
    code = extract_code(reply).code
    assert code is not None
    namespace: dict[str, Any] = {}
    exec(SANDBOX_PREAMBLE + code, namespace)  # noqa: S102 - our own agents' code
    graph = query_graph(graph_ref(query.ground_truth)).copy()  # attribute dicts copied too
    try:
        value = namespace["process_graph"](graph)
    except Exception:  # noqa: BLE001 - a wrong program fails like agent code would
        return False
    verdict = judge(query.ground_truth, json.loads(encode_result(value, 0.0))["value"], 0.0)
    return verdict.correct and verdict.safe


@pytest.fixture(scope="module")
def learner():
    pack = load_pack(EXPOSED)
    return learner_from(generate_batch(APP, EXPOSURE_COUNT, EXPOSURE_SEED, packs=[pack],
                                       share=1.0))


def _batch(directory: Path, levels: tuple[int, ...]) -> list[Query]:
    queries = generate_batch(APP, COUNT, SEED, packs=[load_pack(directory)], share=1.0)
    chosen = [q for q in queries if q.level in levels]
    assert chosen
    return chosen


def test_learns_the_exposed_pack_and_not_a_sealed_one(learner) -> None:
    assert learner.learned == EXPOSURE_COUNT
    exposed = _batch(EXPOSED, (1, 2, 3))
    hits = sum(correct_in_process(q, learner.reply([{"role": "user", "content": q.prompt}]))
               for q in exposed)
    assert hits >= EXPOSED_FLOOR * len(exposed), (hits, len(exposed))
    # on a pack it never saw it recognises (almost) no request, so it has nothing of its own
    # to answer with (its fallback, the scripted agent, is held to the same ceiling by
    # test_variant_pack.py); whatever it does recognise must be answered correctly to count
    sealed = _batch(SEALED, (2, 3))
    own = [(q, learner.program(request_text([{"role": "user", "content": q.prompt}])))
           for q in sealed]
    solved = sum(
        correct_in_process(q, program_reply(program)) for q, program in own if program)
    assert solved <= SEALED_CEILING * len(sealed), (solved, len(sealed))


def test_forms_abstract_names_numbers_units_and_kinds() -> None:
    form, slots = abstract("Give switch `a.b` a fresh port of 40 Gbit/s and that rack 3 ports.")
    assert form == "give <K> <N> a fresh <K> of <C> and <T> <I> <K>."
    assert slots == [("K", "EK_PACKET_SWITCH"), ("N", "a.b"), ("K", "EK_PORT"),
                     ("C", 40 * GBPS), ("T", "EK_RACK"), ("I", 3), ("K", "EK_PORT")]
    # two operations: cut where the tail still names a node; connectives dropped
    assert clauses("Drop rack `r`. Next, what bandwidth do the ports of that rack sum to?", 2) == [
        "Drop rack `r`.", "what bandwidth do the ports of that rack sum to?"]
