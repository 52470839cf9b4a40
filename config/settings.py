"""Django settings, 12-factor style through django-environ.

Every setting that differs between a laptop, CI and production comes from the environment
(or a ``.env`` file next to manage.py); the defaults make a fresh checkout run on SQLite and a
local Redis.
"""

import os
from pathlib import Path

import environ
import plotly

from evaluator.registry import CONTROL_QUEUE

BASE_DIR = Path(__file__).resolve().parent.parent
(BASE_DIR / "var" / "staticfiles").mkdir(parents=True, exist_ok=True)

env = environ.Env(
    DJANGO_DEBUG=(bool, False),
    DJANGO_ALLOWED_HOSTS=(list, ["localhost", "127.0.0.1", "[::1]", "testserver"]),
)
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env("DJANGO_DEBUG")
# The default key only serves local runs; production must set DJANGO_SECRET_KEY.
SECRET_KEY = env("DJANGO_SECRET_KEY", default="netarena-local-development-key-not-for-production")
ALLOWED_HOSTS = env("DJANGO_ALLOWED_HOSTS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "submissions",
    "leaderboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'var' / 'db.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Celery workers are separate processes: give them time to wait for the write lock, and
    # keep the test database in a file so that end-to-end tests can share it with a worker.
    DATABASES["default"].setdefault("OPTIONS", {})["timeout"] = 30
    # One file per test process, so that concurrent test runs never share (or delete) it.
    DATABASES["default"]["TEST"] = {
        "NAME": str(BASE_DIR / "var" / f"test-db-{os.getpid()}.sqlite3")
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [
    BASE_DIR / "static",
    # Plotly's own bundle, served locally (no CDN): /static/vendor/plotly/plotly.min.js
    ("vendor/plotly", Path(plotly.__file__).resolve().parent / "package_data"),
]
STATIC_ROOT = BASE_DIR / "var" / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticatedOrReadOnly"],
}

# Celery: a real Redis broker; each benchmark app has its own queue (DESIGN.md §3).
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="redis://127.0.0.1:6379/0")
CELERY_RESULT_BACKEND = env("CELERY_RESULT_BACKEND", default=CELERY_BROKER_URL)
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = CONTROL_QUEUE
# Episode tasks are sent to the queue named after their app (services.submission_prepare).

# Engine knobs.
NETARENA = {
    # Outbound agent calls to these networks are allowed (local development, tests, demo).
    "AGENT_ALLOWED_NETWORKS": env.list("NETARENA_AGENT_ALLOWED_NETWORKS", default=[]),
    "AGENT_TIMEOUT_S": env.float("NETARENA_AGENT_TIMEOUT_S", default=60.0),
    "ORACLE_VAULT_DIR": env("NETARENA_ORACLE_VAULT_DIR", default=str(BASE_DIR / "var" / "vault")),
    "SUBMISSIONS_PER_TEAM_PER_DAY": env.int("NETARENA_SUBMISSIONS_PER_TEAM_PER_DAY", default=5),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env("DJANGO_LOG_LEVEL", default="INFO")},
    # One line per agent request is noise; failures are recorded on the episode instead.
    "loggers": {name: {"level": "WARNING"} for name in ("httpx", "httpcore")},
}
