#!/usr/bin/env bash
# Deploy check (docs/deploy.md): build every image docker-compose.yml uses from this repository
# on a machine without a registry, run the whole stack with podman, run a real evaluation round
# of the reference agents through the deployed web, database, broker and workers, read the
# board over HTTP, and tear everything down. Prints what it timed and the image sizes; exits
# non-zero on any failure. Run as root on Debian 12.
#
# Env: NETARENA_CHECK_APPS (default every registered app: python3 -m evaluator.registry apps), NETARENA_CHECK_QUERIES (default 4 per app),
#      NETARENA_CHECK_PORT (host port of the web service, default 18000),
#      NETARENA_DEPLOY_CACHE (base image, podman-compose, settings; default /var/cache/netarena/deploy),
#      NETARENA_CHECK_KEEP=1 leaves the stack running for inspection.
# --tools-only (or NETARENA_CHECK_TOOLS_ONLY=1): only the tool step (podman, runc, CNI with
#      dnsname, debootstrap, podman-compose, containers.conf under NETARENA_DEPLOY_CACHE), then
#      exit; scripts/fresh_check.sh runs it on a fresh machine, and uses it on the host.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS_ONLY=${NETARENA_CHECK_TOOLS_ONLY:-0}
case "${1:-}" in
  --tools-only) TOOLS_ONLY=1 ;;
  "") ;;
  *) echo "usage: $0 [--tools-only]" >&2; exit 2 ;;
esac
CACHE=${NETARENA_DEPLOY_CACHE:-/var/cache/netarena/deploy}
# Read after the tool step, which installs python3 on a machine that has none yet.
APPS=${NETARENA_CHECK_APPS:-}
QUERIES=${NETARENA_CHECK_QUERIES:-4}
PORT=${NETARENA_CHECK_PORT:-18000}
PROJECT=netarena-check
K8S_BIN=${NETARENA_K8S_BIN:-/var/cache/netarena/k8s/v1.33.13/bin}
mkdir -p "$CACHE"

TIMINGS=()
now() { date +%s.%N; }
timed() {  # timed LABEL COMMAND...: run, record the seconds it took
  local label=$1 t0 t1; shift
  t0=$(now)
  "$@"
  t1=$(now)
  TIMINGS+=("$(printf '%-28s %7.1f s' "$label" "$(echo "$t1 - $t0" | bc)")")
  echo "deploy_check: $label done" >&2
}
fail() { echo "deploy_check: FAILED: $*" >&2; exit 1; }

# --- tools -----------------------------------------------------------------------------------
install_tools() {
  local need=() pkg
  # containernetworking-plugins + its dnsname plugin: compose service names (db, redis, web)
  # resolve on the project network only with dnsname; podman does not pull it in
  # (--no-install-recommends), so without it a fresh machine's containers cannot find db.
  for pkg in podman containernetworking-plugins golang-github-containernetworking-plugin-dnsname \
             debootstrap fuse-overlayfs uidmap runc bc curl python3-venv; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
  done
  if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
  if [ ! -x "$CACHE/venv/bin/podman-compose" ]; then
    python3 -m venv "$CACHE/venv"
    "$CACHE/venv/bin/pip" install -q podman-compose==1.6.0
  fi
  # crun cannot start containers on these hosts (container ulimits above the host's, hybrid
  # cgroups); runc can, with explicit ulimits. The CNI backend, where dnsname does the names
  # (netavark would need aardvark-dns instead).
  cat > "$CACHE/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
[engine]
runtime = "runc"
[network]
network_backend = "cni"
EOF
}

# --- images ----------------------------------------------------------------------------------
base_image() {  # debian:12 from Debian's packages (no registry)
  podman image exists docker.io/library/debian:12 && return 0
  if [ ! -f "$CACHE/debian-12.tar" ]; then
    rm -rf "$CACHE/rootfs"
    debootstrap --variant=minbase bookworm "$CACHE/rootfs" http://deb.debian.org/debian >"$CACHE/debootstrap.log"
    rm -rf "$CACHE"/rootfs/var/cache/apt/*.bin "$CACHE"/rootfs/var/cache/apt/archives/*.deb \
      "$CACHE"/rootfs/var/lib/apt/lists/*
    tar -C "$CACHE/rootfs" -cf "$CACHE/debian-12.tar" .
    rm -rf "$CACHE/rootfs"
  fi
  podman import -q "$CACHE/debian-12.tar" docker.io/library/debian:12 >/dev/null
}

BUILD_ARGS=()
build_contexts() {
  # The host's extra CA certificates (an intercepting HTTPS proxy on the way to PyPI).
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    BUILD_ARGS+=(--build-context "extra-ca=/usr/local/share/ca-certificates")
  fi
  # Kubernetes binaries this host already built (scripts/build_k8s.sh): reused instead of
  # the image's own from-source build, which stays the default elsewhere.
  if NETARENA_K8S_KUBECTL=1 NETARENA_K8S_BIN="$K8S_BIN" scripts/build_k8s.sh >"$CACHE/build_k8s.log" 2>&1; then
    rm -rf "$CACHE/k8s-context" && mkdir -p "$CACHE/k8s-context/opt/k8s/bin"
    local b
    for b in kube-apiserver kube-controller-manager etcd kubectl; do
      cp -L "$K8S_BIN/$b" "$CACHE/k8s-context/opt/k8s/bin/$b"
    done
    BUILD_ARGS+=(--build-context "k8s-binaries=$CACHE/k8s-context")
  fi
}

build() {  # build TAG ARGS...
  local tag=$1; shift
  podman build -q "${BUILD_ARGS[@]}" -t "$tag" "$@" >"$CACHE/build-${tag//[:\/]/_}.log" 2>&1 \
    || { tail -30 "$CACHE/build-${tag//[:\/]/_}.log" >&2; fail "podman build $tag"; }
}

# --- the stack -------------------------------------------------------------------------------
compose() {
  "$CACHE/venv/bin/podman-compose" -p "$PROJECT" --env-file "$CACHE/check.env" \
    -f docker-compose.yml -f scripts/deploy/compose.check.yml "$@"
}

write_env() {
  local fernet
  fernet=$(python3 -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())')
  cat > "$CACHE/check.env" <<EOF
DJANGO_SECRET_KEY=$(python3 -c 'import secrets; print(secrets.token_urlsafe(64))')
NETARENA_SECRET_ENCRYPTION_KEY=$fernet
NETARENA_QUERY_ID_KEY=$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')
POSTGRES_PASSWORD=$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))')
DJANGO_ALLOWED_HOSTS=localhost,127.0.0.1,web
NETARENA_HTTP_PORT=$PORT
NETARENA_AGENT_ALLOWED_NETWORKS=10.0.0.0/8
NETARENA_CHECK_APPS=$APPS
NETARENA_CHECK_QUERIES=$QUERIES
EOF
  chmod 600 "$CACHE/check.env"
}

wait_ready() {  # until /readyz is 200 (web, database, broker and a worker on every queue)
  local deadline=$((SECONDS + 600)) code
  while :; do
    code=$(curl -s -o "$CACHE/readyz.txt" -w '%{http_code}' "http://127.0.0.1:$PORT/readyz" || true)
    [ "$code" = 200 ] && return 0
    [ $SECONDS -lt $deadline ] || { cat "$CACHE/readyz.txt" >&2; fail "/readyz answered $code for 10 minutes"; }
    sleep 3
  done
}

serve_agents() {  # the reference agents as a service of the stack, registered on the site
  compose --profile check up -d agents >/dev/null
  local deadline=$((SECONDS + 120))
  until podman logs "${PROJECT}_agents_1" 2>&1 | grep -q "agents ready"; do
    [ $SECONDS -lt $deadline ] || { podman logs "${PROJECT}_agents_1" >&2; fail "the reference agents did not start"; }
    sleep 1
  done
}

run_round() {  # an admin starts the round on the site; the workers run it
  local password
  password=$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))')
  podman exec -e DJANGO_SUPERUSER_PASSWORD="$password" "${PROJECT}_web_1" \
    python manage.py createsuperuser --noinput --username check-admin --email admin@example.org >/dev/null
  python3 scripts/deploy/start_round.py "http://127.0.0.1:$PORT" check-admin "$password" \
    "$APPS" "$QUERIES" 1500 | tee "$CACHE/round.log"
}

read_board() {  # the oracle is first and fully correct on every app, over HTTP
  curl -fsS -H "X-Forwarded-Proto: https" "http://127.0.0.1:$PORT/api/v1/leaderboard/" \
    > "$CACHE/board.json" || fail "GET /api/v1/leaderboard/"
  python3 - "$CACHE/board.json" "$APPS" <<'EOF'
import json, sys
board = json.load(open(sys.argv[1]))["apps"]
for app in sys.argv[2].split(","):
    rows = board.get(app) or []
    if not rows:
        sys.exit(f"deploy_check: no standings for {app}")
    print(f"deploy_check: board {app}: " + ", ".join(
        f"#{r['rank']} {r['agent']} correct and safe {r['correct_and_safe']['value']:.0%}"
        for r in rows))
    oracle = [r for r in rows if r["agent"] == "reference-oracle"]
    if not oracle or oracle[0]["rank"] != 1 or oracle[0]["correct_and_safe"]["value"] != 1.0:
        sys.exit(f"deploy_check: the oracle is not first with 100% correct and safe on {app}")
EOF
}

teardown() {
  [ "${NETARENA_CHECK_KEEP:-0}" = 1 ] && return 0
  compose --profile check down -v >/dev/null 2>&1 || true
}

report() {
  echo
  echo "deploy_check: timings"
  printf '  %s\n' "${TIMINGS[@]}"
  echo "deploy_check: image sizes"
  podman images --format '  {{.Repository}}:{{.Tag}} {{.Size}}' \
    | grep -E 'netarena|debian' || true
}

export CONTAINERS_CONF="$CACHE/containers.conf"
timed "install tools" install_tools
if [ "$TOOLS_ONLY" = 1 ]; then
  echo "deploy_check: tools ready ($(podman --version); containers.conf: $CONTAINERS_CONF)"
  exit 0
fi
[ -n "$APPS" ] || APPS=$(python3 -m evaluator.registry apps)
timed "base image" base_image
timed "build contexts (k8s bins)" build_contexts
timed "image redis" build localhost/netarena-check-redis:latest -f scripts/deploy/redis.Containerfile scripts/deploy
timed "image postgres" build localhost/netarena-check-postgres:latest -f scripts/deploy/postgres.Containerfile scripts/deploy
timed "image runtime" build netarena:latest --target runtime .
timed "image worker-k8s" build netarena-k8s:latest --target worker-k8s .
write_env
trap 'teardown; report' EXIT
compose --profile check down -v >/dev/null 2>&1 || true
timed "stack up" compose up -d
timed "ready (/readyz 200)" wait_ready
timed "agents served, registered" serve_agents
timed "round ($APPS x $QUERIES)" run_round
timed "board over HTTP" read_board
echo "deploy_check: OK"
