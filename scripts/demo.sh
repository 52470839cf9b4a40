#!/usr/bin/env bash
# The main job on the embedded defaults (README: `make demo`): set up, start Redis, a Celery
# worker and the reference agents, run a real evaluation round, and leave the site on :8000.
set -euo pipefail
cd "$(dirname "$0")/.."
# WITH_K8S=1: the Kubernetes binaries of the k8s app (a no-op once built; WITH_K8S=0 skips them).
WITH_K8S=${WITH_K8S:-1} scripts/setup.sh
RUN=$PWD/var/run; mkdir -p "$RUN"
export CELERY_BROKER_URL
CELERY_BROKER_URL=$(scripts/services.sh start redis)
export CELERY_RESULT_BACKEND=$CELERY_BROKER_URL
# API throttle counters shared by every web process: database 1 of the same Redis.
export NETARENA_CACHE_URL=${CELERY_BROKER_URL%/*}/1
export NETARENA_ORACLE_VAULT_DIR=$PWD/var/vault
PY=.venv/bin/python
# The agent's kubectl: the one on PATH, else the one setup.sh built into the binary cache.
if [ -z "${NETARENA_KUBECTL:-}" ] && ! command -v kubectl >/dev/null 2>&1; then
  kubectl=$($PY -c 'from apps.k8s.cluster.config import ClusterConfig; print(ClusterConfig().bin_dir / "kubectl")')
  if [ -x "$kubectl" ]; then export NETARENA_KUBECTL=$kubectl; fi
fi
# Every registered app unless NETARENA_DEMO_APPS names some (the registry is the only list).
export NETARENA_DEMO_APPS=${NETARENA_DEMO_APPS:-$(.venv/bin/python -c 'from evaluator.registry import app_ids; print(",".join(app_ids()))')}
export NETARENA_DEMO_QUERIES=${NETARENA_DEMO_QUERIES:-12}
# On this one machine, teams may register agents served on loopback (e.g. `manage.py serve_agent
# ... --port 8080`); a public site leaves NETARENA_TEAM_AGENT_NETWORKS empty.
export NETARENA_TEAM_AGENT_NETWORKS=${NETARENA_TEAM_AGENT_NETWORKS:-127.0.0.0/8}
# Held-out packs: a fresh copy of the repository's test packs for this run, stamped so that
# its digest is new. They are sealed when the round starts and spent when it closes (one fresh
# pack per app per round: docs/operating-rounds.md); a real site keeps its packs private.
if [ -z "${NETARENA_VARIANT_DIRS:-}" ]; then
  stamp=$(date -u +%Y%m%dT%H%M%SZ)
  rm -rf "$RUN/packs"; mkdir -p "$RUN/packs"
  cp -r tests/variant_packs/. "$RUN/packs/"
  find "$RUN/packs" -name __pycache__ -prune -exec rm -rf {} +
  for pack in "$RUN"/packs/*/*/; do echo "demo run $stamp" > "$pack/SEALED-FOR-DEMO-RUN"; done
  export NETARENA_VARIANT_DIRS=$RUN/packs
fi

cleanup() { [ -n "${PIDS:-}" ] && kill $PIDS 2>/dev/null || true; }
trap cleanup EXIT INT TERM

$PY manage.py migrate --noinput >/dev/null
PIDS=""
# -B: the periodic jobs (requeue episodes of dead workers, expire stale submissions) in-process.
# The worker runs as root because the episodes need it (route: Mininet's namespaces and
# bridges; k8s: the cluster's; MALT: a uid of its own per run of agent code), so Celery's
# "running the worker with superuser privileges" warning is silenced for it alone. Its advice,
# --uid, would break those episodes; the risk behind it, a root worker unpickling messages, is
# absent: the worker accepts JSON only (CELERY_ACCEPT_CONTENT; Celery refuses to start as root
# with pickle unless C_FORCE_ROOT is set, which the demo never sets). The filter matches that
# warning's first words only; any other warning still shows. --quiet: no start-up banner in
# the middle of the round's progress (the worker's errors go to its log file).
PYTHONWARNINGS="ignore:You're running the worker with superuser privileges" \
.venv/bin/celery --quiet -A config worker -B --schedule "$RUN/celerybeat-schedule" \
  -Q "$($PY -m evaluator.registry queues)" --concurrency 2 --loglevel WARNING \
  --logfile "$RUN/celery.log" &
WORKER=$!
PIDS="$PIDS $WORKER"
# Reference agents, each on its own loopback port (see `manage.py demo_round --help`).
rm -f "$RUN/agents.pids"
$PY manage.py demo_round --serve-agents --close --apps "$NETARENA_DEMO_APPS" \
  --queries "$NETARENA_DEMO_QUERIES" --pidfile "$RUN/agents.pids" &
ROUND=$!
PIDS="$PIDS $ROUND"
# The worker refuses to start when this host cannot run an app (its log says why, e.g. no
# cgroup for MALT's sandbox): stop then, instead of waiting for the round's timeout.
while kill -0 "$ROUND" 2>/dev/null; do
  if ! kill -0 "$WORKER" 2>/dev/null; then
    PIDS="$PIDS $(cat "$RUN/agents.pids" 2>/dev/null || true)"
    echo "demo: the Celery worker exited before the round finished; $RUN/celery.log says:" >&2
    tail -n 5 "$RUN/celery.log" >&2
    exit 1
  fi
  sleep 2
done
wait "$ROUND"
PIDS="$PIDS $(cat "$RUN/agents.pids")"
echo "demo: the leaderboard is at http://localhost:8000/ (Ctrl-C stops everything)"
echo "demo: e-mails (a team's finished submissions) are written to $RUN/celery.log"
# The development server is what the demo is meant to run; its "do not use in production"
# banner asks for a change the demo cannot make (docs/deploy.md runs gunicorn).
DJANGO_RUNSERVER_HIDE_WARNING=true $PY manage.py runserver 0.0.0.0:8000 --noreload
