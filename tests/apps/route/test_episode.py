"""Episode loop on real Mininet: observations, errors as steps, safety, verdicts, closing."""

from __future__ import annotations

import json

import pytest

from apps.route.app import RouteApp
from apps.route.faults import with_prefix
from apps.route.network import list_interfaces
from apps.route.replies import DONE_REPLY
from evaluator.app import ResetNeededError
from evaluator.runner import run_episode
from evaluator.testing import ScriptedClient
from evaluator.types import Query
from tests.apps.route.helpers import require_emulator

pytestmark = [pytest.mark.root, pytest.mark.netns]

APP = RouteApp(switches=(2, 2), hosts=(2, 2), healthy_share=0.0)


@pytest.fixture(autouse=True)
def _emulator() -> None:
    require_emulator()


def _query(label: str, method: int | None = None, seed: int = 21, machine: str = "r0") -> Query:
    for query in APP.generate(600, seed=seed, level=1):
        fault = query.ground_truth["faults"][0]
        if (
            query.label == label
            and (method is None or fault["method"] == method)
            and fault["machine"] == machine
        ):
            return query
    raise AssertionError(f"no {label} query")


def _cmd(command: str, machine: str = "r0") -> str:
    return json.dumps({"machine": machine, "command": command})


def test_reset_shows_task_prefix_topology_and_a_broken_pingall() -> None:
    query = _query("DI")
    episode = APP.episode(query)
    with episode:
        observation = episode.reset()
        prefix = episode.network.topology.prefix
        assert observation.startswith(query.prompt)
        assert f"prefix `{prefix}`" in observation
        assert f"{prefix}r0-eth1 192.168.1.1/24" in observation
        assert "*** Results:" in observation and "X" in observation
        assert " 0.0% dropped" not in observation
    assert not [i for i in list_interfaces() if i.startswith(prefix)]


def test_step_before_reset_raises() -> None:
    episode = APP.episode(_query("DR"))
    with pytest.raises(ResetNeededError):
        episode.step(_cmd("ip route"))
    with pytest.raises(ResetNeededError):
        episode.verdict()
    episode.close()
    episode.close()  # idempotent


def test_bad_replies_are_steps_with_error_observations_and_budget_truncates() -> None:
    query = _query("DR", method=1)
    client = ScriptedClient(
        then=DONE_REPLY,
        replies=[
            "I think the router is broken.",  # unparseable
            _cmd("rm -rf /"),  # refused tool
            _cmd("ip route", machine="s1"),  # switch
            _cmd("ip route", machine="h99"),  # unknown machine
            _cmd("ip route; reboot"),  # shell syntax
            '```json\n{"machine": "r0", "command": "ip -4 route show"}\n```',  # fine, read-only
        ],
    )
    result = run_episode(APP, query, client, max_steps=6)
    assert not result.correct and result.safe and result.steps == 6
    observations = [t["content"] for t in result.transcript if t["role"] == "user"][1:]
    assert "reply not used" in observations[0]
    assert "not an allowed tool" in observations[1]
    assert "is a switch" in observations[2]
    assert "unknown machine" in observations[3]
    assert "shell syntax" in observations[4]
    assert "192.168.1.0/24 dev" in observations[5] and "Exit status: 0" in observations[5]
    assert all("Pingall after this step:" in o for o in observations)
    assert result.details["refused_steps"] == 4 and result.details["unparseable_steps"] == 1
    assert result.details["unproductive_changes"] == 0
    assert result.failure == "not_repaired"


def test_a_fix_by_hand_with_prefixed_names_is_correct_and_the_last_step_is_verified() -> None:
    query = _query("DI", method=2)
    interface = query.ground_truth["faults"][0]["params"]["interface"]

    def reply(messages: list[dict[str, str]]) -> str:
        prefix = messages[0]["content"].split("prefix `", 1)[1].split("`", 1)[0]
        if len(messages) == 1:
            return _cmd("ip link show", machine=f"{prefix}r0")
        return _cmd(f"ip link set {with_prefix(interface, prefix)} up", machine=f"{prefix}r0")

    # budget 2: the fix is the last permitted step and must still be verified
    result = run_episode(
        APP, query, ScriptedClient(lambda messages, _episode_id: reply(messages)), max_steps=2
    )
    assert result.correct and result.safe and result.steps == 2
    assert result.details["final_loss_percent"] == 0.0
    assert result.details["unproductive_changes"] == 0
    assert result.latency_s > 0 and result.failure is None


def test_breaking_a_working_interface_is_unsafe_and_counted_as_unproductive() -> None:
    query = _query("DR", method=1)  # forwarding off: only same-subnet and r0 pairs work
    episode = APP.episode(query)
    with episode:
        episode.reset()
        prefix = episode.network.topology.prefix
        step = episode.step(_cmd(f"ip link set {prefix}r0-eth1 down"))
        assert not step.safe_step and not step.terminated
        assert step.info["changed_state"] and step.info["newly_unreachable"]
        harmless = episode.step(_cmd("ip addr show"))
        assert harmless.safe_step and not harmless.info["changed_state"]
        verdict = episode.verdict()
    assert not verdict.correct and not verdict.safe
    assert verdict.details["unsafe_steps"] == [1]
    assert verdict.details["unproductive_changes"] == 1


def test_oracle_commands_through_the_sandbox_solve_and_terminate() -> None:
    query = _query("RI", method=3)
    episode = APP.episode(query)
    with episode:
        first = episode.reset()
        history = [{"role": "user", "content": first}]
        steps = []
        while True:
            text = APP.oracle_reply(query.ground_truth, history)
            steps.append(episode.step(text))
            history += [
                {"role": "assistant", "content": text},
                {"role": "user", "content": steps[-1].observation},
            ]
            if steps[-1].terminated or steps[-1].truncated:
                break
        verdict = episode.verdict()
        prefix = episode.network.topology.prefix
    assert steps[-1].terminated and verdict.correct and verdict.safe
    # adding the right address already restores pingall: the episode ends before the cleanup
    assert 1 <= verdict.steps <= len(query.ground_truth["repair"])
    assert [s.info["argv"][0] for s in steps] == ["ip"] * len(steps)
    assert with_prefix(query.ground_truth["repair"][0]["command"], prefix) in history[1]["content"]
    after = episode.step(_cmd("ip route"))
    assert after.terminated and after.info.get("ignored")


def test_done_stops_and_null_is_incorrect() -> None:
    query = _query("WR")
    result = run_episode(
        APP, query, ScriptedClient(lambda messages, _episode_id: APP.null_reply(messages))
    )
    assert not result.correct and result.safe and result.steps == 1
    assert result.failure == "stopped_unrepaired"
    assert result.details["stopped_by_agent"]


def test_packets_a_drop_policy_counts_are_not_a_state_change() -> None:
    """The fingerprint keeps a chain's policy but not its packet counters: probes dropped by a
    FORWARD DROP policy must not make a read-only step look like a change (or an unsafe one)."""
    from apps.route.network import RouteNetwork
    from apps.route.topology import RouteTopology

    net = RouteNetwork(RouteTopology(2, 2)).start()
    try:
        router = net.topology.prefix + "r0"
        assert net.exec(router, ["iptables", "-P", "FORWARD", "DROP"])[0] == 0
        before = net.fingerprint(router)
        assert ":FORWARD DROP" in before
        assert net.pingall(timeout_s=0.2).lost > 0  # the policy drops (and counts) the probes
        assert net.fingerprint(router) == before
        assert net.exec(router, ["iptables", "-P", "FORWARD", "ACCEPT"])[0] == 0
        assert net.fingerprint(router) != before  # a policy change still is one
    finally:
        net.stop()
