# syntax=docker/dockerfile:1
# Images of every role, from one file (docs/deploy.md):
#   runtime     web, Celery workers (all but k8s) and beat: runtime packages and
#               requirements.txt only (no servers, no browser, no test tooling)
#   worker-k8s  runtime plus the embedded cluster's binaries (kube-apiserver,
#               kube-controller-manager, etcd, kubectl), built from source in the k8s-binaries stage
#   test        runtime plus requirements-dev.txt and Chromium, to run the test suite in a container
#   docker build --target runtime -t netarena:latest .
#   docker build --target worker-k8s -t netarena-k8s:latest .
# Every stage starts from debian:12; scripts/deploy_check.sh makes that base image from Debian
# packages on a machine without a registry.

# Extra CA certificates (*.crt) for networks whose HTTPS egress passes an intercepting proxy:
#   docker build --build-context extra-ca=/usr/local/share/ca-certificates ...
# Empty by default.
FROM scratch AS extra-ca

FROM debian:12 AS runtime
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/app/.venv/bin:$PATH \
    DJANGO_SETTINGS_MODULE=config.settings_production
WORKDIR /app
RUN --mount=type=bind,from=extra-ca,target=/tmp/extra-ca \
    apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends ca-certificates \
 && find /tmp/extra-ca -maxdepth 1 -name '*.crt' -exec cp {} /usr/local/share/ca-certificates/ \; \
 && update-ca-certificates >/dev/null
# Dependencies first, so that code edits reuse these layers.
COPY requirements.txt requirements-dev.txt ./
COPY scripts/setup.sh scripts/
RUN NETARENA_SETUP=runtime scripts/setup.sh \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /root/.cache
COPY . .
# Hashed, compressed static files for WhiteNoise. The throwaway keys exist only in this step;
# the production settings refuse to start without real ones.
RUN DJANGO_SECRET_KEY=collectstatic-only-build-time-key-never-used-to-sign-anything-at-all \
    NETARENA_SECRET_ENCRYPTION_KEY=collectstatic-only \
    NETARENA_QUERY_ID_KEY=collectstatic-only \
    python manage.py collectstatic --noinput \
 && useradd --system --home-dir /app --shell /usr/sbin/nologin netarena \
 && mkdir -p /app/var/vault && chown -R netarena:netarena /app/var
# Web, control, malt and beat run unprivileged; only the route and k8s workers run as root
# (docker-compose.yml), because their emulators create network namespaces and a cluster.
USER netarena
EXPOSE 8000
# docker-compose.yml overrides the command per role (workers, beat).
CMD ["gunicorn", "config.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", \
     "--timeout", "60", "--access-logfile", "-"]

# The Kubernetes binaries, built from source through the Go module proxy (scripts/build_k8s.sh).
# The Go toolchain itself comes from the module proxy too (module golang.org/toolchain), so the
# build needs no registry. The cache mount keeps modules and build cache between builds.
FROM debian:12 AS k8s-binaries
ARG GO_VERSION=1.26.8
ARG GOPROXY=https://proxy.golang.org
ENV DEBIAN_FRONTEND=noninteractive
RUN --mount=type=bind,from=extra-ca,target=/tmp/extra-ca \
    apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends curl ca-certificates unzip git \
 && find /tmp/extra-ca -maxdepth 1 -name '*.crt' -exec cp {} /usr/local/share/ca-certificates/ \; \
 && update-ca-certificates >/dev/null \
 && rm -rf /var/lib/apt/lists/*
RUN curl -fsSL "${GOPROXY}/golang.org/toolchain/@v/v0.0.1-go${GO_VERSION}.linux-amd64.zip" \
        -o /tmp/go.zip \
 && unzip -q /tmp/go.zip -d /tmp/go \
 && mv "/tmp/go/golang.org/toolchain@v0.0.1-go${GO_VERSION}.linux-amd64" /usr/local/go \
 && chmod +x /usr/local/go/bin/* /usr/local/go/pkg/tool/*/* \
 && rm -rf /tmp/go /tmp/go.zip
COPY scripts/build_k8s.sh /src/scripts/
RUN --mount=type=cache,target=/var/cache/netarena/go \
    GOPROXY="${GOPROXY}" GO=/usr/local/go/bin/go NETARENA_K8S_BIN=/opt/k8s/bin \
    NETARENA_K8S_KUBECTL=1 /src/scripts/build_k8s.sh

FROM runtime AS worker-k8s
USER root
COPY --from=k8s-binaries /opt/k8s/bin/ /opt/k8s/bin/
ENV NETARENA_K8S_BIN=/opt/k8s/bin \
    NETARENA_KUBECTL=/opt/k8s/bin/kubectl

FROM runtime AS test
USER root
RUN NETARENA_SETUP=dev scripts/setup.sh && rm -rf /var/lib/apt/lists/* /root/.cache

# Drop-in AgentBeats green agents (docs/agentbeats.md, "Drop-in image"): NetArena's
# generate_compose.py starts a green image with only --host, --port and --card-url, so the
# entry point is the green agent and the app comes from NETARENA_GREEN_APP. Root: route's
# and k8s's emulators and MALT's sandbox need it (as the workers in docker-compose.yml).
FROM runtime AS green
USER root
ENV NETARENA_GREEN_ALLOW_NETWORKS=local
ENTRYPOINT ["python", "-m", "evaluator.green"]

FROM worker-k8s AS green-k8s
ENV NETARENA_GREEN_APP=k8s \
    NETARENA_GREEN_ALLOW_NETWORKS=local
ENTRYPOINT ["python", "-m", "evaluator.green"]

# The reference oracle as an AgentBeats participant (the deploy check's scenario run, docs/
# agentbeats.md "Running a scenario"): started, like every participant of AgentBeats' compose
# files, with only --host, --port and --card-url. It reads the answers from the oracle vault
# the green agent writes (/vault, a volume the two share). Root, because the green agent (root)
# writes the vault's files with mode 0600: the answers are for the oracle alone.
FROM runtime AS reference-oracle
USER root
ENTRYPOINT ["python", "-m", "evaluator.reference", "--agent", "oracle", "--app", "all", \
            "--protocol", "a2a", "--vault", "/vault"]
