"""URL configuration."""

from django.contrib import admin
from django.urls import include, path

from accounts.urls import auth_urlpatterns

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("accounts.urls")),
    *auth_urlpatterns,
    path("", include("leaderboard.urls")),
    path("", include("submissions.urls")),
]
