"""Leaderboard URLs."""

from django.urls import path

from leaderboard import apis, round_views, views

app_name = "leaderboard"
urlpatterns = [
    path("", views.leaderboard_page, name="index"),
    path("submissions/<int:submission_id>/", views.submission_page, name="submission"),
    path(
        "submissions/<int:submission_id>/sections/",
        views.submission_sections_page,
        name="submission-sections",
    ),
    path("episodes/<int:episode_id>/", views.episode_page, name="episode"),
    path("method/", views.method_index_page, name="method"),
    path("method/<slug:slug>/", views.method_doc_page, name="method-doc"),
    path("api/v1/leaderboard/", apis.LeaderboardListApi.as_view(), name="api-leaderboard"),
    path("rounds/", round_views.rounds_page, name="rounds"),
    path("packs/", round_views.packs_page, name="packs"),
    path(
        "packs/<str:sha256>.tar.gz", round_views.pack_archive_by_digest, name="pack-archive"
    ),
    path("rounds/new/", round_views.round_new_page, name="round-new"),
    path("rounds/<int:number>/", round_views.round_page, name="round"),
    path(
        "rounds/<int:number>/progress.json",
        round_views.round_progress_json,
        name="round-progress",
    ),
    path("rounds/<int:number>/close/", round_views.round_close_view, name="round-close"),
    path(
        "rounds/<int:number>/packs/<str:app_id>/<str:name>.tar.gz",
        round_views.round_pack_archive,
        name="round-pack",
    ),
]
