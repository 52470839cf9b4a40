"""The oracle vault: where an evaluation deposits each episode's hidden query for the
deployment's own oracle reference agent.

Only evaluations of reference agents are run with a vault (the CLI's ``--oracle-vault`` or the
site's reference rows); a team's agent never gets one, and the token it sees is random, so it
cannot derive the ground truth. Files are written atomically with mode 0600.

The caller holds the deposit around the episode; the runner knows nothing of the vault::

    with vault.deposit(query) as episode_id:
        result = run_episode(app, query, client, episode_id=episode_id)
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from evaluator.runner import new_episode_id
from evaluator.types import Query

_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{8,128}$")


class OracleVault:
    """A directory of ``<episode_id>.json`` files holding ``Query.to_dict()``."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def _path(self, episode_id: str) -> Path:
        if not _TOKEN_RE.match(episode_id):
            raise ValueError(f"malformed episode id {episode_id!r}")
        return self.directory / f"{episode_id}.json"

    def put(self, episode_id: str, query: Query) -> None:
        """Store ``query`` under ``episode_id`` (atomic rename).

        Raises:
            ValueError: malformed episode id.
        """
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        target = self._path(episode_id)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
        with os.fdopen(fd, "w") as handle:
            json.dump(query.to_dict(), handle)
        os.replace(tmp, target)

    @contextmanager
    def deposit(self, query: Query, episode_id: str | None = None) -> Iterator[str]:
        """Hold ``query`` in the vault for the duration of the ``with`` block.

        Yields the episode id (the token the agent client sends; default: a fresh random
        128-bit token) and removes the entry when the block ends, however it ends.

        Raises:
            ValueError: malformed ``episode_id``.
        """
        episode_id = episode_id or new_episode_id()
        self.put(episode_id, query)
        try:
            yield episode_id
        finally:
            self.discard(episode_id)

    def get(self, episode_id: str) -> Query | None:
        """Return the stored query, or ``None`` if there is none (or the id is malformed)."""
        try:
            path = self._path(episode_id)
            return Query.from_dict(json.loads(path.read_text()))
        except (ValueError, OSError, KeyError):
            return None

    def discard(self, episode_id: str) -> None:
        """Remove the entry of a finished episode (missing entries are fine)."""
        try:
            self._path(episode_id).unlink(missing_ok=True)
        except ValueError:
            pass
