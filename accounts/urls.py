"""Account URLs: Django's auth views (login, logout, password reset) plus sign-up and team."""

from django.contrib.auth import views as auth_views
from django.urls import include, path

from accounts import views
from accounts.forms import LimitedAuthenticationForm, LimitedPasswordResetForm

app_name = "accounts"
urlpatterns = [
    path("signup/", views.signup_page, name="signup"),
    path("team/", views.team_page, name="team"),
    path("settings/", views.settings_page, name="settings"),
    path("teams/new/", views.team_create_view, name="team-create"),
    path("teams/<int:team_id>/invitation/", views.invitation_renew_view, name="invite"),
    path(
        "teams/<int:team_id>/members/<int:user_id>/remove/",
        views.member_remove_view,
        name="member-remove",
    ),
    path("join/<str:token>/", views.join_page, name="join"),
    path("agents/new/", views.agent_new_page, name="agent-new"),
    path("submit/", views.submit_page, name="submit"),
]

# Django's auth views keep their own (un-namespaced) names: login, logout, password_reset, ...
# Log-in and password reset use the forms that obey accounts.login_limits.
auth_urlpatterns = [
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(authentication_form=LimitedAuthenticationForm),
        name="login",
    ),
    path(
        "accounts/password_reset/",
        auth_views.PasswordResetView.as_view(form_class=LimitedPasswordResetForm),
        name="password_reset",
    ),
    path("accounts/", include("django.contrib.auth.urls")),
]
