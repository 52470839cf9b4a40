"""The route allow-list's rule set, pinned: every command of a large corpus keeps its verdict.

``allowlist_corpus.json`` holds commands and whether the allow-list accepted them when it was
still written as hand-coded per-tool checks (before it became a table of command specs and
one checker): the commands the reference, heuristic and scripted agents send (a run of the
scripted agent on Mininet included), every fault's injection and repair, the distractors of
generated queries and the variant pack, the few-shot answers, the command strings of the
route tests and docs, and generated variants: every option of every tool spelled in full,
abbreviated, clustered and with good, bad and missing values, every ``ip``/``tc`` object
prefix with every sub-command, refused keywords and their abbreviations, unknown options,
file names, sysctl keys of every tree, ``cat`` paths, and shell metacharacters, quotes and
control characters around everyday commands. A change of verdict is a change of the rule
set: make it on purpose, in the table, and update the corpus with it.
"""

from __future__ import annotations

import json
from pathlib import Path

from apps.route.allowlist import ALLOWED_TOOLS, check_command

CORPUS = json.loads((Path(__file__).parent / "allowlist_corpus.json").read_text())


def test_the_corpus_is_large_and_covers_every_tool() -> None:
    accepted, refused = CORPUS["accepted"], CORPUS["refused"]
    assert len(accepted) > 10_000 and len(refused) > 15_000
    assert not set(accepted) & set(refused)
    for tool in ALLOWED_TOOLS:
        assert any(c.split(" ", 1)[0] == tool for c in accepted), tool
        assert any(c.split(" ", 1)[0] == tool for c in refused), tool


def test_every_accepted_command_is_still_accepted() -> None:
    changed = []
    for command in CORPUS["accepted"]:
        argv, reason = check_command(command)
        if argv is None:
            changed.append((command, reason))
    assert not changed, f"{len(changed)} now refused, e.g. {changed[:10]}"


def test_every_refused_command_is_still_refused_with_a_reason() -> None:
    changed = []
    for command in CORPUS["refused"]:
        argv, reason = check_command(command)
        if argv is not None or not reason:
            changed.append(command)
    assert not changed, f"{len(changed)} now accepted, e.g. {changed[:10]}"
