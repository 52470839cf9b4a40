"""Team-facing API URLs."""

from django.urls import path

from submissions import apis

app_name = "submissions"
urlpatterns = [
    path("api/v1/agents/", apis.AgentCreateApi.as_view(), name="api-agent-create"),
    path("api/v1/submissions/", apis.SubmissionCreateApi.as_view(), name="api-submission-create"),
    path(
        "api/v1/submissions/<int:submission_id>/",
        apis.SubmissionDetailApi.as_view(),
        name="api-submission-detail",
    ),
]
