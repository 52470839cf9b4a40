"""``manage.py check_pack`` (evaluator/pack_check.py): the repository's test packs pass, and
three broken MALT packs, written here by wrapping the public generator, fail the rule that
names their fault (small counts: each case takes seconds)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from evaluator.pack_check import PackReport, check_pack, clause_forms
from tests.conftest import require_root, require_tool

PACKS = Path(__file__).resolve().parents[1] / "variant_packs"
#: Small public sample for the novelty check (the default, 150, is for operators).
PUBLIC = 15


def _sandbox() -> None:
    require_root()
    require_tool("bwrap")
    require_tool("setpriv")


def _write_pack(root: Path, name: str, body: str) -> Path:
    directory = root / name
    directory.mkdir()
    (directory / "pack.toml").write_text(f'name = "{name}"\napp = "malt"\n')
    (directory / "pack.py").write_text(textwrap.dedent(body))
    return directory


#: Public queries under the pack's name, but drawn from a seed that includes the process id:
#: identical within one process, different in the next.
NON_DETERMINISTIC = """
    import dataclasses
    import os

    from evaluator.variants import with_pack


    def generate(app, pack, seed, indices, level):
        public = app.generate(max(indices) + 1, seed + os.getpid())
        return [with_pack(dataclasses.replace(public[i], seed=seed), pack) for i in indices]
"""

#: Every query sets a port to 0 bit/s: the expected final topology breaks the bandwidth floor.
UNSAFE = """
    from apps.malt.fabric import graph_key
    from apps.malt.prompt import render_prompt
    from apps.malt.queries import ground_truth
    from evaluator.variants import pack_query

    PORT = "EK_PORT:ju1.a1.m1.s2c1.p1"


    def generate(app, pack, seed, indices, level):
        out = []
        for index in indices:
            program = [{"op": "set_capacity", "node": PORT, "capacity_bps": 0}]
            truth, _ = ground_truth(program, graph_key(seed, index, app.version))
            question = "Switch off port `ju1.a1.m1.s2c1.p1` by setting it to 0 bit/s."
            truth["question"] = question
            prompt = render_prompt(question, truth["answer_kind"], truth["changes_topology"])
            out.append(pack_query(app, pack, seed=seed, index=index, level=1,
                                  labels=("update",), prompt=prompt, ground_truth=truth))
        return out
"""

#: The public queries, relabelled: the public scripted agent solves them.
PUBLIC_COPY = """
    from evaluator.variants import with_pack


    def generate(app, pack, seed, indices, level):
        public = app.generate(max(indices) + 1, seed)
        return [with_pack(public[i], pack) for i in indices]
"""


def _statuses(report: PackReport) -> dict[str, str]:
    return {check.name: check.status for check in report.checks}


def test_clause_forms_abstract_names_numbers_and_units() -> None:
    assert clause_forms("Tally `x` (answer in Gbit/s).") == ["tally <name>", "answer in <unit>"]
    assert clause_forms("Bump `x` to 40 Gbit/s. Then list it.") == [
        "bump <name> to <n> <unit>", "then list it"]
    assert clause_forms("Raise port ju1.a1.m1.s2c1.p3 to 100000000000 bit/s") == clause_forms(
        "Raise port EK_PORT:x.p9 to 25 Gbit/s")
    # "h1" alone is no clause (nothing but a placeholder); "eth0" holds a digit: a name
    assert clause_forms("h1: eth0 10.0.1.2/24 on s1") == ["<name> <addr> on <name>"]


def test_the_malt_test_pack_passes_every_check() -> None:
    _sandbox()
    report = check_pack(PACKS / "malt" / "heldout-wording", 4, seed=11, public_count=PUBLIC)
    assert report.passed, report.format()
    assert set(_statuses(report).values()) == {"pass"}
    text = report.format()
    assert "oracle correct and safe on 4/4, null incorrect on 4/4" in text
    assert text.endswith("pack heldout-wording: passed")


@pytest.mark.parametrize(
    "pack", ["route/heldout-faults", "k8s/heldout-architecture", "k8s/heldout-layout"])
def test_the_route_and_k8s_test_packs_pass_the_checks_without_episodes(pack: str) -> None:
    report = check_pack(PACKS / pack, 5, seed=11, episodes=False, public_count=PUBLIC)
    assert report.passed, report.format()
    assert _statuses(report)["ground-truth"] == "pass"
    assert _statuses(report)["reference-agents"] == "skip"  # skipped, never passed


def test_a_pack_that_differs_between_processes_fails_determinism(tmp_path: Path) -> None:
    directory = _write_pack(tmp_path, "pid-seeded", NON_DETERMINISTIC)
    report = check_pack(directory, 3, seed=5, episodes=False, public_count=PUBLIC)
    assert not report.passed
    assert _statuses(report)["determinism"] == "fail"
    assert _statuses(report)["ground-truth"] == "pass"  # each copy on its own is sound
    rules = {(f.rule, f.where.split(" (")[0]) for f in report.failures()}
    assert {("same-bytes", f"query {i}") for i in range(3)} <= rules


def test_a_pack_with_an_unsafe_ground_truth_fails_naming_rule_and_query(
    tmp_path: Path,
) -> None:
    directory = _write_pack(tmp_path, "zero-port", UNSAFE)
    report = check_pack(directory, 2, seed=5, episodes=False, public_count=PUBLIC)
    assert _statuses(report)["ground-truth"] == "fail"
    assert _statuses(report)["determinism"] == "pass"
    found = {(f.rule, f.where) for f in report.failures()}
    assert found == {("safety:bandwidth", "query 0 (update, L1)"),
                     ("safety:bandwidth", "query 1 (update, L1)")}


def test_the_command_prints_the_failing_rule_and_query_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = _write_pack(tmp_path, "zero-port", UNSAFE)
    with pytest.raises(CommandError) as raised:
        call_command("check_pack", str(directory), "--queries", "1", "--no-episodes",
                     "--public-queries", str(PUBLIC))
    assert raised.value.returncode == 1
    out = capsys.readouterr().out
    assert "[FAIL] ground-truth" in out
    assert "FAIL safety:bandwidth query 0 (update, L1)" in out
    assert "pack zero-port: FAILED (ground-truth)" in out


def test_a_pack_the_public_scripted_agent_solves_fails_the_ceiling(tmp_path: Path) -> None:
    _sandbox()
    directory = _write_pack(tmp_path, "public-copy", PUBLIC_COPY)
    report = check_pack(directory, 3, seed=5, public_count=PUBLIC)
    statuses = _statuses(report)
    assert statuses["scripted-ceiling"] == "fail"
    assert statuses["reference-agents"] == "pass"  # oracle and null as they must be
    over = [f for f in report.failures() if f.rule == "scripted-ceiling"]
    assert over and all(f.where.startswith("label ") and "> 20%" in f.message for f in over)
    novelty = next(c for c in report.checks if c.name == "novelty")
    assert "(100.0%) already in the public generator" in novelty.summary


def test_show_prints_requests_beside_their_programs(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("check_pack", str(PACKS / "malt" / "heldout-wording"), "--show", "2",
                 "--seed", "4")
    out = capsys.readouterr().out
    blocks = out.strip().split("\n\n")
    assert len(blocks) == 2 and blocks[0].startswith("=== query 0 (")
    assert all("\n---\nprogram: [" in block and "\nanswer_kind: " in block for block in blocks)


def test_novelty_reports_the_share_known_per_source_and_can_fail(tmp_path: Path) -> None:
    from evaluator.pack_check import check_novelty
    from evaluator.registry import get_app
    from evaluator.variants import load_pack

    app = get_app("malt")
    wording = load_pack(PACKS / "malt" / "heldout-wording")
    queries = wording.generate(app, 5, [0, 1, 2], None)
    # the pack itself as a spent pack: every one of its forms is known there
    result = check_novelty(app, queries, 5, public_count=PUBLIC, spent=[wording])
    assert result.status == "pass"  # report only by default
    spent_line = next(line for line in result.details if line.startswith("spent pack"))
    assert spent_line.endswith("(100.0%)")
    # public queries relabelled: all known to the public generator, over a 50% limit
    copy = load_pack(_write_pack(tmp_path, "public-copy", PUBLIC_COPY))
    public = copy.generate(app, 5, [0, 1, 2], None)
    failed = check_novelty(app, public, 5, public_count=PUBLIC, max_known_share=0.5)
    assert failed.status == "fail"
    assert [f.rule for f in failed.findings] == ["known-wording"]
    assert failed.findings[0].where.startswith("public generator")
