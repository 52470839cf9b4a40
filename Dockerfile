# One image for every role (web, Celery workers, beat), built with the same set-up script that
# CI and `make setup` run: scripts/setup.sh installs the Debian packages (Redis and PostgreSQL
# clients/servers, Mininet, bubblewrap, Chromium) and the pinned Python requirements into .venv.
#   docker build -t netarena .
#   docker build --build-arg WITH_K8S=1 -t netarena .   # plus the Kubernetes binaries (k8s app)
FROM debian:12
# The k8s app's binaries are built from source by scripts/build_k8s.sh, which needs a Go
# toolchain on PATH (or prebuilt binaries, see docs/k8s-cluster.md); off by default.
ARG WITH_K8S=0
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/app/.venv/bin:$PATH \
    DJANGO_SETTINGS_MODULE=config.settings_production
WORKDIR /app
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends python3 python3-venv python3-pip git \
 && rm -rf /var/lib/apt/lists/*

# Dependencies first, so that code edits reuse this layer.
COPY requirements.txt requirements-dev.txt ./
COPY scripts/ scripts/
RUN WITH_K8S=0 scripts/setup.sh && rm -rf /var/lib/apt/lists/* /root/.cache

COPY . .
RUN if [ "$WITH_K8S" = "1" ]; then WITH_K8S=1 scripts/setup.sh; fi
# Hashed, compressed static files for WhiteNoise. The throwaway keys exist only in this step;
# the production settings refuse to start without real ones.
RUN DJANGO_SECRET_KEY=collectstatic-only-build-time-key-never-used-to-sign-anything-at-all \
    NETARENA_SECRET_ENCRYPTION_KEY=collectstatic-only \
    NETARENA_QUERY_ID_KEY=collectstatic-only \
    python manage.py collectstatic --noinput \
 && useradd --system --home-dir /app --shell /usr/sbin/nologin netarena \
 && mkdir -p /app/var/vault && chown -R netarena:netarena /app/var

# Web, control, malt and beat run unprivileged; only the route and k8s workers run as root
# (docker-compose.yml), because their emulators create network namespaces and clusters.
USER netarena

EXPOSE 8000
# docker-compose.yml overrides the command per role (workers, beat).
CMD ["gunicorn", "config.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", \
     "--timeout", "60", "--access-logfile", "-"]
