"""NetArena's prompt types, applied by the evaluator to the task it sends.

NetArena (``PromptType`` in its ``src/netarena/agent_client.py``, commit 93225b4) names four
prompt strategies and its green agents build the prompt with the chosen one:

* ``zeroshot_base``: the task prompt unchanged (the default; every result before this module
  was made this way);
* ``zeroshot_cot``: the task prompt followed by :data:`COT_INSTRUCTION` (ours, written for
  this engine: reason first, then the answer in the format the task asks for, last);
* ``fewshot_base``: the app's worked examples (:meth:`evaluator.app.App.few_shot_examples`)
  before the task. Every app draws them from its public generator on the reserved seed
  :data:`evaluator.types.FEW_SHOT_SEED` (-1), disjoint from every assessment seed
  (non-negative): MALT's questions with hand-written answers; route's and k8s's situations
  written from the query's ground truth with the oracle's first reply as the answer;
* ``fewshot_cot``: both.

Only the first user message (the task) is changed, so a multi-step episode keeps the same
task text at every step; the episode's own transcript keeps the unchanged task. Django-free.
"""

from __future__ import annotations

from collections.abc import Sequence

from evaluator.agents.base import AgentClient, AgentReply
from evaluator.app import App
from evaluator.types import JSON

#: NetArena's prompt types (its PromptType values).
PROMPT_TYPES = ("zeroshot_base", "fewshot_base", "zeroshot_cot", "fewshot_cot")
#: The default: the task prompt unchanged.
DEFAULT_PROMPT_TYPE = "zeroshot_base"

#: The chain-of-thought instruction appended to the task (ours).
COT_INSTRUCTION = (
    "Before answering, work through the problem step by step: restate what is asked, note "
    "what the information above tells you, and check each step of your plan against it. "
    "Write that reasoning first. Then give your answer exactly in the format the task asks "
    "for, as the last part of your reply, with nothing after it."
)
#: Heading of the worked examples placed before the task (ours).
EXAMPLES_HEADING = (
    "Worked examples of tasks of the same kind (solved; they are not part of this assessment):"
)
#: Heading of the task after the examples (ours).
TASK_HEADING = "Now your task:"


def check_prompt_type(prompt_type: str) -> str:
    """``prompt_type`` if it is one of :data:`PROMPT_TYPES`.

    Raises:
        ValueError: any other value (the message lists the four).
    """
    if prompt_type not in PROMPT_TYPES:
        raise ValueError(
            f"unknown prompt type {prompt_type!r}; choose one of {', '.join(PROMPT_TYPES)}"
        )
    return prompt_type


def prompt_text(task: str, prompt_type: str, examples: Sequence[tuple[str, str]]) -> str:
    """The task text as ``prompt_type`` sends it (module docstring).

    Raises:
        ValueError: unknown prompt type, or a few-shot type with no ``examples``.
    """
    check_prompt_type(prompt_type)
    parts: list[str] = []
    if prompt_type.startswith("fewshot"):
        if not examples:
            raise ValueError(f"{prompt_type} needs worked examples and the app has none")
        parts.append(EXAMPLES_HEADING)
        for number, (question, answer) in enumerate(examples, start=1):
            parts.append(
                f"Example {number}, task:\n{question}\n\nExample {number}, answer:\n{answer}"
            )
        parts.append(TASK_HEADING)
    parts.append(task)
    if prompt_type.endswith("_cot"):
        parts.append(COT_INSTRUCTION)
    return "\n\n".join(parts)


def apply_prompt_type(
    messages: list[JSON], prompt_type: str, examples: Sequence[tuple[str, str]]
) -> list[JSON]:
    """``messages`` with the first user message rewritten by :func:`prompt_text` (a new list;
    the given one is not changed). ``zeroshot_base`` returns ``messages`` itself.

    Raises:
        ValueError: as :func:`prompt_text`.
    """
    if prompt_type == DEFAULT_PROMPT_TYPE:
        return messages
    out = [dict(m) for m in messages]
    for message in out:
        if message.get("role") == "user":
            message["content"] = prompt_text(str(message.get("content", "")), prompt_type, examples)
            break
    return out


def with_prompt_type(client: AgentClient, prompt_type: str) -> AgentClient:
    """``client`` sending its tasks with ``prompt_type``: ``client`` itself for
    ``zeroshot_base``, else a :class:`PromptTypeClient` around it (bound to each app by
    ``for_app``, as the episode runner does). The ``evaluate`` command and the site's workers
    (``submissions.services.episodes``) both wrap their agent client with it.

    Raises:
        ValueError: unknown prompt type.
    """
    check_prompt_type(prompt_type)
    if prompt_type == DEFAULT_PROMPT_TYPE:
        return client
    return PromptTypeClient(client, prompt_type)


class PromptTypeClient(AgentClient):
    """An agent client that sends every chat with NetArena's ``prompt_type`` applied
    (:func:`apply_prompt_type`) for ``app``; bind one per app (:meth:`for_app`).

    Raises:
        ValueError: (constructor) unknown prompt type, or a few-shot type for an app without
            examples.
    """

    def __init__(self, inner: AgentClient, prompt_type: str, app: App | None = None) -> None:
        self.inner = inner
        self.prompt_type = check_prompt_type(prompt_type)
        self.app = app
        self.examples: list[tuple[str, str]] = []
        if app is not None and prompt_type.startswith("fewshot"):
            self.examples = app.few_shot_examples()
            if not self.examples:
                raise ValueError(f"{prompt_type}: app {app.app_id!r} has no worked examples")

    def complete(self, messages: list[JSON], *, episode_id: str) -> AgentReply:
        """The inner client's reply to ``messages`` with the prompt type applied."""
        sent = apply_prompt_type(messages, self.prompt_type, self.examples)
        return self.inner.complete(sent, episode_id=episode_id)

    def for_app(self, app: App) -> AgentClient:
        """A wrapper around the inner client's client for ``app``, with ``app``'s examples."""
        return PromptTypeClient(self.inner.for_app(app), self.prompt_type, app)

    def episode_started(self, instance_names: dict[str, str]) -> None:
        """Passed to the inner client."""
        self.inner.episode_started(instance_names)

    def describe(self) -> JSON:
        """The inner client's description with ``prompt_type``."""
        return {**self.inner.describe(), "prompt_type": self.prompt_type}

    def close(self) -> None:
        """Closes the inner client."""
        self.inner.close()
