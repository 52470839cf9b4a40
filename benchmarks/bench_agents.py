"""Benchmark: median cost of one agent call through the guarded clients and reference servers.

Stages (all on loopback, so the figures are the evaluator's own overhead, not network time):

- ``guard``: ``OutboundGuard.check_url`` on a literal address (no DNS);
- ``raw httpx``: a plain ``httpx.Client`` POST to the null agent server (the baseline);
- ``http-json`` / ``openai-chat``: ``make_client(...).complete`` to the same server on each
  protocol (guard + pinning + streaming size cap + JSON checks);
- ``llm chain``: client -> served llm agent (ReAct) -> scripted model server -> reply
  extraction, i.e. two HTTP hops.

Usage: .venv/bin/python benchmarks/bench_agents.py [--calls 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

from evaluator.agents import LOOPBACK_NETWORKS, OutboundGuard, make_client  # noqa: E402
from evaluator.app import App, Episode  # noqa: E402
from evaluator.reference.agents import NullAgent  # noqa: E402
from evaluator.reference.llm import LlmAgent, make_llm_agent  # noqa: E402
from evaluator.reference.scripted_llm import ScriptedModel, build_scripted_app  # noqa: E402
from evaluator.reference.server import build_asgi_app, serve_in_thread  # noqa: E402
from evaluator.types import JSON, Query  # noqa: E402

CHAT = [
    {"role": "user", "content": "Task: repair the network. " + "x" * 2000},
    {"role": "assistant", "content": '{"machine": "r0", "command": "ip addr show"}'},
    {"role": "user", "content": "Output:\n" + "y" * 4000},
]


class EchoApp(App):
    """A do-nothing app: the null reply is a fixed JSON command (route-like reply format)."""

    app_id = "bench"
    max_steps = 10
    reply_format = "json"

    def generate(self, count: int, seed: int, level: int | None = None) -> list[Query]:
        return []

    def episode(self, query: Query, **options: Any) -> Episode:
        raise RuntimeError("the benchmark never runs episodes")

    def oracle_reply(self, ground_truth: JSON, history: list[JSON]) -> str:
        return ""

    def null_reply(self, history: list[JSON]) -> str:
        return '{"done": true}'


def median_ms(call: Callable[[], object], repeats: int) -> tuple[float, float]:
    for _ in range(min(20, repeats)):
        call()  # warm up connections
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.9 * (len(samples) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    options = parser.parse_args()
    app = EchoApp()
    rows: list[tuple[str, float, float]] = []

    guard = OutboundGuard(LOOPBACK_NETWORKS)
    rows.append(
        (
            "guard check_url",
            *median_ms(lambda: guard.check_url("http://127.0.0.1:1/"), options.calls * 10),
        )
    )
    null_server = serve_in_thread(build_asgi_app(NullAgent(app), "http-json"))
    chat_server = serve_in_thread(build_asgi_app(NullAgent(app), "openai-chat"))
    a2a_server = serve_in_thread(build_asgi_app(NullAgent(app), "a2a"))
    body = {"prompt": CHAT[-1]["content"], "history": CHAT[:-1], "episode_id": "bench-0001"}
    with httpx.Client() as raw:
        rows.append(
            (
                "raw httpx (baseline)",
                *median_ms(lambda: raw.post(null_server.url, json=body).json(), options.calls),
            )
        )
    for protocol, server in (
        ("http-json", null_server),
        ("openai-chat", chat_server),
        ("a2a", a2a_server),
    ):
        client = make_client(protocol, server.url, allowed_networks=LOOPBACK_NETWORKS)
        rows.append(
            (
                f"{protocol} client",
                *median_ms(partial(client.complete, CHAT, episode_id="bench-0001"), options.calls),
            )
        )
        client.close()

    rules = {
        "rules": [
            {
                "match": {"system": "Thought:"},
                "reply": 'Thought: check the routes.\nAction: {"machine": "r0", '
                '"command": "ip route show"}',
            }
        ]
    }
    upstream = serve_in_thread(build_scripted_app(ScriptedModel.from_dict(rules)))
    agent: LlmAgent = make_llm_agent(app, upstream_url=upstream.url, strategy="react")
    llm_server = serve_in_thread(build_asgi_app(agent, "openai-chat"))
    client = make_client("openai-chat", llm_server.url, allowed_networks=LOOPBACK_NETWORKS)
    assert client.complete(CHAT, episode_id="bench-0001").text.startswith('{"machine": "r0"')
    rows.append(
        (
            "llm chain (2 hops, react)",
            *median_ms(lambda: client.complete(CHAT, episode_id="bench-0001"), options.calls),
        )
    )
    for server in (null_server, chat_server, a2a_server, upstream, llm_server):
        server.stop()

    print(f"{'stage':<28} {'median ms':>10} {'p90 ms':>10}   ({options.calls} calls)")
    for name, median, p90 in rows:
        print(f"{name:<28} {median:>10.3f} {p90:>10.3f}")


if __name__ == "__main__":
    main()
