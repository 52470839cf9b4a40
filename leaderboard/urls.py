"""Leaderboard URLs."""

from django.urls import path

from leaderboard import apis, views

app_name = "leaderboard"
urlpatterns = [
    path("", views.leaderboard_page, name="index"),
    path("submissions/<int:submission_id>/", views.submission_page, name="submission"),
    path("api/v1/leaderboard/", apis.LeaderboardListApi.as_view(), name="api-leaderboard"),
]
