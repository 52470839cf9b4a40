"""Teams, agents, rounds, submissions and their episodes.

A **submission** is one evaluation of one agent: fresh queries for each requested app, one
**episode record** (``EpisodeRecord``) per query. A **round** is an admin-started
re-evaluation of every active agent with one shared seed, so that agents in a round are scored
on the same queries.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from evaluator.prompting import DEFAULT_PROMPT_TYPE, PROMPT_TYPES
from evaluator.registry import APP_ID_MAX_LENGTH
from evaluator.types import SEED_BITS


class SeedField(models.CharField):
    """A generation seed of up to :data:`evaluator.types.SEED_BITS` bits, read back as ``int``.

    Stored as its decimal text: ``BigIntegerField`` keeps only 63 bits (a 31-bit seed was
    brute-forced from one public query id), and SQLite turns integer literals
    beyond 64 bits into floats, so a numeric column would lose digits there.
    """

    # the model attribute's type for django-stubs (an int in and out, text in the column)
    _pyi_private_set_type: int
    _pyi_private_get_type: int  # type: ignore[assignment]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", len(str(2**SEED_BITS)))
        super().__init__(*args, **kwargs)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> int | None:
        """Stored text -> int."""
        return None if value is None else int(value)

    def to_python(self, value: Any) -> int | None:
        """An int, or a decimal string -> int. Raises ``ValidationError`` for anything else."""
        if value is None or isinstance(value, int):
            return value
        try:
            return int(str(value))
        except ValueError:
            raise ValidationError(f"{value!r} is not a seed (a non-negative integer)") from None

    def get_prep_value(self, value: Any) -> str | None:
        """int -> decimal text; refuses negative seeds and seeds over ``SEED_BITS`` bits."""
        if value is None:
            return None
        seed = int(value)
        if not 0 <= seed < 2**SEED_BITS:
            raise ValueError(f"seed {seed} outside [0, 2**{SEED_BITS})")
        return str(seed)


class Team(models.Model):
    """A team that registers agents; its members may manage them."""

    name = models.CharField(max_length=100, unique=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="teams", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Agent(models.Model):
    """An agent endpoint (docs/architecture.md §6).

    The API key is stored encrypted (``secret_encrypted``).
    """

    class Protocol(models.TextChoices):
        OPENAI_CHAT = "openai-chat", "OpenAI-compatible chat"
        HTTP_JSON = "http-json", "HTTP JSON"
        A2A = "a2a", "Agent2Agent (A2A)"
        OPENAI_TOOLS = "openai-tools", "OpenAI-compatible tool calling"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="agents")
    name = models.CharField(max_length=100)
    endpoint_url = models.URLField(max_length=500)
    protocol = models.CharField(max_length=20, choices=Protocol.choices)
    model_name = models.CharField(max_length=200, blank=True, default="")
    secret_encrypted = models.BinaryField(blank=True, default=b"", editable=False)
    #: Header that carries the secret ("" = ``Authorization: Bearer``; submissions.agent_auth).
    auth_header = models.CharField(max_length=100, blank=True, default="")
    #: Reference agents ship with the project (oracle, null, heuristic, llm); only they may live
    #: on loopback, and only an oracle gets the vault of hidden queries.
    reference_kind = models.CharField(max_length=20, blank=True, default="")
    #: The apps this agent takes part in; empty means every app.
    apps = models.JSONField(default=list, blank=True)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="unique_agent_per_team")
        ]

    def __str__(self) -> str:
        return f"{self.team.name}/{self.name}"

    @property
    def is_reference(self) -> bool:
        """True for the project's own reference agents."""
        return bool(self.reference_kind)


class Round(models.Model):
    """An evaluation round: every active agent evaluated on the same fresh queries.

    Commit-reveal: ``commitment`` = ``evaluator.commitment.round_commitment(
    seed, versions, salt, packs, held_out_share)`` is public from the start; ``seed``, ``salt``
    and the held-out packs themselves are published only once the round is closed
    (``closed_at`` set), so anyone can then regenerate and rejudge its queries.
    """

    number = models.PositiveIntegerField(unique=True)
    seed = SeedField()
    apps = models.JSONField(default=list)
    queries_per_app = models.PositiveIntegerField()
    # app id -> generator version at the start, and the commitment over them (see above)
    versions = models.JSONField(default=dict)
    salt = models.CharField(max_length=64, blank=True, default="")
    #: app id -> {held-out pack name: sha256} the round draws from (docs/writing-a-variant-pack.md)
    packs = models.JSONField(default=dict, blank=True)
    #: share of each batch drawn from those packs (0 when there are none)
    held_out_share = models.FloatField(default=0.0)
    #: app id -> [pack names] among ``packs`` that were spent already when the round started
    #: (staff forced them): their queries are not held out, and the round's page says so
    forced_packs = models.JSONField(default=dict, blank=True)
    commitment = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )

    @property
    def is_closed(self) -> bool:
        """True once the round is closed and its seed and salt are public."""
        return self.closed_at is not None

    def __str__(self) -> str:
        return f"round {self.number}"


class Submission(models.Model):
    """One evaluation of one agent on ``queries_per_app`` fresh queries of each app."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        FINISHED = "finished"
        FAILED = "failed"
        #: stopped by a team member: pending episodes never run; never ranked; it counts
        #: against the daily quota like any started submission (docs: README "API")
        CANCELLED = "cancelled"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="submissions")
    round = models.ForeignKey(
        Round, null=True, blank=True, on_delete=models.SET_NULL, related_name="submissions"
    )
    seed = SeedField()
    apps = models.JSONField(default=list)
    queries_per_app = models.PositiveIntegerField()
    #: app id -> {held-out pack name: sha256} its queries are drawn from, fixed at creation
    packs = models.JSONField(default=dict, blank=True)
    #: share of each app's queries drawn from those packs (0 when there are none)
    held_out_share = models.FloatField(default=0.0)
    #: NetArena's prompt type its tasks are sent with (``evaluator.prompting``), chosen at
    #: creation; rounds use the default. Only ``zeroshot_base`` submissions are ranked on the
    #: boards (docs/metrics.md "Prompt types"); every older submission was ``zeroshot_base``.
    prompt_type = models.CharField(
        max_length=20, choices=[(p, p) for p in PROMPT_TYPES], default=DEFAULT_PROMPT_TYPE
    )
    #: app id -> [pack names] among ``packs`` that were sealed when it was created: only their
    #: queries count as held out (the held-out gap, docs/metrics.md)
    sealed_packs = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    error = models.TextField(blank=True, default="")
    #: True when the platform, not the agent, failed the whole submission (query generation
    #: failed, no worker took it, or every episode ended as an evaluator error): it is not
    #: charged to the team's quota and never replaces the agent's last scored submission.
    platform_failed = models.BooleanField(default=False)
    #: True when more than ``INFRA_FAILURE_MAX_SHARE`` of its run episodes ended as
    #: infrastructure failures: finished but not ranked, and (as
    #: ``platform_failed`` is set with it) free of quota; never published as zeros.
    incomplete = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    #: when its team's members were e-mailed that it finished or failed (set once, by the
    #: conditional update that claims the notification: ``accounts.notifications``)
    notified_at = models.DateTimeField(null=True, blank=True)
    #: The endpoint its episodes are sent to, fixed at creation: the URL and protocol its
    #: agent's passing pre-flight checked (``preflight``; None for reference agents, rounds
    #: and agents that never had one: then the agent's at creation). Editing the agent later
    #: never redirects it. Blank on submissions older than the fields: the agent's current.
    endpoint_url = models.URLField(max_length=500, blank=True, default="")
    protocol = models.CharField(max_length=20, blank=True, default="")
    preflight = models.ForeignKey(
        "AgentPreflight",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="submissions",
    )
    #: the user who submitted it (pages, API); None for rounds and commands. Charged to that
    #: user's daily quota across teams (``SUBMISSIONS_PER_USER_PER_DAY``) whatever team
    #: they belong to later.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["agent", "status"])]
        constraints = [
            # One open team submission per agent, enforced by the database as well as by
            # services.submission_create (which locks the team row); rounds are exempt.
            models.UniqueConstraint(
                fields=["agent"],
                condition=models.Q(status__in=["queued", "running"], round__isnull=True),
                name="one_open_submission_per_agent",
            )
        ]

    def __str__(self) -> str:
        return f"submission {self.pk} of {self.agent}"


class EpisodeRecord(models.Model):
    """The stored row of one query of a submission and, once run, its verdict and transcript.

    Named ``EpisodeRecord`` so that it is never confused with the engine's ``Episode`` (the live
    emulator run of one query, ``evaluator.app.Episode``): this is what the site keeps of it.
    ``query`` holds ``Query.to_dict()`` including the hidden ground truth: never render it.
    ``label`` is the query's labels joined with "+" (``Query.label``), e.g. ``"remove+count"``.
    """

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        ERROR = "error"  # the evaluator could not run it; excluded from statistics
        CANCELLED = "cancelled"  # its submission was cancelled before it ran

    submission = models.ForeignKey(Submission, on_delete=models.CASCADE, related_name="episodes")
    app_id = models.CharField(max_length=APP_ID_MAX_LENGTH)
    app_version = models.PositiveIntegerField(default=1)
    index = models.PositiveIntegerField()
    query_id = models.CharField(max_length=64)
    level = models.PositiveSmallIntegerField()
    label = models.CharField(max_length=100)
    query = models.JSONField()
    #: the query came from a held-out pack that was sealed when its submission was created:
    #: it counts as held out (``Submission.sealed_packs``); never shown
    sealed = models.BooleanField(default=False)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    correct = models.BooleanField(null=True)
    safe = models.BooleanField(null=True)
    latency_s = models.FloatField(null=True)
    wall_s = models.FloatField(null=True)
    agent_s = models.FloatField(null=True)
    steps = models.PositiveIntegerField(null=True)
    # EpisodeResult.changed_state: did the agent change the state (None: unknown)
    changed_state = models.BooleanField(null=True)
    # EpisodeResult.blast_radius: how much the agent broke, in the app's unit (None: unknown)
    blast_radius = models.PositiveIntegerField(null=True)
    # token counts and model name as the endpoint reported them (EpisodeResult)
    input_tokens = models.BigIntegerField(null=True)
    output_tokens = models.BigIntegerField(null=True)
    served_model = models.CharField(max_length=200, blank=True, default="")
    # EpisodeResult.replay: the agent's full replies for rejudging (never rendered publicly
    # while the submission is open; None when not replayable)
    replay = models.JSONField(null=True, blank=True)
    failure = models.CharField(max_length=200, blank=True, default="")
    details = models.JSONField(default=dict)
    transcript = models.JSONField(default=list)
    started_at = models.DateTimeField(null=True, blank=True)
    #: refreshed every ``EPISODE_HEARTBEAT_S`` by the worker running it; a running episode
    #: whose heartbeat is older than ``EPISODE_STALE_S`` lost its worker and is requeued
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["submission", "app_id", "index"]
        constraints = [
            models.UniqueConstraint(fields=["submission", "app_id", "index"], name="unique_episode")
        ]
        indexes = [models.Index(fields=["submission", "status"])]

    def __str__(self) -> str:
        return f"{self.app_id} #{self.index} of submission {self.submission_id}"


class AgentPreflight(models.Model):
    """One pre-flight check of an agent endpoint (docs/agents.md).

    Started when an agent is registered or edited, or by its team on demand; run by the
    Celery task ``submissions.agent_preflight`` (queue ``control``). ``checks`` is the list of
    :class:`evaluator.agents.preflight_checks.Check` dicts ``{"name", "title", "status", "message",
    "latency_s"}`` with status ``passed``/``failed``/``skipped``. A team agent whose latest
    pre-flight has not passed cannot be submitted, except that a ``partial`` one (the
    endpoint checks passed, the canaries of some apps failed) clears the apps whose canary
    passed; a ``running`` pre-flight older than ``PREFLIGHT_STALE_S`` counts as failed.
    """

    class Status(models.TextChoices):
        RUNNING = "running"
        PASSED = "passed"
        PARTIAL = "partial"
        FAILED = "failed"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="preflights")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    # what was checked (an edit starts a new pre-flight)
    endpoint_url = models.URLField(max_length=500)
    protocol = models.CharField(max_length=20)
    checks = models.JSONField(default=list, blank=True)
    #: The slowest canary reply in seconds (evaluator's wall clock), None when none answered.
    latency_s = models.FloatField(null=True, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["agent", "-created_at"])]

    def __str__(self) -> str:
        return f"pre-flight {self.pk} of {self.agent_id}: {self.status}"


class EpisodeAggregate(models.Model):
    """Maintained sums of one submission's scored episodes in one (app, level, label) group.

    Kept up to date by :func:`submissions.aggregates.aggregate_refresh` whenever an episode's
    verdict is stored, and rebuilt from the episodes by ``python manage.py
    rebuild_aggregates``; the standings read these rows instead of scanning episodes.
    Only episodes with status ``done`` count. Sums of squares give the Student-t
    intervals of the means (docs/metrics.md). Units: seconds for ``latency``/``agent``, the
    app's unit for ``blast``, tokens for ``tokens``.
    """

    submission = models.ForeignKey(Submission, on_delete=models.CASCADE, related_name="aggregates")
    app_id = models.CharField(max_length=APP_ID_MAX_LENGTH)
    level = models.PositiveSmallIntegerField()
    label = models.CharField(max_length=100)
    n = models.PositiveIntegerField(default=0)
    correct = models.PositiveIntegerField(default=0)
    safe = models.PositiveIntegerField(default=0)
    correct_and_safe = models.PositiveIntegerField(default=0)
    # episodes with a known changed_state, and those in which the agent changed the state
    changed_known = models.PositiveIntegerField(default=0)
    changed = models.PositiveIntegerField(default=0)
    latency_n = models.PositiveIntegerField(default=0)
    latency_sum_s = models.FloatField(default=0.0)
    latency_sumsq_s2 = models.FloatField(default=0.0)
    agent_n = models.PositiveIntegerField(default=0)
    agent_sum_s = models.FloatField(default=0.0)
    agent_sumsq_s2 = models.FloatField(default=0.0)
    steps_sum = models.BigIntegerField(default=0)
    # blast radius over the unsafe episodes that reported one
    blast_n = models.PositiveIntegerField(default=0)
    blast_sum = models.BigIntegerField(default=0)
    blast_sumsq = models.FloatField(default=0.0)
    # episodes that reported any tokens, and their input + output tokens
    tokens_n = models.PositiveIntegerField(default=0)
    tokens_sum = models.BigIntegerField(default=0)
    # episodes whose query came from a held-out variant pack, and those correct and safe
    held_out_n = models.PositiveIntegerField(default=0)
    held_out_correct_and_safe = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["submission", "app_id", "level", "label"], name="unique_episode_aggregate"
            )
        ]
        # the ranking reads the total rows (level 0) of one app; breakdowns one submission's
        indexes = [
            models.Index(fields=["app_id", "level", "submission"], name="b13_aggregate_app_level")
        ]

    def __str__(self) -> str:
        return f"{self.app_id} L{self.level} {self.label} of submission {self.submission_id}"


class HeldOutPack(models.Model):
    """One version of a held-out variant pack, and where it is in its life
    (docs/operating-rounds.md).

    **Sealed** from the moment the site first records it (the first round that sees it)
    until a round that drew from it closes; then **spent**: its archive is downloadable by
    digest, its queries' ground truth shows on the episode pages, and practice submissions may
    draw from it. Practice submissions never draw from a sealed pack; a round draws from
    sealed packs only, unless staff force a spent one.
    """

    class State(models.TextChoices):
        SEALED = "sealed"
        SPENT = "spent"

    app_id = models.CharField(max_length=APP_ID_MAX_LENGTH)
    name = models.CharField(max_length=40)
    sha256 = models.CharField(max_length=64)
    description = models.CharField(max_length=300, blank=True, default="")
    state = models.CharField(max_length=10, choices=State.choices, default=State.SEALED)
    #: the pack's files as ``evaluator.variants.pack_archive`` writes them (reproducible
    #: ``.tar.gz``), kept from sealing so the site can publish it when it is spent
    archive = models.BinaryField(editable=False)
    sealed_at = models.DateTimeField(auto_now_add=True)
    spent_at = models.DateTimeField(null=True, blank=True)
    #: the round whose closing spent it (None while sealed)
    spent_by = models.ForeignKey(
        Round, null=True, blank=True, on_delete=models.SET_NULL, related_name="spent_packs"
    )

    class Meta:
        ordering = ["app_id", "name", "-sealed_at"]
        constraints = [
            models.UniqueConstraint(fields=["app_id", "name", "sha256"], name="unique_pack_version")
        ]

    def __str__(self) -> str:
        return f"{self.app_id}/{self.name} ({self.sha256[:12]}, {self.state})"

    @property
    def is_spent(self) -> bool:
        """True once a round that drew from it has closed."""
        return self.state == self.State.SPENT


class PackExposure(models.Model):
    """The exposure ledger: how many queries of a pack one submission sent to one team's
    agent (written when the submission's queries are generated)."""

    pack = models.ForeignKey(HeldOutPack, on_delete=models.CASCADE, related_name="exposures")
    submission = models.ForeignKey(
        Submission, on_delete=models.CASCADE, related_name="pack_exposures"
    )
    round = models.ForeignKey(
        Round, null=True, blank=True, on_delete=models.SET_NULL, related_name="pack_exposures"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="pack_exposures")
    queries = models.PositiveIntegerField()
    #: the pack was sealed when the queries were sent (False: practice on a spent pack)
    while_sealed = models.BooleanField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pack", "created_at"]
        constraints = [
            models.UniqueConstraint(fields=["pack", "submission"], name="unique_pack_exposure")
        ]

    def __str__(self) -> str:
        return f"{self.queries} queries of {self.pack} to {self.team}"
