"""Team-facing API URLs and the submission page's live endpoints."""

from django.urls import path

from submissions import apis, views

app_name = "submissions"
urlpatterns = [
    path("api/v1/token/", apis.TokenObtainApi.as_view(), name="api-token"),
    path("api/v1/agents/", apis.AgentListCreateApi.as_view(), name="api-agent-create"),
    path(
        "api/v1/submissions/",
        apis.SubmissionListCreateApi.as_view(),
        name="api-submission-create",
    ),
    path(
        "api/v1/submissions/<int:submission_id>/",
        apis.SubmissionDetailApi.as_view(),
        name="api-submission-detail",
    ),
    path(
        "api/v1/submissions/<int:submission_id>/progress/",
        apis.SubmissionProgressApi.as_view(),
        name="api-submission-progress",
    ),
    path(
        "api/v1/submissions/<int:submission_id>/cancel/",
        apis.SubmissionCancelApi.as_view(),
        name="api-submission-cancel",
    ),
    path(
        "api/v1/submissions/<int:submission_id>/episodes/",
        apis.SubmissionEpisodeListApi.as_view(),
        name="api-submission-episodes",
    ),
    path("api/v1/rounds/", apis.RoundListApi.as_view(), name="api-rounds"),
    path("api/v1/rounds/<int:number>/", apis.RoundDetailApi.as_view(), name="api-round"),
    path(
        "submissions/<int:submission_id>/progress.json",
        views.submission_progress_json,
        name="submission-progress",
    ),
    path(
        "submissions/<int:submission_id>/result.json",
        views.submission_result_file,
        name="submission-result-file",
    ),
    path(
        "submissions/<int:submission_id>/cancel/",
        views.submission_cancel_view,
        name="submission-cancel",
    ),
]
