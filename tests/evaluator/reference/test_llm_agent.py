"""The LLM reference agent against the scripted model server, over real HTTP end to end.

Chain under test: episode runner -> agent client -> served llm agent -> OpenAI client ->
scripted model server. The scripted rules only answer usefully when the strategy's system
prompt is present, so a passing episode shows both what went upstream and that the model's
prose was turned into the reply the app parses.
"""

from __future__ import annotations

import json

import httpx
import pytest

from evaluator import registry
from evaluator.agents import AgentError, make_client
from evaluator.reference.agents import AgentConfigError, make_agent
from evaluator.reference.llm import (
    STRATEGIES,
    extract_reply,
    make_llm_agent,
    system_prompt,
    upstream_messages,
)
from evaluator.reference.scripted_llm import ScriptedModel, build_scripted_app
from evaluator.reference.server import build_asgi_app
from evaluator.runner import run_episode
from evaluator.testing import ToyApp
from tests.evaluator.conftest import LOOPBACK

pytestmark = pytest.mark.usefixtures("toy_apps")

LOOK = '{"action": "look"}'


class Chain:
    """A scripted model server plus an llm agent served in front of it."""

    def __init__(
        self, serve, rules: dict, app_id: str, strategy: str, protocol: str = "openai-chat"
    ) -> None:
        self.upstream = serve(build_scripted_app(ScriptedModel.from_dict(rules)))
        self.app = registry.get_app(app_id)
        self.agent = make_agent(
            "llm",
            self.app,
            llm_options={
                "upstream_url": self.upstream.url,
                "model": "scripted-7b",
                "api_key_env": "SCRIPTED_KEY",
                "strategy": strategy,
            },
        )
        server = serve(build_asgi_app(self.agent, protocol))
        self.client = make_client(protocol, server.url, allowed_networks=LOOPBACK, timeout_s=10)

    def upstream_requests(self) -> list[dict]:
        return httpx.get(self.upstream.url + "/scripted/requests").json()["requests"]

    def run(self, count: int, seed: int) -> list:
        return [run_episode(self.app, q, self.client) for q in self.app.generate(count, seed)]


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTED_KEY", "sk-scripted")


# What each strategy's system prompt must (and must not) contain.
STRATEGY_MARKERS = {
    "zero-shot": ([], ["step by step", "Thought:", "solved examples"]),
    "few-shot": (["solved examples"], ["step by step", "Thought:"]),
    "cot": (["step by step", "Final Answer:"], ["Thought:", "solved examples"]),
    "react": (["Thought:", "Action:", "Observation:"], ["solved examples"]),
}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_each_strategy_sends_its_prompt_upstream(serve, strategy: str) -> None:
    chain = Chain(serve, {"default": LOOK}, "toy", strategy)
    conversation = [
        {"role": "user", "content": "Find the secret word."},
        {"role": "assistant", "content": LOOK},
        {"role": "user", "content": "The secret word is tern."},
    ]
    reply = chain.client.complete(conversation, episode_id="vault-token-123")
    assert reply.text == LOOK
    (request,) = chain.upstream_requests()
    body = request["body"]
    assert body["model"] == "scripted-7b"
    assert body["temperature"] == 0.0
    assert request["authorization"] == "Bearer sk-scripted"
    assert request["episode_header"] not in (None, "vault-token-123")  # only a hash goes out
    system, *chat = body["messages"]
    assert system["role"] == "system"
    assert "JSON object" in system["content"]  # the toy app's reply format
    present, absent = STRATEGY_MARKERS[strategy]
    assert all(p in system["content"] for p in present)
    assert not any(a in system["content"] for a in absent)
    if strategy == "few-shot":
        examples = ToyApp().few_shot_examples()
        assert chat[: 2 * len(examples)] == [
            message
            for number, (question, answer) in enumerate(examples, start=1)
            for message in (
                {"role": "user", "content": f"Example {number}:\n{question}"},
                {"role": "assistant", "content": answer},
            )
        ]
        chat = chat[2 * len(examples) :]
    expected_last = "The secret word is tern."
    if strategy == "react":
        expected_last = "Observation:\n" + expected_last
    assert chat == [*conversation[:2], {"role": "user", "content": expected_last}]


REACT_RULES = {
    "rules": [
        {
            "name": "say",
            "match": {"system": "Thought:", "last_user": r"secret word is (\w+)\."},
            "reply": 'Thought: the observation names it.\nAction: {"action": "say", "word": "\\1"}',
        },
        {
            "name": "look",
            "match": {"system": "Thought:"},
            "reply": "Thought: I cannot see the word yet, inspect first.\n"
            'Action:\n```json\n{"action": "look"}\n```\nI will wait for the result.',
        },
    ],
    "default": "no idea",
}


@pytest.mark.parametrize("protocol", ["openai-chat", "http-json"])
def test_react_solves_a_multi_turn_episode(serve, protocol: str) -> None:
    chain = Chain(serve, REACT_RULES, "toy", "react", protocol)
    results = chain.run(3, seed=21)
    assert [(r.correct, r.steps) for r in results] == [(True, 2)] * 3
    # the agent returned bare JSON commands, not the model's prose
    assistant = [e["content"] for e in results[0].transcript if e["role"] == "assistant"]
    assert assistant[0] == LOOK
    assert json.loads(assistant[1])["action"] == "say"
    rules = [r["rule"] for r in chain.upstream_requests()]
    assert rules == ["look", "say"] * 3


def test_without_the_react_prompt_the_same_model_fails(serve) -> None:
    chain = Chain(serve, REACT_RULES, "toy", "zero-shot")
    results = chain.run(2, seed=21)
    assert [r.correct for r in results] == [False, False]
    assert {r["rule"] for r in chain.upstream_requests()} == {None}


CODE_RULES = {
    "rules": [
        {
            "name": "cot",
            "match": {"system": "step by step", "last_user": r"number (\d+)\."},
            "reply": "The function only has to return \\1.\nFinal Answer:\n```python\n"
            "def answer():\n    return \\1\n```\nThat is all.",
        },
        {
            "name": "react",
            "match": {"system": "one reply", "last_user": r"number (\d+)\."},
            "reply": "Thought: no data needed.\nThought: return the literal \\1.\n"
            "Final Answer: ```python\ndef answer():\n    return \\1\n```",
        },
        {
            "name": "plain",
            "match": {"last_user": r"number (\d+)\."},
            "reply": "<think>maybe\n```python\ndef answer():\n    return 0\n```</think>"
            "Here you go:\n```python\ndef answer():\n    return \\1\n```",
        },
    ],
}


@pytest.mark.parametrize(
    ("strategy", "rule"), [("cot", "cot"), ("react", "react"), ("zero-shot", "plain")]
)
def test_single_shot_code_replies_are_reduced_to_the_code_block(serve, strategy, rule) -> None:
    chain = Chain(serve, CODE_RULES, "toycode", strategy)
    results = chain.run(3, seed=4)
    assert [r.correct for r in results] == [True] * 3
    assert {r["rule"] for r in chain.upstream_requests()} == {rule}
    if strategy == "react":
        system = chain.upstream_requests()[0]["body"]["messages"][0]["content"]
        assert "exactly one reply" in system and "Observation:" not in system


def test_upstream_failure_is_a_clean_failed_episode(serve) -> None:
    rules = {"rules": [{"name": "down", "status": 503}]}
    chain = Chain(serve, rules, "toy", "zero-shot")
    with pytest.raises(AgentError, match=r"HTTP 502.*upstream model failed \(http_status\)"):
        chain.client.complete([{"role": "user", "content": "x"}], episode_id="e-12345678")
    result = chain.run(1, seed=0)[0]
    assert not result.correct and result.failure == "agent:http_status"


def test_llm_agent_configuration_errors(monkeypatch) -> None:
    monkeypatch.delenv("NETARENA_LLM_URL", raising=False)
    toy, code = registry.get_app("toy"), registry.get_app("toycode")
    with pytest.raises(AgentConfigError, match="upstream"):
        make_llm_agent(toy)
    with pytest.raises(AgentConfigError, match="NOT_SET_ANYWHERE"):
        make_llm_agent(toy, upstream_url="http://127.0.0.1:9", api_key_env="NOT_SET_ANYWHERE")
    with pytest.raises(AgentConfigError, match="few_shot_examples"):
        make_llm_agent(code, upstream_url="http://127.0.0.1:9", strategy="few-shot")
    with pytest.raises(AgentConfigError, match="strategy"):
        make_llm_agent(toy, upstream_url="http://127.0.0.1:9", strategy="tree-of-thought")
    with pytest.raises(AgentConfigError, match="scheme"):
        make_llm_agent(toy, upstream_url="unix:///run/model.sock")


@pytest.mark.parametrize(
    ("raw", "fmt", "strategy", "expected"),
    [
        (
            'Sure!\n```json\n{"machine": "r0", "command": "ip route"}\n```',
            "json",
            "zero-shot",
            '{"machine": "r0", "command": "ip route"}',
        ),
        (
            'Thought: {"draft": 1}\nAction: {"machine": "h1",\n "command": "ip a"}',
            "json",
            "react",
            '{"machine": "h1", "command": "ip a"}',
        ),
        ("no json here", "json", "zero-shot", "no json here"),
        (
            "Use this:\n```bash\nkubectl get networkpolicy -n shop\n```",
            "command",
            "zero-shot",
            "```\nkubectl get networkpolicy -n shop\n```",
        ),
        ("Final Answer: `kubectl get pods`", "command", "cot", "```\nkubectl get pods\n```"),
        (
            "```kubectl describe netpol cart```",
            "command",
            "zero-shot",
            "```\nkubectl describe netpol cart\n```",
        ),
        ("```\n$ kubectl get svc\n```", "command", "zero-shot", "```\nkubectl get svc\n```"),
        (
            "steps...\n**Final Answer:**\n```python\ndef process_graph(g):\n    return g\n```",
            "python",
            "cot",
            "```python\ndef process_graph(g):\n    return g\n```",
        ),
        (
            "```\nhelper = 1\n```\n```py\ndef process_graph(g):\n    return g\n```",
            "python",
            "zero-shot",
            "```python\ndef process_graph(g):\n    return g\n```",
        ),
        (
            "def process_graph(g):\n    return g",
            "python",
            "zero-shot",
            "```python\ndef process_graph(g):\n    return g\n```",
        ),
        ("<think>long musing</think>  final text  ", "text", "zero-shot", "final text"),
        ("Thought: a\nAction: look\nThought: b\nAction: stop", "text", "react", "stop"),
    ],
)
def test_extract_reply_shapes_the_answer(raw: str, fmt: str, strategy: str, expected: str) -> None:
    assert extract_reply(raw, reply_format=fmt, strategy=strategy) == expected


def test_long_episodes_are_trimmed_oldest_first_keeping_the_task() -> None:
    conversation = [{"role": "user", "content": "TASK"}]
    for step in range(30):
        conversation.append({"role": "assistant", "content": f"cmd {step}"})
        conversation.append({"role": "user", "content": f"output {step} " + "x" * 10_000})
    messages = upstream_messages(
        conversation,
        strategy="zero-shot",
        reply_format="json",
        multi_turn=True,
        max_context_chars=50_000,
    )
    chat = messages[1:]
    assert chat[0]["content"].startswith("TASK\n\n[")
    assert "earlier messages" in chat[0]["content"]
    assert sum(len(m["content"]) for m in chat) <= 50_000 + 200
    assert chat[-1]["content"].startswith("output 29 ")
    assert [m["role"] for m in chat] == ["user"] + ["assistant", "user"] * ((len(chat) - 1) // 2)


def test_system_prompt_rejects_unknown_names() -> None:
    with pytest.raises(ValueError):
        system_prompt("zero-shot", "yaml", multi_turn=False)
    with pytest.raises(ValueError):
        system_prompt("self-consistency", "json", multi_turn=False)


def test_scripted_server_turns_records_and_errors(serve) -> None:
    model = ScriptedModel.from_dict(
        {
            "rules": [{"name": "turns", "match": {"model": "^t$"}, "replies": ["one", "two"]}],
            "default": "fallback",
        }
    )
    server = serve(build_scripted_app(model))
    url = server.url + "/v1/chat/completions"

    def ask(messages: list, model_name: str = "t") -> str:
        response = httpx.post(url, json={"model": model_name, "messages": messages})
        return response.json()["choices"][0]["message"]["content"]

    user = {"role": "user", "content": "q"}
    assistant = {"role": "assistant", "content": "a"}
    assert ask([user]) == "one"
    assert ask([user, assistant, user]) == "two"
    assert ask([user, assistant, user, assistant, user]) == "two"  # last reply repeats
    assert ask([user], model_name="other") == "fallback"
    assert httpx.post(url, content=b"{}").status_code == 400
    assert len(httpx.get(server.url + "/scripted/requests").json()["requests"]) == 4
    httpx.delete(server.url + "/scripted/requests")
    assert httpx.get(server.url + "/scripted/requests").json()["requests"] == []
    with pytest.raises(ValueError, match="regular expression"):
        ScriptedModel.from_dict({"rules": [{"match": {"any": "("}}]})
    with pytest.raises(ValueError, match="'match' keys"):
        ScriptedModel.from_dict({"rules": [{"match": {"header": "x"}}]})
