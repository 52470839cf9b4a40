"""Agent page URLs (``/agents/<id>/``): the public page, its pre-flight JSON, re-run and edit."""

from django.urls import path

from accounts import agent_views

app_name = "agents"
urlpatterns = [
    path("agents/<int:agent_id>/", agent_views.agent_page, name="detail"),
    path(
        "agents/<int:agent_id>/preflight.json",
        agent_views.agent_preflight_json,
        name="preflight-json",
    ),
    path("agents/<int:agent_id>/preflight/", agent_views.agent_preflight_view, name="preflight"),
    path("agents/<int:agent_id>/edit/", agent_views.agent_edit_view, name="edit"),
]
