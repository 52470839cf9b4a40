#!/usr/bin/env bash
# The project's test command (README: `make test`): set up, start Redis and PostgreSQL, lint,
# run the whole suite on SQLite, then the database tests again on PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_K8S=${WITH_K8S:-1} scripts/setup.sh

# The servers started here are stopped again on exit, so that runs never leave them behind.
trap 'scripts/services.sh stop postgres; scripts/services.sh stop redis' EXIT
export CELERY_BROKER_URL
CELERY_BROKER_URL=$(scripts/services.sh start redis)
export CELERY_RESULT_BACKEND=$CELERY_BROKER_URL
PG_URL=$(scripts/services.sh start postgres)

echo "== lint: ruff, mypy"
.venv/bin/ruff check .
.venv/bin/mypy .
for pack in tests/variant_packs/*/*/pack.py; do .venv/bin/mypy "$pack"; done

# Two pytest processes at once (one with NETARENA_TEST_SPLIT=0 or any pytest argument): the
# tests that use what the host shares -- root-only kernel state, Mininet, the embedded cluster,
# full rounds; they carry one of the markers in HOST -- run one after another in one process;
# every other test runs in the other, followed there by the database tests on PostgreSQL that
# are not host-wide. The host-wide database tests on PostgreSQL run last.
# Each process has its own test database and Redis database (tests/conftest.py).
HOST="root or netns or k8s or full_round"
# Every database test again, on the production database; the browser walks (page behaviour,
# the same queries as the page tests here) and full rounds (the MALT end-to-end test crosses
# the same storage path) run on SQLite only.
PG_TESTS="django_db and not full_round and not browser"
sqlite_failed() { echo "test suite failed on SQLite (exit $1)"; exit 1; }
pg_failed() { echo "database tests failed on PostgreSQL"; exit 1; }
if [ "${NETARENA_TEST_SPLIT:-1}" = 0 ] || [ $# -gt 0 ]; then
  echo "== tests on SQLite (whole suite)"
  status=0
  .venv/bin/pytest --durations=30 -m "not postgres" "$@" || status=$?
  # pytest exit 5 = no tests collected: that is a failure of this script too.
  [ $status -eq 0 ] || sqlite_failed $status
  echo "== database tests on PostgreSQL"
  DATABASE_URL=$PG_URL .venv/bin/pytest -m "$PG_TESTS" "$@" || pg_failed
else
  echo "== tests on SQLite (whole suite): the host-wide tests and the others in two processes"
  host_log=$(mktemp)
  .venv/bin/pytest --durations=30 -m "not postgres and ($HOST)" >"$host_log" 2>&1 &
  host_pid=$!
  status=0
  .venv/bin/pytest --durations=30 -m "not postgres and not ($HOST)" || status=$?
  pg_status=0
  if [ $status -eq 0 ]; then
    echo "== database tests on PostgreSQL, not host-wide (beside the host-wide tests)"
    DATABASE_URL=$PG_URL .venv/bin/pytest -m "$PG_TESTS and not ($HOST)" || pg_status=$?
  fi
  host_status=0
  wait "$host_pid" || host_status=$?
  echo "== the host-wide tests (marked: $HOST), run beside the above"
  cat "$host_log"; rm -f "$host_log"
  [ $status -ne 0 ] || status=$host_status
  [ $status -eq 0 ] || sqlite_failed $status
  [ $pg_status -eq 0 ] || pg_failed
  echo "== database tests on PostgreSQL, host-wide"
  DATABASE_URL=$PG_URL .venv/bin/pytest -m "$PG_TESTS and ($HOST)" || pg_failed
fi
