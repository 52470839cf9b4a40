"""Typed errors of the site's services (services raise, APIs and pages map the root once).

Every rule of the site (team membership, the outbound guard on agent endpoints, the agent's
pre-flight, one open submission per agent, the team's and the user's daily quotas, the cap of
agents per team, and the team rules of ``accounts.services``) raises a subclass of
:class:`ServiceError`, whoever calls the service: the REST API, the pages, the admin, the round
machinery or a management command. Each class carries a stable machine-readable ``code`` and the
HTTP status an API answers with; the message (``str(error)``) is user-facing and never contains
internal detail (addresses the server resolved, allow-lists): that goes to the log.
"""

from __future__ import annotations


class ServiceError(Exception):
    """Base of every rule a service refuses a request for.

    Attributes:
        code: stable machine-readable code, returned by the API as ``{"code": ...}``.
        http_status: the status an API maps the error to.
    """

    code = "invalid"
    http_status = 400


class InvalidInputError(ServiceError):
    """Malformed request: unknown app, protocol or reference kind, a count out of range."""

    code = "invalid"
    http_status = 400


class NotTeamMemberError(ServiceError):
    """The acting user is not a member of the team they act for."""

    code = "not_team_member"
    http_status = 403


class NotYourAgentError(ServiceError):
    """The agent does not exist or belongs to none of the acting user's teams."""

    code = "not_your_agent"
    http_status = 403


class DuplicateAgentError(ServiceError):
    """The team already has an agent of that name."""

    code = "duplicate_agent"
    http_status = 400


class EndpointRefusedError(ServiceError):
    """The outbound guard refuses the agent's endpoint URL (the detail is logged, not shown)."""

    code = "endpoint_refused"
    http_status = 400


class AgentLimitError(ServiceError):
    """The team already has the maximum number of agents (``AGENTS_PER_TEAM``)."""

    code = "agent_limit"
    http_status = 400


class PreflightNotPassedError(ServiceError):
    """The agent's latest pre-flight failed or has not finished (or, partial, did not clear
    the apps asked for): no team submission yet."""

    code = "preflight"
    http_status = 409


class SubmissionInProgressError(ServiceError):
    """The agent already has a queued or running submission (one open submission per agent)."""

    code = "in_progress"
    http_status = 429


class QuotaExceededError(ServiceError):
    """The team's daily quota of submissions (``SUBMISSIONS_PER_TEAM_PER_DAY``) is used up."""

    code = "quota"
    http_status = 429


class UserQuotaExceededError(QuotaExceededError):
    """The acting user's daily quota of team submissions across all their teams
    (``SUBMISSIONS_PER_USER_PER_DAY``) is used up."""

    code = "user_quota"
    http_status = 429


class RoundNotFinishedError(ServiceError):
    """A round cannot be closed while some of its submissions are still queued or running."""

    code = "round_not_finished"
    http_status = 409


class RoundClosedError(ServiceError):
    """The round is closed already."""

    code = "round_closed"
    http_status = 409


class NotYourSubmissionError(ServiceError):
    """The acting user may not change this submission (not a member of its agent's team, or a
    round's submission and not staff)."""

    code = "not_your_submission"
    http_status = 403


class SubmissionClosedError(ServiceError):
    """The submission is no longer queued or running (finished, failed or cancelled)."""

    code = "submission_closed"
    http_status = 409


class PackSpentError(ServiceError):
    """A round would draw only from spent held-out packs and staff did not force them."""

    code = "pack_spent"
    http_status = 409
