#!/bin/sh
# First start: create the cluster, the role and the database; then run the server as postgres.
set -eu
mkdir -p "$PGDATA" /run/postgresql
chown -R postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile=$(mktemp) && printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile" && chown postgres "$pwfile"
  su postgres -s /bin/sh -c "initdb -D '$PGDATA' -U '$POSTGRES_USER' --pwfile='$pwfile' --auth-local=trust --auth-host=scram-sha-256" >/dev/null
  rm -f "$pwfile"
  echo "host all all 0.0.0.0/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
  su postgres -s /bin/sh -c "pg_ctl -D '$PGDATA' -w -o '-c listen_addresses=' start" >/dev/null
  su postgres -s /bin/sh -c "createdb -U '$POSTGRES_USER' '$POSTGRES_DB'"
  su postgres -s /bin/sh -c "pg_ctl -D '$PGDATA' -w stop" >/dev/null
fi
exec su postgres -s /bin/sh -c "exec postgres -D '$PGDATA' -c listen_addresses='*'"
