#!/usr/bin/env bash
# Deploy check (docs/deploy.md): build every image docker-compose.yml uses from this repository
# on a machine without a registry, run the whole stack with podman, run a real evaluation round
# of the reference agents through the deployed web, database, broker and workers, read the
# board over HTTP, and tear everything down. Prints what it timed and the image sizes; exits
# non-zero on any failure. Run as root on Debian 12.
#
# --kube: the same images and round (not the AgentBeats scenarios, which do not depend on how
# the site is deployed), but the stack is the Kubernetes manifests
# (deploy/kubernetes/base through the overlay scripts/deploy/kube-check, rendered with
# `kubectl kustomize`), one pod per workload played by `podman kube play`
# (scripts/deploy/kube_pods.py resolves what podman lacks: Services, Secrets, StatefulSets).
#
# Env: NETARENA_CHECK_APPS (default every registered app: python3 -m evaluator.registry apps), NETARENA_CHECK_QUERIES (default 4 per app),
#      NETARENA_CHECK_PORT (host port of the web service, default 18000),
#      NETARENA_DEPLOY_CACHE (base image, podman-compose, settings; default /var/cache/netarena/deploy),
#      NETARENA_CHECK_KEEP=1 leaves the stack running for inspection,
#      NETARENA_KUBE_SUBNET (--kube: the pods' /24, default 10.89.77), KUBECTL (default kubectl),
#      NETARENA_CHECK_SCENARIOS (the AgentBeats scenarios run, default malt:7,route:30).
# --tools-only (or NETARENA_CHECK_TOOLS_ONLY=1): only the tool step (podman, runc, CNI with
#      dnsname, debootstrap, podman-compose, containers.conf under NETARENA_DEPLOY_CACHE), then
#      exit; scripts/fresh_check.sh runs it on a fresh machine, and uses it on the host.
set -euo pipefail
cd "$(dirname "$0")/.."
KUBE=0
TOOLS_ONLY=${NETARENA_CHECK_TOOLS_ONLY:-0}
case "${1:-}" in
  --kube) KUBE=1 ;;
  --tools-only) TOOLS_ONLY=1 ;;
  "") ;;
  *) echo "usage: $0 [--kube | --tools-only]" >&2; exit 2 ;;
esac
CACHE=${NETARENA_DEPLOY_CACHE:-/var/cache/netarena/deploy}
# Read after the tool step, which installs python3 on a machine that has none yet.
APPS=${NETARENA_CHECK_APPS:-}
QUERIES=${NETARENA_CHECK_QUERIES:-4}
PORT=${NETARENA_CHECK_PORT:-18000}
PROJECT=netarena-check
KUBE_SUBNET=${NETARENA_KUBE_SUBNET:-10.89.77}
KUBE_PREFIX=netarena-kube-
KUBECTL=${KUBECTL:-kubectl}
BASE_URL="http://127.0.0.1:$PORT"
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
  # catatonit: podman builds the pause image of its pods (--kube) from it when no registry
  # serves one.
  for pkg in podman containernetworking-plugins golang-github-containernetworking-plugin-dnsname \
             debootstrap fuse-overlayfs uidmap runc catatonit bc curl python3-venv; do
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
  if [ ! -d "$CACHE/venv/lib/python3.11/site-packages/tomli_w" ]; then
    "$CACHE/venv/bin/pip" install -q tomli-w==1.2.0  # scripts/deploy/scenario_compose.py
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
    code=$(curl -s -o "$CACHE/readyz.txt" -w '%{http_code}' "$BASE_URL/readyz" || true)
    [ "$code" = 200 ] && return 0
    [ $SECONDS -lt $deadline ] || { cat "$CACHE/readyz.txt" >&2; fail "/readyz answered $code for 10 minutes"; }
    sleep 3
  done
}

WEB_CONTAINER="${PROJECT}_web_1"
AGENTS_CONTAINER="${PROJECT}_agents_1"
serve_agents() {  # the reference agents as a service of the stack, registered on the site
  if [ "$KUBE" = 1 ]; then kube_play agents; else compose --profile check up -d agents >/dev/null; fi
  # four agent servers start one after another: minutes on a busy two-core machine
  local deadline=$((SECONDS + 420))
  until podman logs "$AGENTS_CONTAINER" 2>&1 | grep -q "agents ready"; do
    [ $SECONDS -lt $deadline ] || { podman logs "$AGENTS_CONTAINER" >&2; fail "the reference agents did not start"; }
    sleep 1
  done
}

run_round() {  # an admin starts the round on the site; the workers run it
  local password
  password=$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))')
  podman exec -e DJANGO_SUPERUSER_PASSWORD="$password" "$WEB_CONTAINER" \
    python manage.py createsuperuser --noinput --username check-admin --email admin@example.org >/dev/null
  python3 scripts/deploy/start_round.py "$BASE_URL" check-admin "$password" \
    "$APPS" "$QUERIES" 1500 | tee "$CACHE/round.log"
}

read_board() {  # the oracle is first and fully correct on every app, over HTTP
  curl -fsS -H "X-Forwarded-Proto: https" "$BASE_URL/api/v1/leaderboard/" \
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

# NetArena's published scenarios (scripts/deploy/scenarios/) laid out as AgentBeats' runner lays
# them out and run with podman-compose: our green image started with only --host, --port and
# --card-url, the reference oracle as the participant, the scenario client writing
# output/results.json. Passes when the task completes with avg_correctness 1.0 on NetArena's
# query count for the config (docs/agentbeats.md, "Query counts").
SCENARIOS=${NETARENA_CHECK_SCENARIOS:-malt:7,route:30}
scenario_check() {  # scenario_check APP EXPECTED_QUERIES
  local app=$1 expected=$2 dir="$CACHE/scenario-$1" project="netarena-scenario-$1"
  rm -rf "$dir"
  "$CACHE/venv/bin/python" scripts/deploy/scenario_compose.py "scripts/deploy/scenarios/$app.toml" \
    "$dir" --client-image localhost/netarena:latest || fail "scenario layout for $app"
  (cd "$dir" && "$CACHE/venv/bin/podman-compose" -p "$project" -f compose.yml up -d >/dev/null 2>&1) \
    || fail "podman-compose up for the $app scenario"
  local status
  status=$(timeout 1800 podman wait agentbeats-client) || status=timeout
  podman logs agentbeats-client > "$dir/client.log" 2>&1 || true
  podman logs green-agent > "$dir/green.log" 2>&1 || true
  (cd "$dir" && "$CACHE/venv/bin/podman-compose" -p "$project" -f compose.yml down -v >/dev/null 2>&1) || true
  [ "$status" = 0 ] || { tail -20 "$dir/client.log" "$dir/green.log" >&2; fail "the $app scenario client exited $status"; }
  python3 - "$dir/output/results.json" "$app" "$expected" <<'EOF'
import json, sys
results = json.load(open(sys.argv[1]))["results"]
app, expected = sys.argv[2], int(sys.argv[3])
(summary,) = [r for r in results if r.get("kind") == "summary"]
print(f"deploy_check: scenario {app}: {summary['netarena_n']} NetArena queries, "
      f"avg_correctness {summary['avg_correctness']}")
if summary["netarena_n"] != expected or summary["avg_correctness"] != 1.0:
    sys.exit(f"deploy_check: the {app} scenario wanted {expected} queries at avg_correctness 1.0")
EOF
}

run_scenarios() {
  local entry
  for entry in ${SCENARIOS//,/ }; do
    timed "scenario ${entry%%:*}" scenario_check "${entry%%:*}" "${entry##*:}"
  done
}

teardown() {
  [ "${NETARENA_CHECK_KEEP:-0}" = 1 ] && return 0
  if [ "$KUBE" = 1 ]; then kube_down; else compose --profile check down -v >/dev/null 2>&1 || true; fi
}

# --- the stack as Kubernetes pods (--kube) ----------------------------------------------------
KUBE_DIR="$CACHE/kube"
kube_render() {  # the manifests, then one pod file per workload (the secrets inlined: mode 0700)
  kube_down  # what a kept (NETARENA_CHECK_KEEP=1) run left
  rm -rf "$KUBE_DIR" && mkdir -m 700 "$KUBE_DIR"
  "$KUBECTL" kustomize scripts/deploy/kube-check > "$KUBE_DIR/manifests.yaml"
  # every registered queue has a consumer among the rendered Deployments (the image's Python)
  podman run --rm --network none -v "$KUBE_DIR/manifests.yaml:/tmp/manifests.yaml:ro" \
    localhost/netarena:latest python -m config.workers check /tmp/manifests.yaml
  { grep -E '^(DJANGO_SECRET_KEY|NETARENA_SECRET_ENCRYPTION_KEY|NETARENA_QUERY_ID_KEY|POSTGRES_PASSWORD|NETARENA_CHECK_APPS)=' "$CACHE/check.env"
    echo "DATABASE_URL=postgres://netarena:$(sed -n 's/^POSTGRES_PASSWORD=//p' "$CACHE/check.env")@db:5432/netarena"
  } > "$KUBE_DIR/secrets.env"
  "$CACHE/venv/bin/python" scripts/deploy/kube_pods.py "$KUBE_DIR/manifests.yaml" "$KUBE_DIR/pods" \
    "$KUBE_SUBNET" "$KUBE_PREFIX" --secret "netarena-secrets=$KUBE_DIR/secrets.env" > "$KUBE_DIR/plan.txt"
  sed 's/^/  /' "$KUBE_DIR/plan.txt" >&2
  BASE_URL="http://$(awk '$1 == "web" {print $3}' "$KUBE_DIR/plan.txt"):8000"
  WEB_CONTAINER="${KUBE_PREFIX}web-web"
  AGENTS_CONTAINER="${KUBE_PREFIX}agents-agents"
}

kube_play() {  # kube_play WORKLOAD...: play their pods at their addresses
  local workload line pod ip file volume
  for workload in "$@"; do
    line=$(awk -v w="$workload" '$1 == w' "$KUBE_DIR/plan.txt")
    read -r _ pod ip file _ <<<"$line"
    for volume in $(echo "$line" | cut -d' ' -f5-); do
      podman volume exists "$volume" || podman volume create "$volume" >/dev/null
    done
    podman kube play --network "${KUBE_PREFIX}net" --ip "$ip" "$file" >"$KUBE_DIR/play-$workload.log" 2>&1 \
      || { cat "$KUBE_DIR/play-$workload.log" >&2; fail "podman kube play $workload ($pod)"; }
  done
}

kube_up() {  # the network, PostgreSQL and Redis; once the database answers, the rest but agents
  podman network exists "${KUBE_PREFIX}net" \
    || podman network create --subnet "$KUBE_SUBNET.0/24" "${KUBE_PREFIX}net" >/dev/null
  kube_play db redis
  local deadline=$((SECONDS + 120)) rest
  until podman exec "${KUBE_PREFIX}db-postgres" pg_isready -U netarena -d netarena >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { podman logs "${KUBE_PREFIX}db-postgres" >&2; fail "PostgreSQL did not start"; }
    sleep 1
  done
  rest=$(awk '$1 != "db" && $1 != "redis" && $1 != "agents" {print $1}' "$KUBE_DIR/plan.txt")
  # shellcheck disable=SC2086 # one workload per word
  kube_play $rest
}

kube_down() {  # every pod, volume and the network of the plan
  local pod volume
  [ -f "$KUBE_DIR/plan.txt" ] || return 0
  awk '{print $2}' "$KUBE_DIR/plan.txt" | while read -r pod; do
    if podman pod exists "$pod"; then podman pod rm -f -t 30 "$pod" >/dev/null 2>&1 || true; fi
  done
  for volume in $(cut -d' ' -f5- "$KUBE_DIR/plan.txt" | tr ' ' '\n' | sort -u); do
    if podman volume exists "$volume"; then podman volume rm -f "$volume" >/dev/null 2>&1 || true; fi
  done
  if podman network exists "${KUBE_PREFIX}net"; then podman network rm -f "${KUBE_PREFIX}net" >/dev/null 2>&1 || true; fi
  rm -rf "$KUBE_DIR/pods" "$KUBE_DIR/secrets.env"
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
if [ "$KUBE" = 0 ]; then  # the AgentBeats scenarios' images (--kube checks the manifests only)
  timed "image green" build localhost/netarena-green:latest --target green .
  timed "image reference-oracle" build localhost/netarena-reference-oracle:latest --target reference-oracle .
fi
write_env
trap 'teardown; report' EXIT
if [ "$KUBE" = 1 ]; then
  timed "manifests rendered" kube_render
  timed "pods played" kube_up
else
  compose --profile check down -v >/dev/null 2>&1 || true
  timed "stack up" compose up -d
fi
timed "ready (/readyz 200)" wait_ready
timed "agents served, registered" serve_agents
timed "round ($APPS x $QUERIES)" run_round
timed "board over HTTP" read_board
[ "$KUBE" = 1 ] || run_scenarios
echo "deploy_check: OK"
