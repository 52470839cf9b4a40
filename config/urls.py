"""URL configuration."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from accounts.urls import auth_urlpatterns

urlpatterns = [
    path("", include("ops.urls")),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("accounts/", include("accounts.urls")),
    *auth_urlpatterns,
    path("", include("accounts.agent_urls")),  # /agents/<id>/
    path("", include("leaderboard.urls")),
    path("", include("submissions.urls")),
]
