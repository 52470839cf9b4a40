"""Route few-shot examples are well-formed replies the command sandbox accepts."""

from __future__ import annotations

from apps.route.app import RouteApp
from apps.route.commands import check_command
from apps.route.replies import parse_reply


def test_every_example_answer_is_one_allowed_command():
    examples = RouteApp().few_shot_examples()
    assert len(examples) >= 3
    for situation, answer in examples:
        parsed = parse_reply(answer)
        assert parsed.error is None and not parsed.done, (answer, parsed)
        assert parsed.machine == "r0" and parsed.command is not None
        argv, refusal = check_command(parsed.command)
        assert refusal is None and argv, (parsed.command, refusal)
        assert "ping" not in answer and situation
