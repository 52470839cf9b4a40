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
# Every registered app unless NETARENA_DEMO_APPS names some (the registry is the only list).
export NETARENA_DEMO_APPS=${NETARENA_DEMO_APPS:-$(.venv/bin/python -c 'from evaluator.registry import app_ids; print(",".join(app_ids()))')}
export NETARENA_DEMO_QUERIES=${NETARENA_DEMO_QUERIES:-12}
# On this one machine, teams may register agents served on loopback (e.g. `manage.py serve_agent
# ... --port 8080`); a public site leaves NETARENA_TEAM_AGENT_NETWORKS empty.
export NETARENA_TEAM_AGENT_NETWORKS=${NETARENA_TEAM_AGENT_NETWORKS:-127.0.0.0/8}
PY=.venv/bin/python

cleanup() { [ -n "${PIDS:-}" ] && kill $PIDS 2>/dev/null || true; }
trap cleanup EXIT INT TERM

$PY manage.py migrate --noinput >/dev/null
PIDS=""
# -B: the periodic jobs (requeue episodes of dead workers, expire stale submissions) in-process
.venv/bin/celery -A config worker -B --schedule "$RUN/celerybeat-schedule" \
  -Q "$($PY -m evaluator.registry queues)" --concurrency 2 --loglevel WARNING \
  --logfile "$RUN/celery.log" &
PIDS="$PIDS $!"
# Reference agents, each on its own loopback port (see `manage.py demo_round --help`).
$PY manage.py demo_round --serve-agents --apps "$NETARENA_DEMO_APPS" --queries "$NETARENA_DEMO_QUERIES" \
  --pidfile "$RUN/agents.pids"
PIDS="$PIDS $(cat "$RUN/agents.pids")"
echo "demo: the leaderboard is at http://localhost:8000/ (Ctrl-C stops everything)"
$PY manage.py runserver 0.0.0.0:8000 --noreload
