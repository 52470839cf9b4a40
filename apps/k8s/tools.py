"""The k8s app's actions as OpenAI function tools (the ``openai-tools`` protocol).

* ``run_kubectl(command, stdin?)`` -- run one kubectl command; ``stdin`` is what the command
  reads on standard input (the manifest of ``kubectl apply -f -``). It becomes the text reply
  the prompt documents: the command in a fence, with ``stdin`` as a here-document;
* ``finish()`` -- ``done``;
* ``declare_healthy()`` -- ``healthy``.

:func:`apps.k8s.replies.parse_reply` judges the resulting text, so a call that carries a shell
pipeline, a second command or no command is refused with the parser's usual reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evaluator.app import function_tool
from evaluator.types import JSON

from apps.k8s.replies import DONE_WORD, HEALTHY_WORD, parse_reply

RUN_KUBECTL = "run_kubectl"
FINISH = "finish"
DECLARE_HEALTHY = "declare_healthy"


def tools() -> list[JSON]:
    """The three k8s tools (OpenAI function tool definitions with JSON Schema parameters)."""
    return [
        function_tool(
            RUN_KUBECTL,
            "Run one kubectl command in the episode's namespace and see its output and the "
            "connectivity report. No shell: no pipes, redirections or several commands.",
            {
                "command": {
                    "type": "string",
                    "description": "One kubectl command line, e.g. 'kubectl get networkpolicy "
                    "-o yaml' or 'kubectl apply -f -'.",
                },
                "stdin": {
                    "type": "string",
                    "description": "Optional text for the command's standard input, e.g. the "
                    "YAML manifest that 'kubectl apply -f -' reads.",
                },
            },
            ["command"],
        ),
        function_tool(
            FINISH,
            "Stop: the policies are repaired, or you give up. Nothing more is run.",
            {},
            [],
        ),
        function_tool(
            DECLARE_HEALTHY,
            "Stop and declare that nothing was misconfigured, so that nothing needed repairing.",
            {},
            [],
        ),
    ]


def _delimiter(text: str) -> str:
    """A here-document delimiter word that is no line of ``text``."""
    lines = {line.strip() for line in text.split("\n")}
    word, number = "EOF", 0
    while word in lines:
        number += 1
        word = f"EOF_{number}"
    return word


def reply_from_tool_call(name: str, arguments: Mapping[str, Any]) -> str:
    """The k8s reply text of a call of one of :func:`tools` (``name`` is one of them).

    ``run_kubectl``: the command in a bare fence; a non-empty string ``stdin`` follows it as a
    here-document (``<<'EOF'``, with another word when a line of ``stdin`` is ``EOF``). A
    command that already holds a fence is passed as written; no command gives ``""``.
    """
    if name == FINISH:
        return DONE_WORD
    if name == DECLARE_HEALTHY:
        return HEALTHY_WORD
    command = arguments.get("command")
    if not isinstance(command, str) or not command.strip():
        return ""
    if "```" in command:
        return command
    stdin = arguments.get("stdin")
    if isinstance(stdin, str) and stdin.strip():
        document = stdin[:-1] if stdin.endswith("\n") else stdin
        word = _delimiter(document)
        return f"```\n{command.strip()} <<'{word}'\n{document}\n{word}\n```"
    return f"```\n{command.strip()}\n```"


def tool_call_from_reply(reply: str) -> tuple[str, JSON]:
    """The call carrying a k8s reply text (reference agents on ``openai-tools``).

    A reply the parser refuses becomes ``run_kubectl`` with the reply as its command, which the
    parser refuses again.
    """
    parsed = parse_reply(reply)
    if parsed.done:
        return (DECLARE_HEALTHY if parsed.healthy else FINISH), {}
    if parsed.error is not None or parsed.argv is None:
        return RUN_KUBECTL, {"command": reply}
    arguments: JSON = {"command": parsed.text}
    if parsed.stdin is not None:
        arguments["stdin"] = parsed.stdin
    return RUN_KUBECTL, arguments
