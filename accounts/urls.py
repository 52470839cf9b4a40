"""Account URLs: Django's auth views (login, logout, password reset) plus sign-up and team."""

from django.urls import include, path

from accounts import views

app_name = "accounts"
urlpatterns = [
    path("signup/", views.signup_page, name="signup"),
    path("team/", views.team_page, name="team"),
]

# Django's auth views keep their own (un-namespaced) names: login, logout, password_reset, ...
auth_urlpatterns = [path("accounts/", include("django.contrib.auth.urls"))]
