"""URLs of the operations endpoints."""

from django.urls import path

from ops.views import ReadyView, healthz, metrics

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("readyz", ReadyView.as_view(), name="readyz"),
    path("metrics", metrics, name="metrics"),
]
