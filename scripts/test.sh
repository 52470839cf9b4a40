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

# Two pytest-xdist workers by default (NETARENA_TEST_WORKERS): the tests that use the host's
# shared state (root, Mininet, the cluster, full rounds) run on one of them in turn, everything
# else on either (tests/conftest.py, HOST_MARKERS).
WORKERS=(-n "${NETARENA_TEST_WORKERS:-2}" --dist loadgroup)

echo "== tests on SQLite (whole suite)"
status=0
.venv/bin/pytest "${WORKERS[@]}" --durations=30 -m "not postgres" "$@" || status=$?
# pytest exit 5 = no tests collected: that is a failure of this script too.
[ $status -eq 0 ] || { echo "test suite failed on SQLite (exit $status)"; exit 1; }

echo "== database tests on PostgreSQL"
# Every database test again, on the production database; the browser walks (page behaviour,
# the same queries as the page tests here) and full rounds (the MALT end-to-end test crosses
# the same storage path) ran on SQLite above.
DATABASE_URL=$PG_URL .venv/bin/pytest "${WORKERS[@]}" -m "django_db and not full_round and not browser" "$@" || { echo "database tests failed on PostgreSQL"; exit 1; }
