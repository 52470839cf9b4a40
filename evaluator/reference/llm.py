"""The LLM reference agent: forwards to any OpenAI-compatible model with a prompting strategy.

The paper evaluates agents built from a base model and a prompting strategy — chain of
thought (Wei et al., 2022), few-shot (Brown et al., 2020) and ReAct (Yao et al., 2023) —
(NetArena §4 "Setup"; Appendix D lists the templates the original harness ships); this
module adds plain zero-shot as the baseline. All prompt text here is our own.

Request path of one reply::

    evaluator chat ──> upstream_messages(strategy) ──> upstream model ──> extract_reply(format)
                                                                            └─> reply to evaluator

The reply returned to the evaluator is what the app parses, not the model's prose: the app's
*reply format* decides the shape —

- ``python``: one fenced ```python block (MALT: the ``process_graph`` code);
- ``json``: one compact JSON object (route: ``{"machine": ..., "command": ...}``);
- ``command``: one command in a bare ``` fence (k8s: a ``kubectl`` command);
- ``text``: the answer text, stripped.

Every app declares its format (:attr:`App.reply_format`) and its solved examples for the
few-shot strategy (:meth:`App.few_shot_examples`, question/answer pairs).

Served on ``openai-tools`` (:meth:`LlmAgent.tool_reply`) the agent forwards the app's tools to
the upstream model instead (``tool_choice: "required"``, one call per reply) and passes the
model's call through unchanged; the strategy then only changes the system message, and
few-shot answers are shown as calls (:meth:`App.tool_call_from_reply`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from evaluator.agents.base import AgentClient, AgentError
from evaluator.agents.guard import LOOPBACK_NETWORKS, RefusedAddressError
from evaluator.agents.openai_chat import OpenAIChatClient
from evaluator.agents.openai_tools import OpenAIToolsClient
from evaluator.app import App
from evaluator.reference.base import AgentConfigError, AgentReplyError, ReferenceAgent
from evaluator.types import JSON

STRATEGIES: tuple[str, ...] = ("zero-shot", "few-shot", "cot", "react")
#: The apps' reply formats (:data:`evaluator.app.ReplyFormat`) plus ``text`` for plain answers.
REPLY_FORMATS: tuple[str, ...] = ("python", "json", "command", "text")
#: Conversation budget sent upstream, in characters. The reference harness keeps the last
#: 127,000 characters of an episode's log (NetArena's reference harness); we stay under it.
MAX_CONTEXT_CHARS = 120_000

_ROLE = (
    "You are an experienced network operations engineer working as an automated agent inside "
    "a network emulator. Each task describes a network and what is wrong with it or what "
    "must be changed. Follow the task's instructions and its answer format exactly; the "
    "answer is read by a program, not by a person."
)

_FORMAT_HINTS: dict[str, str] = {
    "python": (
        "The answer is a single Python code block, fenced as ```python ... ```, defining the "
        "function the task names."
    ),
    "json": (
        "The answer is a single JSON object with exactly the keys the task names, with no "
        "code fence and no other text on the answer lines."
    ),
    "command": (
        "The answer is a single command written between one pair of triple backticks, with "
        "no language tag and no other command."
    ),
    "text": "The answer is exactly the text the task asks for.",
}

_FEW_SHOT_INTRO = (
    "Before the real task you will see solved examples of similar tasks: each example "
    "question is followed by a correct answer in the required format. Answer the real task "
    "the same way."
)

_COT = (
    "Reason before you answer. Work through the task step by step: restate what is asked, "
    "list the facts you need from the task and the observations, consider what could go "
    "wrong (including side effects on parts of the network that already work), then decide. "
    "After your reasoning write a line that starts with 'Final Answer:' and put only the "
    "answer after it."
)

_REACT_MULTI_TURN = (
    "Work in a loop of thinking and acting. In every reply write a line starting with "
    "'Thought:' with your reasoning about the latest observation, then a line starting with "
    "'Action:' followed by exactly one answer in the required format. The result of that "
    "action comes back as the next message, marked 'Observation:'. When the cause is not "
    "clear yet, use an action that only inspects the network; change the configuration only "
    "once the observations support the change."
)

_REACT_SINGLE_SHOT = (
    "You have exactly one reply, so act once. Start with lines beginning with 'Thought:' in "
    "which you work out which data you need, how to compute the result and how to check it. "
    "Then write a line that starts with 'Final Answer:' and put only the answer after it."
)

_TOOLS_HINT = (
    "You act only by calling the tools you are given: exactly one tool call in every reply. "
    "The tools take what the task's answer format describes (a command and the machine it "
    "runs on, or the code to submit); their descriptions say how."
)

_COT_TOOLS = (
    "Reason before you act. Work through the task step by step in the text of your reply: "
    "restate what is asked, list the facts you need from the task and the observations, "
    "consider what could go wrong (including side effects on parts of the network that "
    "already work), then make the one tool call."
)

_REACT_TOOLS_MULTI_TURN = (
    "Work in a loop of thinking and acting. In every reply write a line starting with "
    "'Thought:' with your reasoning about the latest observation, then make exactly one tool "
    "call. Its result comes back as the tool's answer, marked 'Observation:'. When the cause "
    "is not clear yet, use a call that only inspects the network; change the configuration "
    "only once the observations support the change."
)

_REACT_TOOLS_SINGLE_SHOT = (
    "You have exactly one tool call, so act once. First write lines beginning with "
    "'Thought:' in which you work out which data you need, how to compute the result and how "
    "to check it; then make the call."
)

_FEW_SHOT_TOOLS_INTRO = (
    "Before the real task you will see solved examples of similar tasks: each example "
    "question is followed by a correct tool call. Answer the real task the same way."
)

#: The tool answer shown after a few-shot example's call (``openai-tools``).
EXAMPLE_RESULT = "(This was a solved example; nothing was run.)"

_THINK_RE = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL | re.IGNORECASE)
_FINAL_RE = re.compile(r"^[ \t>*_#]*final[ _]answer[ \t*_]*:", re.IGNORECASE | re.MULTILINE)
_ACTION_RE = re.compile(r"^[ \t>*_#]*action[ \t*_]*:", re.IGNORECASE | re.MULTILINE)
_FENCE_RE = re.compile(r"```([^\n`]*)\n(.*?)(?:```|\Z)", re.DOTALL)
_ONE_LINE_FENCE_RE = re.compile(r"```([^`\n]+)```")
_SHELL_TAGS = {"bash", "sh", "shell", "console", "zsh", "terminal", "text", "plaintext"}


def system_prompt(
    strategy: str, reply_format: str, *, multi_turn: bool, tools: bool = False
) -> str:
    """Return our system prompt for a strategy and reply format (``tools``: the agent answers
    with tool calls, ``openai-tools``).

    Raises:
        ValueError: unknown strategy or format.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
    if reply_format not in REPLY_FORMATS:
        raise ValueError(f"unknown reply format {reply_format!r}")
    if tools:
        parts = [_ROLE, _TOOLS_HINT]
        if strategy == "few-shot":
            parts.append(_FEW_SHOT_TOOLS_INTRO)
        elif strategy == "cot":
            parts.append(_COT_TOOLS)
        elif strategy == "react":
            parts.append(_REACT_TOOLS_MULTI_TURN if multi_turn else _REACT_TOOLS_SINGLE_SHOT)
        return "\n\n".join(parts)
    parts = [_ROLE, _FORMAT_HINTS[reply_format]]
    if strategy == "few-shot":
        parts.append(_FEW_SHOT_INTRO)
    elif strategy == "cot":
        parts.append(_COT)
    elif strategy == "react":
        parts.append(_REACT_MULTI_TURN if multi_turn else _REACT_SINGLE_SHOT)
    return "\n\n".join(parts)


def _trim_conversation(conversation: list[JSON], budget_chars: int) -> list[JSON]:
    """Drop the oldest (assistant, user) pairs after the task message until under budget."""

    def size(messages: list[JSON]) -> int:
        return sum(len(str(m.get("content", ""))) for m in messages)

    if size(conversation) <= budget_chars or len(conversation) < 4:
        return conversation
    head, rest = conversation[0], conversation[1:]
    dropped = 0
    while len(rest) > 1 and size([head, *rest]) > budget_chars:
        rest = rest[2:]
        dropped += 2
    note = f"\n\n[{dropped} earlier messages of this episode were left out to save space.]"
    return [{**head, "content": str(head.get("content", "")) + note}, *rest]


def upstream_messages(
    conversation: list[JSON],
    *,
    strategy: str,
    reply_format: str,
    multi_turn: bool,
    examples: Sequence[tuple[str, str]] = (),
    max_context_chars: int = MAX_CONTEXT_CHARS,
    call_of: Callable[[str], tuple[str, JSON]] | None = None,
) -> list[JSON]:
    """Return the chat sent to the upstream model for one reply.

    ``conversation`` is the evaluator's chat (the task first, then alternating replies and
    observations). The result is our system prompt (plus any system text the evaluator
    sent), the few-shot examples as earlier user/assistant turns (``few-shot`` only), then
    the conversation; under ``react`` every observation after the task is prefixed with
    ``Observation:``. Oldest steps are left out beyond ``max_context_chars``.

    With ``call_of`` (the app's :meth:`~evaluator.app.App.tool_call_from_reply`) the chat is
    for a tool-calling upstream: the system prompt asks for tool calls, assistant messages
    keep their ``"tool_call"`` records, and each few-shot answer becomes an assistant call
    answered by :data:`EXAMPLE_RESULT`.

    Raises:
        ValueError: unknown strategy or format.
    """
    tools = call_of is not None
    system = system_prompt(strategy, reply_format, multi_turn=multi_turn, tools=tools)
    extra_system = [str(m.get("content", "")) for m in conversation if m.get("role") == "system"]
    if extra_system:
        system = "\n\n".join([system, *extra_system])
    chat: list[JSON] = []
    for m in conversation:
        if m.get("role") in ("user", "assistant"):
            kept: JSON = {"role": str(m.get("role")), "content": str(m.get("content", ""))}
            if tools and isinstance(m.get("tool_call"), dict):
                kept["tool_call"] = m["tool_call"]
            chat.append(kept)
    if strategy == "react":
        first_user = next((i for i, m in enumerate(chat) if m["role"] == "user"), None)
        for i, message in enumerate(chat):
            if message["role"] == "user" and i != first_user:
                message["content"] = "Observation:\n" + message["content"]
    chat = _trim_conversation(chat, max_context_chars)
    messages: list[JSON] = [{"role": "system", "content": system}]
    if strategy == "few-shot":
        for number, (question, answer) in enumerate(examples, start=1):
            messages.append({"role": "user", "content": f"Example {number}:\n{question}"})
            if call_of is None:
                messages.append({"role": "assistant", "content": answer})
                continue
            name, arguments = call_of(answer)
            call = {"id": f"example_{number}", "name": name, "arguments": json.dumps(arguments)}
            messages.append({"role": "assistant", "content": "", "tool_call": call})
            messages.append({"role": "user", "content": EXAMPLE_RESULT})
    messages.extend(chat)
    return messages


def _after_marker(text: str) -> str:
    finals = list(_FINAL_RE.finditer(text))
    if finals:
        return text[finals[-1].end() :]
    actions = list(_ACTION_RE.finditer(text))
    if actions:
        return text[actions[-1].end() :]
    return text


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Return (language tag, body) of every fenced block, an unclosed last one included."""
    blocks = []
    for match in _FENCE_RE.finditer(text):
        info = match.group(1).strip().split()
        blocks.append((info[0].lower() if info else "", match.group(2)))
    return blocks


def _shape_python(text: str) -> str:
    blocks = _fenced_blocks(text)
    code = None
    for wanted in (
        lambda t, c: "def process_graph" in c,
        lambda t, c: "def " in c,
        lambda t, c: t in ("python", "py", "python3"),
    ):
        code = next((c for t, c in blocks if wanted(t, c)), None)
        if code is not None:
            break
    if code is None and blocks:
        code = blocks[-1][1]
    if code is None:
        start = re.search(r"^(?:from |import |def )", text, re.MULTILINE)
        if start is None:
            return text.strip()
        code = text[start.start() :]
    return f"```python\n{code.strip()}\n```"


def _shape_json(text: str) -> str:
    decoder = json.JSONDecoder()
    candidates = [c for _, c in _fenced_blocks(text)] + [text]
    for candidate in candidates:
        for match in re.finditer(r"\{", candidate):
            try:
                value, _end = decoder.raw_decode(candidate, match.start())
            except ValueError:
                continue
            if isinstance(value, dict):
                return json.dumps(value)
    return text.strip()


def _shape_command(text: str) -> str:
    start = text.find("```")
    command = ""
    if start >= 0:
        one_line = _ONE_LINE_FENCE_RE.match(text, start)
        block = _FENCE_RE.match(text, start)
        if one_line is not None:
            command = one_line.group(1)
        elif block is not None:
            info, body = block.group(1).strip(), block.group(2).strip()
            # "```bash\ncmd\n```" -> cmd; "```kubectl get pods\n```" -> the info line.
            command = body or ("" if info.lower() in _SHELL_TAGS else info)
    if not command:
        first = next((line for line in text.strip().splitlines() if line.strip()), "")
        command = first.strip().strip("`")
    lines = [line for line in command.strip().splitlines() if line.strip()]
    command = re.sub(r"^\$\s+", "", "\n".join(lines))
    return f"```\n{command}\n```"


def extract_reply(raw: str, *, reply_format: str, strategy: str) -> str:
    """Turn the model's raw output into the reply the app parses.

    Steps: drop ``<think>`` sections (reasoning models); under ``cot``/``react`` keep what
    follows the last ``Final Answer:`` line marker (else the last ``Action:`` marker); then
    shape by ``reply_format`` (see the module docstring). Text that cannot be shaped is
    returned stripped, so the app reports it to the agent as an unparseable reply.
    """
    text = _THINK_RE.sub("", raw)
    if strategy in ("cot", "react"):
        text = _after_marker(text)
    if reply_format == "python":
        return _shape_python(text)
    if reply_format == "json":
        return _shape_json(text)
    if reply_format == "command":
        return _shape_command(text)
    return text.strip()


class LlmAgent(ReferenceAgent):
    """A model behind an OpenAI-compatible API, prompted with one strategy.

    Args:
        app: the app it answers.
        upstream: a client of the upstream model (usually :class:`OpenAIChatClient`).
        strategy: one of :data:`STRATEGIES`.
        max_context_chars: conversation budget sent upstream (characters).
        tool_upstream: the same model as a tool-calling client (usually
            :class:`~evaluator.agents.openai_tools.OpenAIToolsClient`), used when the agent is
            served on ``openai-tools``; ``None``: :meth:`tool_reply` carries the text reply
            in a call instead.

    Raises:
        AgentConfigError: unknown strategy, or ``few-shot`` for an app without examples.
    """

    name = "llm"

    def __init__(
        self,
        app: App,
        upstream: AgentClient,
        strategy: str = "zero-shot",
        *,
        max_context_chars: int = MAX_CONTEXT_CHARS,
        tool_upstream: AgentClient | None = None,
    ) -> None:
        super().__init__(app)
        self.tool_upstream = tool_upstream
        if strategy not in STRATEGIES:
            raise AgentConfigError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
        self.strategy = strategy
        self.upstream = upstream
        self.reply_format: str = app.reply_format
        self.multi_turn = app.max_steps > 1
        self.max_context_chars = max_context_chars
        self.examples = app.few_shot_examples() if strategy == "few-shot" else []
        if strategy == "few-shot" and not self.examples:
            raise AgentConfigError(
                f"app {app.app_id!r} has no few_shot_examples(); use another strategy"
            )

    def upstream_messages(self, messages: list[JSON]) -> list[JSON]:
        """Return the chat this agent sends upstream for ``messages``."""
        return upstream_messages(
            messages,
            strategy=self.strategy,
            reply_format=self.reply_format,
            multi_turn=self.multi_turn,
            examples=self.examples,
            max_context_chars=self.max_context_chars,
        )

    def reply(self, messages: list[JSON], episode_id: str | None) -> str:
        """Ask the upstream model and return the extracted reply.

        The upstream sees a hash of the episode token, never the token itself (the token
        names an oracle vault entry).

        Raises:
            AgentReplyError: 502 when the upstream model fails (with its error category).
        """
        token = hashlib.sha256((episode_id or "none").encode()).hexdigest()[:24]
        try:
            answer = self.upstream.complete(self.upstream_messages(messages), episode_id=token)
        except AgentError as exc:
            raise AgentReplyError(502, f"upstream model failed ({exc.category}): {exc}") from None
        return extract_reply(answer.text, reply_format=self.reply_format, strategy=self.strategy)

    def tool_reply(self, messages: list[JSON], episode_id: str | None) -> JSON:
        """Forward the app's tools and the chat to the tool-calling upstream and return its
        one call unchanged (``{"name", "arguments", "content"?}``; see the module docstring).

        Raises:
            AgentReplyError: 502 when the upstream fails or answers without exactly one call of
                the app's tools (with its error category).
        """
        if self.tool_upstream is None:
            return super().tool_reply(messages, episode_id)
        token = hashlib.sha256((episode_id or "none").encode()).hexdigest()[:24]
        upstream = upstream_messages(
            messages,
            strategy=self.strategy,
            reply_format=self.reply_format,
            multi_turn=self.multi_turn,
            examples=self.examples,
            max_context_chars=self.max_context_chars,
            call_of=self.app.tool_call_from_reply,
        )
        try:
            answer = self.tool_upstream.for_app(self.app).complete(upstream, episode_id=token)
        except AgentError as exc:
            raise AgentReplyError(502, f"upstream model failed ({exc.category}): {exc}") from None
        if answer.tool_call is None:
            raise AgentReplyError(502, "the tool-calling upstream returned no tool call")
        call = {key: answer.tool_call[key] for key in ("name", "arguments")}
        if "content" in answer.tool_call:
            call["content"] = answer.tool_call["content"]
        return call

    def describe(self) -> JSON:
        """Agent, app, strategy, reply format and the upstream description (no secrets)."""
        info = super().describe()
        info.update(
            strategy=self.strategy,
            reply_format=self.reply_format,
            upstream=self.upstream.describe(),
        )
        return info


def make_llm_agent(
    app: App,
    *,
    upstream_url: str | None = None,
    model: str | None = None,
    api_key: str | None = None,
    api_key_env: str | None = None,
    strategy: str = "zero-shot",
    temperature: float | None = 0.0,
    timeout_s: float = 120.0,
    allowed_networks: Sequence[str] = LOOPBACK_NETWORKS,
) -> LlmAgent:
    """Build the LLM agent with an :class:`OpenAIChatClient` upstream (and the same model as
    an :class:`OpenAIToolsClient`, for serving on ``openai-tools``).

    Args:
        upstream_url: base URL of the OpenAI-compatible server (env ``NETARENA_LLM_URL``).
        model: model name (env ``NETARENA_LLM_MODEL``).
        api_key: the key itself, or ``api_key_env``: the environment variable holding it.
        strategy: one of :data:`STRATEGIES`.
        temperature: sampling temperature sent upstream (0 for repeatable runs; ``None``
            leaves the provider default, as the reference harness does).
        timeout_s: total deadline of one upstream call (seconds).
        allowed_networks: non-public networks the upstream may be in (default loopback, for
            a local vLLM/Ollama); public addresses are always allowed.

    Raises:
        AgentConfigError: no upstream URL, a named key variable that is unset, bad options.
    """
    url = upstream_url or os.environ.get("NETARENA_LLM_URL")
    if not url:
        raise AgentConfigError(
            "the llm agent needs an upstream OpenAI-compatible server: --upstream-url URL "
            "(or NETARENA_LLM_URL)"
        )
    if api_key is None and api_key_env:
        api_key = os.environ.get(api_key_env)
        if api_key is None:
            raise AgentConfigError(f"environment variable {api_key_env} (API key) is not set")
    extra: dict[str, Any] = {} if temperature is None else {"temperature": temperature}
    options: dict[str, Any] = {
        "model": model or os.environ.get("NETARENA_LLM_MODEL"),
        "api_key": api_key,
        "extra_body": extra,
        "timeout_s": timeout_s,
        "allowed_networks": allowed_networks,
    }
    try:
        client = OpenAIChatClient(url, **options)
        tool_client = OpenAIToolsClient(url, **options)
    except ValueError as exc:
        raise AgentConfigError(f"bad upstream options: {exc}") from None
    try:
        client.guard.check_syntax(url)
    except RefusedAddressError as exc:
        raise AgentConfigError(f"bad upstream URL: {exc}") from None
    return LlmAgent(app, client, strategy, tool_upstream=tool_client)
