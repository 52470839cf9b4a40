"""Django settings, 12-factor style through django-environ.

Every setting that differs between a laptop, CI and production comes from the environment
(or a ``.env`` file next to manage.py); the defaults make a fresh checkout run on SQLite and a
local Redis.
"""

import os
from pathlib import Path

import environ
import plotly

from config.secrets import DEVELOPMENT_SECRET_KEY, production_secrets_check
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
SECRET_KEY = env("DJANGO_SECRET_KEY", default=DEVELOPMENT_SECRET_KEY)
ALLOWED_HOSTS = env("DJANGO_ALLOWED_HOSTS")
# Refuse to start in production with the development keys (config/secrets.py).
production_secrets_check(debug=DEBUG, allowed_hosts=ALLOWED_HOSTS, environ=os.environ)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI served locally (no CDN)
    "django_prometheus",
    "health_check",
    "ops",
    "accounts",
    "submissions",
    "leaderboard",
    "engine_commands",
]

MIDDLEWARE = [
    "ops.middleware.LivenessMiddleware",
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

#: Who may read /metrics (ops.views.metrics): CIDRs, comma-separated in the environment.
NETARENA_METRICS_NETWORKS = env.list(
    "NETARENA_METRICS_NETWORKS",
    default=["127.0.0.0/8", "::1/128", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"],
)

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
    # The demo's web requests and Celery workers (separate processes) write at once:
    # * WAL journal: readers never block the writer nor it them (one writer at a time still);
    # * IMMEDIATE transactions: an atomic block takes the write lock when it begins, so a
    #   writer waits for it (up to the timeout) instead of failing at once with "database is
    #   locked" when a read transaction cannot be upgraded to a write one (Django 5.1+);
    # * timeout: seconds a connection waits for the write lock (SQLite's busy timeout).
    # The test database stays a file so that end-to-end tests can share it with a worker.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        timeout=30, transaction_mode="IMMEDIATE", init_command="PRAGMA journal_mode=WAL"
    )
    # One file per test process, so that concurrent test runs never share (or delete) it.
    DATABASES["default"]["TEST"] = {
        "NAME": str(BASE_DIR / "var" / f"test-db-{os.getpid()}.sqlite3")
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The log-in limits (accounts.login_limits) refuse before Django's backend checks a password.
AUTHENTICATION_BACKENDS = [
    "accounts.auth_backends.LoginLimitBackend",
    "django.contrib.auth.backends.ModelBackend",
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "accounts:team"
LOGOUT_REDIRECT_URL = "leaderboard:index"
# Mail (password resets, "submission finished") goes to the console unless an SMTP server is
# configured (EMAIL_URL).
_email = env.email_url("EMAIL_URL", default="consolemail://")
EMAIL_BACKEND = _email["EMAIL_BACKEND"]
EMAIL_HOST = _email.get("EMAIL_HOST") or "localhost"
EMAIL_PORT = _email.get("EMAIL_PORT") or 25
EMAIL_HOST_USER = _email.get("EMAIL_HOST_USER") or ""
EMAIL_HOST_PASSWORD = _email.get("EMAIL_HOST_PASSWORD") or ""
EMAIL_USE_TLS = bool(_email.get("EMAIL_USE_TLS", False))
DEFAULT_FROM_EMAIL = env("DJANGO_DEFAULT_FROM_EMAIL", default="netarena@localhost")
# Seconds an SMTP connection may take (a worker sends the "submission finished" mail).
EMAIL_TIMEOUT = env.int("DJANGO_EMAIL_TIMEOUT", default=10)

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
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # Lists are paginated (?page=N; page_size fixed) and every client is throttled: anonymous
    # callers per IP, token/session users per account (over the rate: 429 + Retry-After).
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": env.int("NETARENA_API_PAGE_SIZE", default=50),
    "DEFAULT_THROTTLE_CLASSES": [
        "submissions.throttling.AnonRateThrottle",
        "submissions.throttling.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "anon": env("NETARENA_API_ANON_RATE", default="120/min"),
        "user": env("NETARENA_API_USER_RATE", default="1200/min"),
    },
    # A JSON parser that answers 400 to bodies nested too deeply (DRF's gives a 500).
    "DEFAULT_PARSER_CLASSES": [
        "submissions.api_parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    # A refused service call (submissions.errors.ServiceError) answers {"detail", "code"}.
    "EXCEPTION_HANDLER": "submissions.api_errors.api_exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "NetArena Leaderboard API",
    "DESCRIPTION": (
        "Register agents, submit them for evaluation and read standings. Authenticate with "
        "`Authorization: Token <key>` (or a browser session + CSRF)."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# The cache holds the API throttle counters. Several web processes (gunicorn --workers 3 in
# docker-compose.yml) must share it, or each would grant the full rate: NETARENA_CACHE_URL
# names a Redis database (Django's own Redis backend); without it the cache is per process.
NETARENA_CACHE_URL = env("NETARENA_CACHE_URL", default="")
if NETARENA_CACHE_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": NETARENA_CACHE_URL,
            "KEY_PREFIX": env("NETARENA_CACHE_KEY_PREFIX", default="netarena"),
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Celery: a real Redis broker; each benchmark app has its own queue (docs/architecture.md §3).
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
# Celery beat: expire submissions whose queue has no worker (services.submissions_expire).
# Celery beat: requeue episodes whose worker died (services.episodes_requeue).
CELERY_BEAT_SCHEDULE = {
    "submissions-expire": {
        "task": "submissions.submissions_expire",
        "schedule": 300.0,
        "options": {"queue": CONTROL_QUEUE},
    },
    "episodes-requeue": {
        "task": "submissions.episodes_requeue",
        "schedule": env.float("NETARENA_REQUEUE_EVERY_S", default=60.0),
        "options": {"queue": CONTROL_QUEUE},
    },
}
# A message a dead worker had reserved (acks_late: never acknowledged) comes back to the queue
# after this many seconds; longer than the episode task's hard time limit (1900 s), so a live
# task is never delivered twice by the broker (a duplicate would be skipped anyway).
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env.float("NETARENA_BROKER_VISIBILITY_TIMEOUT_S", default=3600.0)
}

# Engine knobs.
NETARENA = {
    # Outbound agent calls to these networks are allowed (local development, tests, demo).
    "AGENT_ALLOWED_NETWORKS": env.list("NETARENA_AGENT_ALLOWED_NETWORKS", default=[]),
    # Non-public networks that *team* agents may use too: empty on a public site; a
    # single-machine demo (scripts/demo.sh) or a closed lab sets it.
    "TEAM_AGENT_NETWORKS": env.list("NETARENA_TEAM_AGENT_NETWORKS", default=[]),
    "AGENT_TIMEOUT_S": env.float("NETARENA_AGENT_TIMEOUT_S", default=60.0),
    "ORACLE_VAULT_DIR": env("NETARENA_ORACLE_VAULT_DIR", default=str(BASE_DIR / "var" / "vault")),
    "SUBMISSIONS_PER_TEAM_PER_DAY": env.int("NETARENA_SUBMISSIONS_PER_TEAM_PER_DAY", default=5),
    # One person's exposure to the queries (docs/security.md): team submissions per user in
    # 24 hours, across all their teams, and the teams a user may own or join.
    "SUBMISSIONS_PER_USER_PER_DAY": env.int("NETARENA_SUBMISSIONS_PER_USER_PER_DAY", default=10),
    "TEAMS_PER_USER": env.int("NETARENA_TEAMS_PER_USER", default=3),
    # Password guessing and reset e-mail (accounts.login_limits, docs/security.md): failed
    # log-ins per user name and client address, and per client address, in a window (s);
    # reset e-mails per address and per client in a window (s); trusted proxies in front.
    "LOGIN_FAILURES_MAX": env.int("NETARENA_LOGIN_FAILURES_MAX", default=5),
    "LOGIN_FAILURES_PER_CLIENT_MAX": env.int("NETARENA_LOGIN_FAILURES_PER_CLIENT_MAX", default=20),
    "LOGIN_FAILURE_WINDOW_S": env.int("NETARENA_LOGIN_FAILURE_WINDOW_S", default=900),
    "PASSWORD_RESETS_PER_EMAIL": env.int("NETARENA_PASSWORD_RESETS_PER_EMAIL", default=3),
    "PASSWORD_RESETS_PER_CLIENT": env.int("NETARENA_PASSWORD_RESETS_PER_CLIENT", default=10),
    "PASSWORD_RESET_WINDOW_S": env.int("NETARENA_PASSWORD_RESET_WINDOW_S", default=3600),
    "CLIENT_PROXY_HOPS": env.int("NETARENA_CLIENT_PROXY_HOPS", default=0),
    # Registered agents per team (reference agents exempt); docs/security.md.
    "AGENTS_PER_TEAM": env.int("NETARENA_AGENTS_PER_TEAM", default=10),
    # TCP ports a team's agent endpoint may use (reference agents use free loopback ports).
    "AGENT_PORTS": frozenset(
        int(port)
        for port in env.list("NETARENA_AGENT_PORTS", default=["80", "443", "8000", "8080", "8443"])
    ),
    # A submission (or an episode) no worker took within this many seconds expires.
    "SUBMISSION_MAX_WAIT_S": env.float("NETARENA_SUBMISSION_MAX_WAIT_S", default=6 * 3600.0),
    # A running episode's worker refreshes its heartbeat this often (s); one whose heartbeat
    # is older than EPISODE_STALE_S lost its worker and is requeued (services.episodes_requeue).
    "EPISODE_HEARTBEAT_S": env.float("NETARENA_EPISODE_HEARTBEAT_S", default=10.0),
    "EPISODE_STALE_S": env.float("NETARENA_EPISODE_STALE_S", default=90.0),
    # First back-off (s) before an infrastructure failure is retried; doubles per attempt.
    "EPISODE_RETRY_BACKOFF_S": env.float("NETARENA_EPISODE_RETRY_BACKOFF_S", default=10.0),
    # A submission with more than this share of infrastructure failures among its run episodes
    # is marked incomplete: not ranked, no quota.
    "INFRA_FAILURE_MAX_SHARE": env.float("NETARENA_INFRA_FAILURE_MAX_SHARE", default=0.1),
    # The site's public address, for links in e-mails sent outside a request (a worker's
    # "submission finished" mail, accounts.notifications).
    "SITE_URL": env("NETARENA_SITE_URL", default="http://localhost:8000"),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env("DJANGO_LOG_LEVEL", default="INFO")},
    # One line per agent request is noise; failures are recorded on the episode instead.
    "loggers": {name: {"level": "WARNING"} for name in ("httpx", "httpcore")},
}
