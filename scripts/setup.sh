#!/usr/bin/env bash
# Idempotent set-up of a fresh Debian 12 machine (run as root): system packages, the Python
# venv with pinned requirements, and — with WITH_K8S=1 — the Kubernetes binaries.
#   NETARENA_SETUP=dev      (default) everything to develop and test: servers, Chromium, dev tools
#   NETARENA_SETUP=runtime  what a deployed web or worker process needs (the images use it)
set -euo pipefail
cd "$(dirname "$0")/.."

PROFILE=${NETARENA_SETUP:-dev}
RUNTIME_PACKAGES=(
  python3 python3-venv
  mininet iproute2 iptables ipset    # the route app's emulator
  bubblewrap libseccomp2             # sandbox for agent code and commands
  socat conntrack ethtool procps psmisc util-linux net-tools curl ca-certificates
)
DEV_PACKAGES=(
  redis-server postgresql            # Celery broker; production database (CI runs both)
  chromium                           # page tests (headless)
  docker-compose                     # renders docker-compose.yml in the deploy tests (no engine needed)
)
case "$PROFILE" in
  runtime) APT_PACKAGES=("${RUNTIME_PACKAGES[@]}"); REQUIREMENTS=requirements.txt ;;
  dev) APT_PACKAGES=("${RUNTIME_PACKAGES[@]}" "${DEV_PACKAGES[@]}"); REQUIREMENTS=requirements-dev.txt ;;
  *) echo "setup: NETARENA_SETUP must be dev or runtime, not '$PROFILE'" >&2; exit 2 ;;
esac

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: need root to install: ${missing[*]}" >&2; exit 1
  fi
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.requirements.sha256
want=$( (echo "$PROFILE"; cat requirements.txt requirements-dev.txt) | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q --no-cache-dir -r "$REQUIREMENTS"
  echo "$want" > "$stamp"
fi

if [ "${WITH_K8S:-0}" = "1" ] && [ -x scripts/build_k8s.sh ]; then
  # The agent's commands run the real kubectl: without one on PATH (a fresh machine), it is
  # built with the cluster's binaries into the same cache (scripts/demo.sh points
  # NETARENA_KUBECTL at it).
  kubectl_too=0
  command -v kubectl >/dev/null 2>&1 || kubectl_too=1
  NETARENA_K8S_KUBECTL=${NETARENA_K8S_KUBECTL:-$kubectl_too} scripts/build_k8s.sh
fi
