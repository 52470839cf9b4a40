"""An agent cannot turn its failures into unscored episodes: two MALT episodes of one agent that
busy-loop side by side (two workers) are both scored as the agent's timeouts, never dropped as
infrastructure (docs/metrics.md, "Infrastructure failures"). Before, each episode counted the
other's spinning processes as host load and both ended as ``SandboxOverloadedError``."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from apps.malt.app import MaltApp
from apps.malt.episode import MaltEpisode
from evaluator.runner import run_episode_guarded
from evaluator.sandbox import SandboxLimits
from evaluator.testing import ScriptedClient
from evaluator.types import Query
from tests.conftest import require_root, require_tool

#: Code that forks into six processes that all spin until the wall-clock budget runs out.
SPINNING_REPLY = (
    "```python\n"
    "import os\n"
    "def process_graph(graph_data):\n"
    "    for _ in range(5):\n"
    "        if os.fork() == 0:\n"
    "            break\n"
    "    while True:\n"
    "        pass\n"
    "```\n"
)


class ShortBudgetMalt(MaltApp):
    """MALT with a 3 s budget for agent code (the default is 10 s), to keep the test short."""

    def episode(self, query: Query, **options: Any) -> MaltEpisode:
        return MaltEpisode(query, limits=SandboxLimits(wall_timeout_s=3.0, cpu_time_s=30.0))


@pytest.mark.root
@pytest.mark.slow
def test_two_concurrent_busy_looping_episodes_of_one_agent_are_both_scored() -> None:
    require_root()
    require_tool("bwrap")
    app = ShortBudgetMalt()
    queries = app.generate(2, seed=5150, level=1)
    with ThreadPoolExecutor(2) as pool:
        futures = [
            pool.submit(run_episode_guarded, app, query, ScriptedClient([SPINNING_REPLY] * 3),
                        max_steps=1, backoff_s=())
            for query in queries
        ]
        results = [future.result() for future in futures]
    for result in results:
        assert result.infrastructure is None and result.scored, result.failure
        assert not result.correct
        # the sandbox's own timeout, not excused and not even retried: the overload test
        # subtracts every sandboxed task (the runner would otherwise charge the overload
        # to the agent after three attempts, as "agent_caused:SandboxOverloadedError")
        assert result.failure == "sandbox:timeout"


def _reply(body: str) -> str:
    return f"```python\n{body}```\n"


#: A reply whose complete result (an empty answer) arrives but whose process exits 30 s later.
LATE_EXIT_REPLY = _reply(
    "import os, sys, time\n"
    "def process_graph(graph_data):\n"
    "    os.write(int(sys.argv[1]), b'{\"kind\":\"result\",\"value\":[]}\\n')\n"
    "    time.sleep(30)\n"
)
ON_TIME_REPLY = _reply("def process_graph(graph_data):\n    return []\n")


@pytest.mark.root
def test_a_late_sandbox_exit_after_the_result_is_retried_not_scored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sandbox that does not exit within ``EXIT_GRACE_S`` after its complete result is a
    platform fault (``SandboxExitError``): the runner retries the episode and scores the
    attempt that ended normally; only a late exit on every attempt is charged to the agent
    (``agent_caused``, docs/metrics.md rule 2), never a ``sandbox:*`` verdict."""
    require_root()
    require_tool("bwrap")
    from evaluator.sandbox import _io, _run

    for module in (_io, _run):
        monkeypatch.setattr(module, "EXIT_GRACE_S", 0.5)
    app = ShortBudgetMalt()
    query = app.generate(1, seed=5150, level=1)[0]
    client = ScriptedClient([LATE_EXIT_REPLY, ON_TIME_REPLY])
    retried = run_episode_guarded(app, query, client, max_steps=1, backoff_s=())
    assert client.calls == 2
    assert retried.infrastructure is None and retried.scored
    assert not (retried.failure or "").startswith(("sandbox:", "agent_caused"))
    every_time = run_episode_guarded(
        app, query, ScriptedClient([LATE_EXIT_REPLY]), max_steps=1, backoff_s=()
    )
    assert every_time.failure == "agent_caused:SandboxExitError"
