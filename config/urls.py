"""URL configuration."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from accounts.forms import LimitedAdminAuthenticationForm
from accounts.urls import auth_urlpatterns

# The admin's log-in page says so when the log-in limits block a client (accounts.login_limits).
admin.site.login_form = LimitedAdminAuthenticationForm

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
