"""Production settings: ``DJANGO_SETTINGS_MODULE=config.settings_production``.

Everything in :mod:`config.settings` plus the hardening that ``manage.py check --deploy``
asks for (Django's deployment checklist): DEBUG forced off, HTTPS-only cookies, HSTS, an HTTPS
redirect (behind a TLS-terminating proxy that sets ``X-Forwarded-Proto``), hashed static file
names served by WhiteNoise from ``STATIC_ROOT``.

Raises :class:`django.core.exceptions.ImproperlyConfigured` at start-up when
``DJANGO_SECRET_KEY`` or ``NETARENA_SECRET_ENCRYPTION_KEY`` is missing, or when the secret key is
the development default: the key that encrypts agents' API keys must never derive from a value
that is public in this repository.
"""

import os

from django.core.exceptions import ImproperlyConfigured

from config.settings import *  # noqa: F403
from config.settings import env

DEBUG = False

_DEVELOPMENT_KEY = "netarena-local-development-key-not-for-production"
for _name in ("DJANGO_SECRET_KEY", "NETARENA_SECRET_ENCRYPTION_KEY", "NETARENA_QUERY_ID_KEY"):
    if not os.environ.get(_name):
        raise ImproperlyConfigured(f"{_name} must be set in production")
SECRET_KEY = os.environ["DJANGO_SECRET_KEY"]
if SECRET_KEY == _DEVELOPMENT_KEY or len(SECRET_KEY) < 50:
    raise ImproperlyConfigured("DJANGO_SECRET_KEY must be a fresh random value of 50+ characters")

# HTTPS everywhere. The proxy in front (load balancer, nginx, Caddy) terminates TLS.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
# Probes and scrapers inside the deployment speak plain HTTP to the web container.
SECURE_REDIRECT_EXEMPT = [r"^readyz$", r"^metrics$"]
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=31_536_000)  # one year
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=True)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

# Static files: collected at image build time with hashed names; no finders at run time.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = False
STATIC_ROOT = env.path("DJANGO_STATIC_ROOT", default=str(STATIC_ROOT))  # noqa: F405
