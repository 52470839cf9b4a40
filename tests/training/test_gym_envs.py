"""Gymnasium environments: registration, ``check_env``, seeded resets, the
reward schemes, the episode end, vector envs of 2, and nothing left behind by ``close()``."""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import SyncVectorEnv

import training
from evaluator.registry import get_app
from evaluator.sampling import HEALTHY_LABEL
from evaluator.types import JSON
from training.gym_envs import CANONICAL_NAMES, CHARSET, NetArenaEnv, RewardScheme, sanitize


def _oracle_run(
    env: gym.Env[str, str], seed: int
) -> tuple[list[float], list[str], JSON, JSON]:
    """Play the oracle through ``env`` (canonical names in its replies): rewards, reward
    kinds, the last step's info and the reset's info."""
    inner = env.unwrapped
    assert isinstance(inner, NetArenaEnv)
    observation, reset_info = env.reset(seed=seed)
    assert inner.query is not None
    history: list[JSON] = [{"role": "user", "content": observation}]
    rewards, kinds = [], []
    info: dict[str, Any] = {}
    for _ in range(inner.max_steps):
        reply = inner.app.oracle_reply(inner.query.ground_truth, history)
        observation, reward, terminated, truncated, info = env.step(reply)
        rewards.append(float(reward))
        kinds.append(info["reward_kind"])
        history += [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": observation},
        ]
        if terminated or truncated:
            break
    return rewards, kinds, info, reset_info


def test_the_three_environments_are_registered_on_import() -> None:
    assert set(training.ENV_IDS.values()) <= set(gym.registry)
    spec = gym.spec("netarena/route-v1")
    assert spec.kwargs == {"app_id": "route"}
    assert sanitize("a\u00e9b\x00") == "a?b?"
    assert len(sanitize("x" * 70_000)) == 65_536


@pytest.mark.root
def test_malt_env_passes_check_env_and_rewards_by_correct_and_safe(malt_sandbox: None) -> None:
    env = gym.make("netarena/malt-v1")
    check_env(env.unwrapped)
    inner = env.unwrapped
    assert isinstance(inner, NetArenaEnv)
    first, info = env.reset(seed=42)
    query_id = info["query_id"]
    assert env.reset(seed=42) == (first, info)
    assert env.reset(seed=43)[1]["query_id"] != query_id
    assert env.observation_space.contains(first)
    # the oracle's code: correct and safe, +100, terminated
    rewards, kinds, last, _ = _oracle_run(env, 42)
    assert (rewards, kinds) == ([100.0], ["fix"])
    assert last["verdict"] == {"correct": True, "safe": True, "failure": None, "steps": 1}
    # runnable but wrong: 0; no code: -100
    env.reset(seed=42)
    _, reward, terminated, truncated, step_info = env.step(get_app("malt").null_reply([]))
    assert (reward, terminated, truncated, step_info["reward_kind"]) == (0.0, True, False, "none")
    env.reset(seed=42)
    _, reward, terminated, _, step_info = env.step("no code here")
    assert (reward, terminated, step_info["verdict"]["failure"]) == (-100.0, True, "no_code")
    with pytest.raises(RuntimeError):
        env.step("after the end")
    # a custom scheme
    custom = gym.make("netarena/malt-v1", rewards=RewardScheme(fix=1.0, invalid=-1.0))
    custom.reset(seed=42)
    assert custom.step("no code here")[1] == -1.0
    env.close()
    env.close()
    custom.close()


@pytest.mark.root
def test_malt_vector_env_of_two(malt_sandbox: None) -> None:
    envs = SyncVectorEnv([lambda: gym.make("netarena/malt-v1", level=2) for _ in range(2)])
    observations, infos = envs.reset(seed=[7, 8])
    assert len(observations) == 2 and infos["level"].tolist() == [2, 2]
    assert infos["query_id"][0] != infos["query_id"][1]
    _, rewards, terminated, truncated, _ = envs.step(("no code", "no code either"))
    assert rewards.tolist() == [-100.0, -100.0] and terminated.all() and not truncated.any()
    envs.step(envs.action_space.sample())  # the autoreset step: both are reset
    _, rewards, terminated, _, _ = envs.step(envs.action_space.sample())
    assert terminated.all() and set(rewards.tolist()) <= {-100.0, 0.0}
    envs.close()


def _route_leftovers(prefix: str) -> list[str]:
    """Interfaces (veths, bridges) named with ``prefix`` and its Mininet node shells, whose
    network namespaces live as long as they do."""
    from apps.route.network import node_shell_pids

    interfaces = [name for name in os.listdir("/sys/class/net") if name.startswith(prefix)]
    return interfaces + [f"pid {pid}" for pid in node_shell_pids(prefix)]


@pytest.mark.root
@pytest.mark.netns
@pytest.mark.slow
def test_route_env_check_env_rewards_and_close(route_emulator: None) -> None:
    env = gym.make("netarena/route-v1", level=1)
    check_env(env.unwrapped)
    inner = env.unwrapped
    assert isinstance(inner, NetArenaEnv)
    observation, info = env.reset(seed=5)
    prefix = info["instance_names"]["prefix"]
    assert prefix and prefix not in observation and CANONICAL_NAMES["prefix"] in observation
    assert _route_leftovers(prefix)
    # a read-only step (+10), an invalid reply (-100), a refused command (-100)
    _, reward, terminated, _, step = env.step('{"machine": "r0", "command": "ip route show"}')
    assert (reward, step["reward_kind"], step["changed_state"]) == (10.0, "diagnostic", False)
    _, reward, _, _, step = env.step("what now?")
    assert (reward, step["reward_kind"]) == (-100.0, "invalid")
    _, reward, _, _, step = env.step('{"machine": "r0", "command": "rm -rf /"}')
    assert (reward, step["reward_kind"], step["error"]) == (-100.0, "invalid", "refused")
    env.close()
    assert _route_leftovers(prefix) == []
    # the oracle, replying with canonical names: its repair is a fix (+100), then solved
    for seed in range(20, 40):
        env.reset(seed=seed)
        assert inner.query is not None
        if inner.query.labels != (HEALTHY_LABEL,):
            break
    rewards, kinds, last, reset_info = _oracle_run(env, seed)
    assert "fix" in kinds and 100.0 in rewards and "invalid" not in kinds
    assert last["verdict"]["correct"] and last["verdict"]["safe"]
    prefix = reset_info["instance_names"]["prefix"]
    env.close()
    assert _route_leftovers(prefix) == []


@pytest.mark.root
@pytest.mark.netns
@pytest.mark.slow
def test_route_vector_env_of_two(route_emulator: None) -> None:
    envs = SyncVectorEnv([lambda: gym.make("netarena/route-v1", level=1) for _ in range(2)])
    try:
        _, infos = envs.reset(seed=[3, 4])
        prefixes = [str(p) for p in infos["instance_names"]["prefix"]]
        assert len(set(prefixes)) == 2 and all(_route_leftovers(p) for p in prefixes)
        _, rewards, _, _, _ = envs.step(
            ('{"machine": "r0", "command": "ip addr show"}', "nonsense")
        )
        assert rewards.tolist() == [10.0, -100.0]
    finally:
        envs.close()
    assert all(_route_leftovers(p) == [] for p in prefixes)


@pytest.mark.root
@pytest.mark.k8s
@pytest.mark.slow
def test_k8s_env_check_env_and_oracle_fix(k8s_cluster: None) -> None:
    env = gym.make("netarena/k8s-v1", level=1)
    check_env(env.unwrapped)
    inner = env.unwrapped
    assert isinstance(inner, NetArenaEnv)
    observation, info = env.reset(seed=6)
    namespace = info["instance_names"]["namespace"]
    assert namespace not in observation and CANONICAL_NAMES["namespace"] in observation
    assert all(c in CHARSET for c in observation)
    # a read-only step with the canonical namespace reaches the live one
    text, reward, _, _, step = env.step(
        f"```\nkubectl get networkpolicy -n {CANONICAL_NAMES['namespace']}\n```"
    )
    assert (reward, step["reward_kind"], step["status"]) == (10.0, "diagnostic", 0)
    assert "frontend" in text
    # the oracle: its repair is a fix (+100; a healthy control: declaring it, +100)
    rewards, kinds, last, _ = _oracle_run(env, 6)
    assert kinds[0] in ("fix", "correct_stop") and rewards[0] == 100.0
    assert last["verdict"]["correct"] and last["verdict"]["safe"]
    env.close()
