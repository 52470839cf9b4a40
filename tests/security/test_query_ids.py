"""A public query id reveals nothing about the seed, so the hidden ground
truth cannot be regenerated from it; seeds have 128 bits; generation stays deterministic.

Before: ids were SHA-256 of ``app/version/seed/index`` and seeds had 31 bits, and one
public id gave the seed of an open submission in 237 s on a 2-core machine.
"""

from __future__ import annotations

import hashlib

import pytest

from evaluator.registry import app_ids, get_app
from evaluator.types import QUERY_ID_KEY_ENV, SEED_BITS, Query, new_seed, stable_query_id

SERVER_KEY = "server-secret-for-this-test-0123456789"
SEARCH = 100_000  # candidate seeds tried by the attacker below


def _old_scheme(app_id: str, version: int, seed: int, index: int) -> str:
    digest = hashlib.sha256(f"{app_id}/v{version}/{seed}/{index}".encode()).hexdigest()[:16]
    return f"{app_id}-{digest}"


@pytest.fixture()
def server_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(QUERY_ID_KEY_ENV, SERVER_KEY)
    return SERVER_KEY


@pytest.mark.parametrize("app_id", app_ids())
def test_a_public_id_does_not_lead_to_its_seed(server_key: str, app_id: str) -> None:
    app = get_app(app_id)
    secret_seed = 77_777  # deliberately small: inside the attacker's search range
    query = app.generate(1, secret_seed)[0]
    public = query.query_id
    # The attack that worked before: hash candidate seeds and compare with the public id.
    unkeyed = {_old_scheme(app_id, app.version, s, 0) for s in range(SEARCH)}
    wrong_key = {
        stable_query_id(app_id, app.version, s, 0, key=b"attacker-guess") for s in range(SEARCH)
    }
    assert public not in unkeyed and public not in wrong_key
    # Control: the same search with the server's key does find it, so only the key (and, on
    # the site, 128-bit seeds that no search covers) keeps the seed out of reach.
    key = server_key.encode()
    assert public in (stable_query_id(app_id, app.version, s, 0, key=key) for s in range(SEARCH))


def test_ids_are_stable_under_one_key_and_unrelated_across_keys(monkeypatch) -> None:
    app = get_app(app_ids()[0])
    monkeypatch.setenv(QUERY_ID_KEY_ENV, SERVER_KEY)
    first = [q.query_id for q in app.generate(5, 11)]
    assert first == [q.query_id for q in app.generate(5, 11)]
    monkeypatch.setenv(QUERY_ID_KEY_ENV, "another-server-secret-0123456789")
    other = [q.query_id for q in app.generate(5, 11)]
    assert not set(first) & set(other)


def test_an_id_survives_process_boundaries_through_the_query_dict(monkeypatch) -> None:
    monkeypatch.delenv(QUERY_ID_KEY_ENV, raising=False)  # per-process random key
    query = get_app(app_ids()[0]).generate(1, 5)[0]
    monkeypatch.setenv(QUERY_ID_KEY_ENV, SERVER_KEY)  # "another process", another key
    assert Query.from_dict(query.to_dict()).query_id == query.query_id


def test_a_short_key_is_refused(monkeypatch) -> None:
    monkeypatch.setenv(QUERY_ID_KEY_ENV, "short")
    with pytest.raises(ValueError, match=QUERY_ID_KEY_ENV):
        get_app(app_ids()[0]).generate(1, 1)


@pytest.mark.parametrize("app_id", app_ids())
def test_128_bit_seeds_generate_deterministically(app_id: str) -> None:
    seeds = [new_seed() for _ in range(4)]
    assert len(set(seeds)) == 4 and max(s.bit_length() for s in seeds) > SEED_BITS - 8
    app = get_app(app_id)
    first = [q.fingerprint() for q in app.generate(6, seeds[0])]
    assert first == [q.fingerprint() for q in app.generate(6, seeds[0])]
    assert first != [q.fingerprint() for q in app.generate(6, seeds[1])]
