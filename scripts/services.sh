#!/usr/bin/env bash
# Start (or stop) the local servers the site and the tests need, under var/run:
#   scripts/services.sh start redis|postgres    scripts/services.sh stop redis|postgres
# Redis listens on 127.0.0.1:${NETARENA_REDIS_PORT:-6390}; PostgreSQL on
# 127.0.0.1:${NETARENA_PG_PORT:-5440} with a trust-auth cluster owned by the postgres user.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${NETARENA_RUN_DIR:-$PWD/var/run}
mkdir -p "$RUN"
REDIS_PORT=${NETARENA_REDIS_PORT:-6390}
PG_PORT=${NETARENA_PG_PORT:-5440}
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)

wait_for() {  # wait_for SECONDS COMMAND...: poll until the command succeeds
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { echo "services: timed out waiting for: $*" >&2; return 1; }
    sleep 0.2
  done
}

case "${1:-} ${2:-}" in
  "start redis")
    if ! redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then
      redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --daemonize yes --save "" --appendonly no \
        --dir "$RUN" --pidfile "$RUN/redis.pid" --logfile "$RUN/redis.log"
      wait_for 20 redis-cli -p "$REDIS_PORT" ping
    fi
    echo "redis://127.0.0.1:$REDIS_PORT/0" ;;
  "stop redis")
    redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true ;;
  "start postgres")
    PGDATA=$RUN/pgdata
    if [ ! -f "$PGDATA/PG_VERSION" ]; then
      mkdir -p "$PGDATA"; chown postgres:postgres "$PGDATA" "$RUN"
      su postgres -s /bin/sh -c "$PG_BIN/initdb -D '$PGDATA' -A trust -U postgres" >/dev/null
    fi
    chown postgres:postgres "$RUN"
    if ! su postgres -s /bin/sh -c "$PG_BIN/pg_ctl -D '$PGDATA' status" >/dev/null 2>&1; then
      su postgres -s /bin/sh -c "$PG_BIN/pg_ctl -D '$PGDATA' -l '$RUN/postgres.log' -w -o '-p $PG_PORT -k $RUN -c listen_addresses=127.0.0.1 -c fsync=off' start" >/dev/null
    fi
    wait_for 30 "$PG_BIN/pg_isready" -h 127.0.0.1 -p "$PG_PORT"
    echo "postgres://postgres@127.0.0.1:$PG_PORT/netarena" ;;
  "stop postgres")
    su postgres -s /bin/sh -c "$PG_BIN/pg_ctl -D '$RUN/pgdata' -m fast stop" >/dev/null 2>&1 || true ;;
  *)
    echo "usage: $0 start|stop redis|postgres" >&2; exit 2 ;;
esac
