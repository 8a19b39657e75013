#!/usr/bin/env bash
# Start PostgreSQL for the Prefect API: data under STATE_DIR/postgres, listening on loopback only.
#
#   deploy/start-postgres.sh STATE_DIR [PORT]
#
# Installs Debian's `postgresql` when it is missing (root only), runs the server as the `postgres`
# user when started as root, creates the `prefect` role and database with the `pg_trgm` extension,
# and writes STATE_DIR/postgres.env (ports and names, never a password). Idempotent: a second call
# reuses the data folder and the running server. Prints the env file on stdout; logs go to stderr.
#
# Environment (all optional):
#   DOCMILL_PG_HOST      listen address (default 127.0.0.1). Keep loopback: only the Prefect server,
#                        on this same machine, talks to the database; workers talk to the Prefect API.
#   DOCMILL_PG_PASSWORD  password of the `prefect` role (scram-sha-256 on TCP); unset = trust, which
#                        lets any local user in: set it on shared machines
#   DOCMILL_PG_FAST=1    fsync/synchronous_commit off: throwaway test clusters only
set -euo pipefail

STATE_ARG=${1:?usage: deploy/start-postgres.sh STATE_DIR [PORT]}
mkdir -p "$STATE_ARG"
STATE=$(cd "$STATE_ARG" && pwd)
HOST=${DOCMILL_PG_HOST:-127.0.0.1}
DB=prefect
ROLE=prefect
PGDIR=$STATE/postgres
DATA=$PGDIR/data
ENV_FILE=$STATE/postgres.env
log() { echo "start-postgres: $*" >&2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
find_pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1; }

PGBIN=$(find_pg_bin)
if [ -z "$PGBIN" ]; then
  if [ "$(id -u)" != 0 ]; then
    log "PostgreSQL is not installed. Fix: sudo apt-get install -y postgresql (then run this again)"
    exit 1
  fi
  log "installing Debian's postgresql"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
  PGBIN=$(find_pg_bin)
fi

# As root, PostgreSQL refuses to run: use the `postgres` system user.
if [ "$(id -u)" = 0 ]; then
  as_pg() { runuser -u postgres -- "$@"; }
  if ! runuser -u postgres -- test -x "$STATE"; then
    log "the postgres user cannot enter $STATE. Fix: chmod o+x on it and its parents, or use a folder like /var/tmp/docmill"
    exit 1
  fi
  mkdir -p "$PGDIR"
  chown postgres: "$PGDIR"
else
  as_pg() { "$@"; }
  mkdir -p "$PGDIR"
fi
chmod 700 "$PGDIR"

PORT=${2:-}
if [ -z "$PORT" ] && [ -f "$ENV_FILE" ]; then
  PORT=$(sed -n 's/^DOCMILL_PG_PORT=//p' "$ENV_FILE")
fi
PORT=${PORT:-$(free_port)}

if [ ! -f "$DATA/PG_VERSION" ]; then
  log "initdb $DATA"
  if [ -n "${DOCMILL_PG_PASSWORD:-}" ]; then HOST_AUTH=scram-sha-256; else HOST_AUTH=trust; fi
  as_pg "$PGBIN/initdb" -D "$DATA" -U postgres -E UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host="$HOST_AUTH" >"$PGDIR/initdb.log" 2>&1 ||
    { log "initdb failed, see $PGDIR/initdb.log"; exit 1; }
fi

OPTS="-c listen_addresses=$HOST -c port=$PORT -c unix_socket_directories=$PGDIR -c max_connections=200"
if [ "${DOCMILL_PG_FAST:-0}" = 1 ]; then
  OPTS="$OPTS -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
fi
if as_pg "$PGBIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
  log "already running"
else
  log "starting on $HOST:$PORT"
  # setsid: the server outlives this script and is not killed with the caller's process group.
  as_pg setsid -w "$PGBIN/pg_ctl" -D "$DATA" -l "$PGDIR/server.log" -o "$OPTS" -w -t 60 start >&2 ||
    { log "server did not start, see $PGDIR/server.log"; exit 1; }
fi

psql_su() { as_pg "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PGDIR" -p "$PORT" -U postgres "$@"; }
if [ "$(psql_su -tAc "SELECT 1 FROM pg_roles WHERE rolname='$ROLE'")" != 1 ]; then
  if [ -n "${DOCMILL_PG_PASSWORD:-}" ]; then
    # \getenv keeps the password out of the process list and the logs.
    printf '%s\n' '\getenv pw DOCMILL_PG_PASSWORD' "CREATE ROLE $ROLE LOGIN PASSWORD :'pw';" | psql_su
  else
    psql_su -c "CREATE ROLE $ROLE LOGIN;"
  fi
fi
if [ "$(psql_su -tAc "SELECT 1 FROM pg_database WHERE datname='$DB'")" != 1 ]; then
  psql_su -c "CREATE DATABASE $DB OWNER $ROLE;"
fi
psql_su -d "$DB" -c "CREATE EXTENSION IF NOT EXISTS pg_trgm;"

cat >"$ENV_FILE" <<ENV
DOCMILL_PG_PORT=$PORT
DOCMILL_PG_PIDFILE=$DATA/postmaster.pid
PREFECT_SERVER_DATABASE_DRIVER=postgresql+asyncpg
PREFECT_SERVER_DATABASE_HOST=$HOST
PREFECT_SERVER_DATABASE_PORT=$PORT
PREFECT_SERVER_DATABASE_USER=$ROLE
PREFECT_SERVER_DATABASE_NAME=$DB
ENV
cat "$ENV_FILE"
