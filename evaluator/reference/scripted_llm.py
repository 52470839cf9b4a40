r"""A scripted, deterministic OpenAI-compatible model server (for tests, demos, benchmarks).

It speaks ``POST /v1/chat/completions`` like vLLM or Ollama, but its "model" is a list of
rules read from JSON, so a test of the LLM agent can check, over real HTTP, what each prompting
strategy sends upstream and how the model's prose is turned into the app's reply format.

Rules file (JSON, so regex backslashes are doubled)::

    {"model": "scripted-1",
     "rules": [
        {"name": "cot-answer",
         "match": {"system": "step by step", "last_user": "word: (\\w+)"},
         "reply": "The task wants the word.\nFinal Answer: \\1"},
        {"name": "react", "match": {"system": "Thought:"},
         "replies": ["Thought: inspect first.\nAction: look", "Thought: done.\nAction: stop"]},
        {"name": "fail", "match": {"any": "make me fail"}, "status": 500}
     ],
     "default": "I do not know."}

A rule matches when every regular expression in ``match`` is found (``re.search``, multiline,
dot-all) in its field: ``system`` (system messages joined), ``last_user`` (the newest user
message), ``any`` (all messages joined) or ``model`` (the requested model name). The first
matching rule answers; a rule without ``match`` always matches; no match gives ``default``.
``reply`` is a template in which ``\1`` or ``\g<name>`` refer to groups of the ``last_user``
pattern (else of the first pattern); ``replies`` is a list picked by the number of assistant
messages in the request (turn 0, 1, ...; the last one repeats), which keeps the server
stateless. ``status`` answers with that HTTP error instead, ``delay_s`` sleeps first.

Every request is recorded (bounded): ``GET /scripted/requests`` returns them, ``DELETE`` clears.
Run with ``python -m evaluator.reference.scripted_llm --rules FILE --port P``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from evaluator.agents._http import message_text
from evaluator.reference.server import chat_completion_body, serve
from evaluator.types import JSON

#: Requests kept for inspection (oldest dropped first).
MAX_RECORDED_REQUESTS = 1000
_FIELDS = ("system", "last_user", "any", "model")
_FLAGS = re.MULTILINE | re.DOTALL


@dataclass
class Rule:
    """One scripted behaviour; see the module docstring for the fields."""

    name: str
    patterns: dict[str, re.Pattern[str]]
    replies: list[str]
    status: int | None = None
    delay_s: float = 0.0

    @classmethod
    def from_dict(cls, data: JSON, number: int) -> Rule:
        """Build a rule from its JSON form. Raises ``ValueError`` on a bad field or regex."""
        if not isinstance(data, dict):
            raise ValueError(f"rule {number} is not an object")
        match = data.get("match", {})
        if not isinstance(match, dict) or set(match) - set(_FIELDS):
            raise ValueError(f"rule {number}: 'match' keys must be among {_FIELDS}")
        try:
            patterns = {key: re.compile(str(value), _FLAGS) for key, value in match.items()}
        except re.error as exc:
            raise ValueError(f"rule {number}: bad regular expression: {exc}") from None
        replies = data.get("replies", [data.get("reply", "")])
        if not isinstance(replies, list) or not replies:
            raise ValueError(f"rule {number}: 'replies' must be a non-empty list")
        status = data.get("status")
        return cls(
            name=str(data.get("name", f"rule-{number}")),
            patterns=patterns,
            replies=[str(r) for r in replies],
            status=int(status) if status is not None else None,
            delay_s=float(data.get("delay_s", 0.0)),
        )


@dataclass
class ScriptedModel:
    """The rule set and the request log of one scripted server."""

    rules: list[Rule]
    default: str = ""
    model_name: str = "scripted"
    requests: deque[JSON] = field(default_factory=lambda: deque(maxlen=MAX_RECORDED_REQUESTS))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_dict(cls, data: JSON) -> ScriptedModel:
        """Build from the rules-file JSON. Raises ``ValueError`` on a bad file."""
        if not isinstance(data, dict):
            raise ValueError("a rules file is a JSON object")
        rules = [Rule.from_dict(rule, n) for n, rule in enumerate(data.get("rules", []))]
        return cls(rules, str(data.get("default", "")), str(data.get("model", "scripted")))

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """Load a rules file. Raises ``ValueError`` / ``OSError``."""
        return cls.from_dict(json.loads(Path(path).read_text()))

    def respond(self, messages: list[JSON], model: str) -> tuple[Rule | None, str]:
        """Return (matching rule or ``None`` for the default, reply text) for a chat."""
        texts = [(str(m.get("role")), message_text(m)) for m in messages]
        fields = {
            "system": "\n\n".join(t for role, t in texts if role == "system"),
            "last_user": next((t for role, t in reversed(texts) if role == "user"), ""),
            "any": "\n\n".join(t for _, t in texts),
            "model": model,
        }
        turn = sum(1 for role, _ in texts if role == "assistant")
        for rule in self.rules:
            found = {key: pattern.search(fields[key]) for key, pattern in rule.patterns.items()}
            if not all(found.values()):
                continue
            template = rule.replies[min(turn, len(rule.replies) - 1)]
            anchor = found.get("last_user") or next(iter(found.values()), None)
            try:
                text = anchor.expand(template) if anchor is not None else template
            except (re.error, IndexError):
                text = template
            return rule, text
        return None, self.default

    def record(self, entry: JSON) -> None:
        """Append a request to the log (thread-safe)."""
        with self._lock:
            self.requests.append(entry)

    def recorded(self) -> list[JSON]:
        """Return a copy of the request log."""
        with self._lock:
            return list(self.requests)

    def clear(self) -> None:
        """Empty the request log."""
        with self._lock:
            self.requests.clear()


def build_scripted_app(model: ScriptedModel) -> Starlette:
    """Return the ASGI app of a scripted model server."""

    async def chat_completions(request: Request) -> JSONResponse:
        try:
            body = json.loads(await request.body())
            messages = body["messages"]
            if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
                raise ValueError("messages must be a list of objects")
            rule, text = model.respond(messages, str(body.get("model", "")))
        except (ValueError, KeyError, TypeError) as exc:
            message = {"message": f"bad request: {exc}", "type": "invalid_request_error"}
            return JSONResponse({"error": message}, status_code=400)
        model.record(
            {
                "body": body,
                "authorization": request.headers.get("authorization"),
                "episode_header": request.headers.get("x-netarena-episode"),
                "rule": rule.name if rule else None,
            }
        )
        if rule is not None and rule.delay_s > 0:
            await asyncio.sleep(rule.delay_s)
        if rule is not None and rule.status is not None:
            error = {"message": f"scripted failure ({rule.name})", "type": "server_error"}
            return JSONResponse({"error": error}, status_code=rule.status)
        return JSONResponse(chat_completion_body(text, model.model_name))

    async def requests_log(request: Request) -> JSONResponse:
        if request.method == "DELETE":
            model.clear()
            return JSONResponse({"cleared": True})
        return JSONResponse({"requests": model.recorded()})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/scripted/requests", requests_log, methods=["GET", "DELETE"]),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m evaluator.reference.scripted_llm --rules FILE --port P [--host H]``."""
    parser = argparse.ArgumentParser(prog="python -m evaluator.reference.scripted_llm")
    parser.add_argument("--rules", required=True, help="rules JSON file")
    parser.add_argument("--port", type=int, required=True, help="TCP port (0 = any free port)")
    parser.add_argument("--host", default="127.0.0.1")
    options = parser.parse_args(argv)
    try:
        model = ScriptedModel.from_file(options.rules)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"error: cannot load rules: {exc}\n")
        return 2

    def announce(url: str) -> None:
        sys.stdout.write(f"scripted model {model.model_name!r} at {url}\n")
        sys.stdout.flush()

    serve(build_scripted_app(model), host=options.host, port=options.port, on_listen=announce)
    return 0


if __name__ == "__main__":
    sys.exit(main())
