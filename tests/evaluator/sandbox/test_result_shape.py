"""The parent's pre-decoding guard on result lines (``_io.shape_refusal``).

The guard counts items and nesting outside JSON strings without decoding. These tests check it
against ``json.loads`` itself on valid JSON with hostile strings (escaped quotes and
backslashes, brackets and commas inside strings), and on invalid lines.
"""

from __future__ import annotations

import json
import random

import pytest

from evaluator.sandbox._io import outside_strings, shape_refusal

TRICKY = ['a"b', "\\", '\\"', '"', "[{,}]", "\\\\\\", 'x\\"y"z', "\u00e9\u2028", "", ",,[[{{"]


def _random_value(rng: random.Random, depth: int) -> object:
    kind = rng.randrange(6 if depth < 6 else 3)
    if kind == 0:
        return rng.choice(TRICKY) + rng.choice(TRICKY)
    if kind == 1:
        return rng.choice([0, -1.5, 10**20, True, None])
    if kind == 2:
        return rng.choice(TRICKY)
    if kind == 3:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {
        rng.choice(TRICKY) + str(i): _random_value(rng, depth + 1) for i in range(rng.randrange(4))
    }


def _counts(value: object) -> tuple[int, int]:
    """(items as the guard counts them, depth) computed from the decoded value."""
    if isinstance(value, list):
        inner = [_counts(v) for v in value]
        commas = max(len(value) - 1, 0)
        return 1 + commas + sum(i for i, _ in inner), 1 + max((d for _, d in inner), default=0)
    if isinstance(value, dict):
        inner = [_counts(v) for v in value.values()]
        commas = max(len(value) - 1, 0)
        return 1 + commas + sum(i for i, _ in inner), 1 + max((d for _, d in inner), default=0)
    return 0, 0


@pytest.mark.parametrize("seed", range(300))
def test_guard_counts_match_the_decoded_value(seed: int) -> None:
    rng = random.Random(seed)
    value = _random_value(rng, 0)
    line = json.dumps(value, ensure_ascii=rng.random() < 0.5).encode()
    items, depth = _counts(json.loads(line))
    bare = outside_strings(line)
    assert bare.count(b",") + bare.count(b"[") + bare.count(b"{") == items
    assert shape_refusal(line, items, depth) is None
    if items:
        assert shape_refusal(line, items - 1, 10**6) is not None
    if depth:
        refused = shape_refusal(line, 10**9, depth - 1)
        assert refused is not None and refused[0] == "bad_result"


def test_strings_full_of_brackets_and_escapes_are_not_counted() -> None:
    line = json.dumps(['[[[{{{,,,\\"]]]' * 1000, {'k\\"[': "\\\\"}]).encode()
    assert shape_refusal(line, 3, 2) is None
    assert outside_strings(line) == b"[, {: }]"


def test_a_guard_is_kept_on_invalid_lines() -> None:
    # an unterminated string: nothing after the quote can become objects in json.loads
    assert shape_refusal(b'[{},{},"' + b"{}," * 1000, 10, 5) is None
    # many empty dicts before garbage: counted (json.loads would build them before failing)
    refused = shape_refusal(b"[" + b"{}," * 1000 + b"\\garbage", 100, 5)
    assert refused is not None and refused[0] == "result_too_large"
    refused = shape_refusal(b"[" * 40 + b'"x\\"', 10**6, 32)
    assert refused is not None and refused[0] == "bad_result"
