"""Reads of one episode for its replay page, following ``submissions.disclosure`` (the one
rule of who sees what, and when).

While the episode's answer is unspent (its submission runs, its round is open, or a pack it
drew from is sealed) the public sees its progress only; the owner team also sees its own
agent's transcript (the prompt and replies it was sent, without the judge's step facts).
Once spent, everyone sees the verdict, the transcript and the numeric part of the details
(counts, rates, per-step numbers); the hidden ground truth (the query's ``ground_truth``: the
injected faults or the intended operation) and the full details (which can name expected
values) only the owner team and staff. Staff see everything at any time."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from submissions.disclosure import Disclosure, disclosure_for
from submissions.models import EpisodeRecord, Submission

#: Step ``info`` keys shown beside an observation (route, k8s and MALT record these).
STEP_INFO_KEYS = (
    "machine",
    "status",
    "changed_state",
    "loss_percent",
    "mismatches",
    "exec_s",
    "command_s",
    "error",
    "stopped",
)
#: Per-step numbers whose evolution the page draws: info key -> what it measures.
EVOLUTION_KEYS = {
    "loss_percent": "pingall loss (% of host pairs unreachable)",
    "mismatches": "connectivity mismatches (pod pairs differing from the intended matrix)",
}
#: The same series in the verdict details, with the value before the first step.
EVOLUTION_DETAILS = {
    "loss_percent": ("loss_percent_by_step", "initial_loss_percent"),
    "mismatches": ("mismatches_by_step", "initial_mismatches"),
}


@dataclass(frozen=True)
class ToolCall:
    """The one function call an ``openai-tools`` reply carried, as the transcript keeps it.

    Attributes:
        name: the function (one of the app's tools).
        arguments: its arguments as the agent sent them, indented when they are a JSON
            object (the transcript keeps their text, cut at 2,000 characters).
    """

    name: str
    arguments: str


def tool_call_of(entry: dict[str, Any]) -> ToolCall | None:
    """The tool call recorded on an assistant transcript entry (``"tool_call": {"name",
    "arguments"}``, written by ``evaluator.runner`` for ``openai-tools`` agents), or None."""
    raw = entry.get("tool_call")
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        return None
    arguments = str(raw.get("arguments") or "")
    try:
        decoded = json.loads(arguments)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict):
        arguments = json.dumps(decoded, indent=2, ensure_ascii=False)
    return ToolCall(name=raw["name"], arguments=arguments)


@dataclass(frozen=True)
class ReplyPart:
    """One part of an ``a2a`` agent's answer, as the transcript keeps it
    (``evaluator.agents.a2a.part_records``).

    Attributes:
        kind: ``"text"``, ``"data"``, ``"file"``, ``"more"`` (parts left out) or the kind the
            agent named.
        text: a text part's text; a data part's JSON, indented.
        name, mime_type: a file part's name and media type (``""`` when it gave none).
        count: for ``"more"``, how many parts were left out.
    """

    kind: str
    text: str = ""
    name: str = ""
    mime_type: str = ""
    count: int = 0


def parts_of(entry: dict[str, Any]) -> list[ReplyPart]:
    """The parts recorded on an assistant transcript entry (``"parts": [...]``, written by
    ``evaluator.runner`` for ``a2a`` agents); ``[]`` for other protocols and for episodes
    stored before parts were recorded. Entries of an unexpected shape are skipped."""
    raw = entry.get("parts")
    if not isinstance(raw, list):
        return []
    parts: list[ReplyPart] = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("kind"), str):
            continue
        kind = item["kind"]
        if kind == "text":
            parts.append(ReplyPart(kind, text=str(item.get("text", ""))))
        elif kind == "data":
            data = json.dumps(item.get("data"), indent=2, ensure_ascii=False)
            parts.append(ReplyPart(kind, text=data))
        elif kind == "file":
            name, mime_type = item.get("name"), item.get("mime_type")
            parts.append(
                ReplyPart(
                    kind,
                    name=name if isinstance(name, str) else "",
                    mime_type=mime_type if isinstance(mime_type, str) else "",
                )
            )
        elif kind == "more":
            count = item.get("count")
            parts.append(ReplyPart(kind, count=count if isinstance(count, int) else 0))
        else:
            parts.append(ReplyPart(kind))
    return parts


@dataclass
class ReplayStep:
    """One agent reply and what followed it.

    Attributes:
        number: 1-based reply number.
        reply: the agent's text (a command, a kubectl line, a code block); for a tool call,
            what the app ran for it.
        tool_call: the function call the reply was (``openai-tools`` agents), else None.
        parts: the parts the answer was read from (``a2a`` agents; ``[]`` otherwise).
        parts_from: where they were (``"message"``, ``"artifact"``, ...; ``""`` if unknown).
        observation: what the agent was shown next (empty if the episode ended first).
        agent_s: evaluator-measured seconds waiting for this reply (None if unknown).
        safe_step: False when the step was judged unsafe.
        info: the public step facts (:data:`STEP_INFO_KEYS`).
        errors: agent or output failures recorded after this reply.
    """

    number: int
    reply: str
    tool_call: ToolCall | None = None
    parts: list[ReplyPart] = field(default_factory=list)
    parts_from: str = ""
    observation: str = ""
    agent_s: float | None = None
    safe_step: bool | None = None
    info: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    @property
    def reply_is_the_text(self) -> bool:
        """True when the answer is exactly its one text part (then the page shows it once)."""
        return (
            len(self.parts) == 1
            and self.parts[0].kind == "text"
            and self.parts[0].text == self.reply
        )


@dataclass
class EpisodeReplay:
    """Everything the episode page may show to one visitor (see the module docstring)."""

    episode: EpisodeRecord
    submission: Submission
    disclosure: Disclosure
    prompt: str = ""
    steps: list[ReplayStep] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    evolution_label: str = ""
    evolution: list[tuple[int, float]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    ground_truth: Any = None

    @property
    def is_open(self) -> bool:
        """True while the episode's answer is unspent (``submissions.disclosure``)."""
        return not self.disclosure.spent

    @property
    def is_owner(self) -> bool:
        """True for a member of the team that owns the agent."""
        return self.disclosure.audience == "team"

    @property
    def can_see_verdict(self) -> bool:
        """Level, label and verdict."""
        return self.disclosure.shows_verdicts

    @property
    def can_see_transcript(self) -> bool:
        """Prompt and replies."""
        return self.disclosure.shows_transcript

    @property
    def can_see_ground_truth(self) -> bool:
        """Hidden ground truth and full details."""
        return self.disclosure.shows_ground_truth

    @property
    def infrastructure_failure(self) -> str:
        """The evaluator's cause when it could not run the episode (status ``error``)."""
        if self.episode.status != EpisodeRecord.Status.ERROR:
            return ""
        return str(self.episode.details.get("error") or self.episode.failure)


def public_details(details: Any) -> dict[str, Any]:
    """The numeric part of verdict details: numbers, booleans and lists of numbers (counts,
    rates, per-step series); text and nested values (which can name expected answers) are
    left out."""
    if not isinstance(details, dict):
        return {}
    shown: dict[str, Any] = {}
    for key, value in details.items():
        if isinstance(value, bool | int | float) or value is None:
            shown[key] = value
        elif isinstance(value, list) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value
        ):
            shown[key] = value
    return shown


def _steps(
    transcript: list[Any], *, step_facts: bool
) -> tuple[str, list[ReplayStep], list[str]]:
    """Split a stored transcript (``{"role", "content", ...}`` entries) into the prompt, the
    steps and the notes; the judge's step facts (safety, :data:`STEP_INFO_KEYS`) only when
    ``step_facts``."""
    prompt = ""
    steps: list[ReplayStep] = []
    notes: list[str] = []
    for entry in transcript:
        if not isinstance(entry, dict):
            continue
        role, content = entry.get("role"), str(entry.get("content", ""))
        if role == "assistant":
            latency = entry.get("latency_s")
            steps.append(
                ReplayStep(
                    number=len(steps) + 1,
                    reply=content,
                    tool_call=tool_call_of(entry),
                    parts=parts_of(entry),
                    parts_from=str(entry.get("parts_from") or ""),
                    agent_s=latency if isinstance(latency, int | float) else None,
                )
            )
        elif role == "user" and not steps and not prompt:
            prompt = content
        elif role == "user" and steps:
            step = steps[-1]
            step.observation = content
            if not step_facts:
                continue
            safe = entry.get("safe_step")
            step.safe_step = safe if isinstance(safe, bool) else None
            raw_info = entry.get("info")
            info: dict[str, Any] = raw_info if isinstance(raw_info, dict) else {}
            step.info = {k: info[k] for k in STEP_INFO_KEYS if k in info}
        elif role == "error" and steps:
            steps[-1].errors.append(content)
        else:
            notes.append(content)
    return prompt, steps, notes


def _evolution(replay: EpisodeReplay) -> None:
    """The per-step pingall loss (route) or mismatch count (k8s): from the verdict details
    when present (they include the value before step 1, as step 0), else from the steps."""
    details = replay.episode.details if isinstance(replay.episode.details, dict) else {}
    for key, label in EVOLUTION_KEYS.items():
        series_key, initial_key = EVOLUTION_DETAILS[key]
        series = details.get(series_key)
        points: list[tuple[int, float]] = []
        if isinstance(series, list) and all(isinstance(v, int | float) for v in series):
            initial = details.get(initial_key)
            if isinstance(initial, int | float) and not isinstance(initial, bool):
                points.append((0, float(initial)))
            points += [(i + 1, float(v)) for i, v in enumerate(series)]
        else:
            points = [
                (s.number, float(s.info[key]))
                for s in replay.steps
                if isinstance(s.info.get(key), int | float)
            ]
        if points:
            replay.evolution_label, replay.evolution = label, points
            return


def episode_replay(*, episode_id: int, user: Any) -> EpisodeReplay | None:
    """The episode as ``user`` may see it, or None when there is no such episode."""
    episode = (
        EpisodeRecord.objects.select_related("submission__agent__team", "submission__round")
        .filter(pk=episode_id)
        .first()
    )
    if episode is None:
        return None
    submission = episode.submission
    replay = EpisodeReplay(
        episode=episode, submission=submission, disclosure=disclosure_for(user, submission)
    )
    if replay.can_see_transcript:
        transcript = episode.transcript if isinstance(episode.transcript, list) else []
        step_facts = replay.disclosure.shows_step_facts
        replay.prompt, replay.steps, replay.notes = _steps(transcript, step_facts=step_facts)
        if step_facts:
            _evolution(replay)
    if replay.can_see_ground_truth and isinstance(episode.details, dict):
        replay.details = dict(episode.details)
    elif replay.disclosure.shows_step_facts:
        replay.details = public_details(episode.details)
    if replay.can_see_ground_truth and isinstance(episode.query, dict):
        replay.ground_truth = episode.query.get("ground_truth")
    return replay
