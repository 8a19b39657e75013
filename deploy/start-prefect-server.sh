#!/usr/bin/env bash
# Start the Prefect API server on the PostgreSQL of deploy/start-postgres.sh, then bootstrap the
# docmill work pool and the global concurrency limit that caps chunks across all machines.
#
#   deploy/start-prefect-server.sh STATE_DIR [PORT]
#
# Reads STATE_DIR/postgres.env, runs `prefect server start` in its own session (pid in
# STATE_DIR/prefect-server.pid, log in STATE_DIR/prefect-server.log), waits for /api/health, and
# writes STATE_DIR/prefect.env (PREFECT_API_URL for workers and clients). Prints it on stdout.
# The UI is told where its API is (PREFECT_UI_API_URL, for the host and port used here): without it
# the UI calls 127.0.0.1:4200 and shows "Can't connect to Server API" on any other port or machine.
#
# Environment (all optional):
#   DOCMILL_PREFECT_HOST        listen address (default 127.0.0.1)
#   DOCMILL_PREFECT_PUBLIC_HOST the name browsers and workers use for this machine (default: the
#                               listen address, or `hostname -f` when it listens on 0.0.0.0 / ::)
#   DOCMILL_PG_PASSWORD         password of the `prefect` database role, when one was set
#   DOCMILL_WORK_POOL           work pool name (default docmill)
#   DOCMILL_CHUNK_LIMIT         slots of the global concurrency limit (default 64: a brake, not a size; see deploy/README.md)
#   DOCMILL_CHUNK_LIMIT_NAME    its name (default docmill-chunks)
#   DOCMILL_SERVER_WAIT_SECONDS how long to wait for /api/health (default 120)
#   PREFECT_BIN                 the prefect executable (default: the repo's .venv, else PATH)
set -euo pipefail

STATE_ARG=${1:?usage: deploy/start-prefect-server.sh STATE_DIR [PORT]}
STATE=$(cd "$STATE_ARG" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
log() { echo "start-prefect-server: $*" >&2; }

if [ ! -f "$STATE/postgres.env" ]; then
  log "no $STATE/postgres.env. Fix: run deploy/start-postgres.sh $STATE first"
  exit 1
fi
PREFECT=${PREFECT_BIN:-$HERE/../.venv/bin/prefect}
[ -x "$PREFECT" ] || PREFECT=$(command -v prefect) || { log "prefect not found. Fix: pip install -e ."; exit 1; }
PYTHON=$(dirname "$PREFECT")/python
[ -x "$PYTHON" ] || PYTHON=python3

HOST=${DOCMILL_PREFECT_HOST:-127.0.0.1}
POOL=${DOCMILL_WORK_POOL:-docmill}
LIMIT=${DOCMILL_CHUNK_LIMIT:-64}
LIMIT_NAME=${DOCMILL_CHUNK_LIMIT_NAME:-docmill-chunks}
PORT=${2:-}
if [ -z "$PORT" ] && [ -f "$STATE/prefect.env" ]; then
  PORT=$(sed -n 's/^DOCMILL_PREFECT_PORT=//p' "$STATE/prefect.env")
fi
PORT=${PORT:-$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
case $HOST in
  0.0.0.0|::|"[::]") PUBLIC=${DOCMILL_PREFECT_PUBLIC_HOST:-$(hostname -f 2>/dev/null || hostname)}; LOCAL=127.0.0.1 ;;
  *) PUBLIC=${DOCMILL_PREFECT_PUBLIC_HOST:-$HOST}; LOCAL=$HOST ;;
esac
API_URL="http://$PUBLIC:$PORT/api"     # what workers, clients and the UI in a browser call
HEALTH_URL="http://$LOCAL:$PORT/api"   # what this script checks, on this machine

set -a
# shellcheck disable=SC1091
. "$STATE/postgres.env"
set +a
export PREFECT_HOME=$STATE/prefect-home
export PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1
[ -n "${DOCMILL_PG_PASSWORD:-}" ] && export PREFECT_SERVER_DATABASE_PASSWORD=$DOCMILL_PG_PASSWORD
# Coarse chunk tasks keep the event rate low; these batch sizes keep the in-memory broker's
# 10,000-message subscriber queues from overflowing under bursts (see deploy/README.md).
export PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE=${PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE:-200}
export PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_READ_BATCH_SIZE=${PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_READ_BATCH_SIZE:-200}
export PREFECT_SERVER_SERVICES_EVENT_PERSISTER_BATCH_SIZE=${PREFECT_SERVER_SERVICES_EVENT_PERSISTER_BATCH_SIZE:-500}
export PREFECT_SERVER_SERVICES_EVENT_PERSISTER_READ_BATCH_SIZE=${PREFECT_SERVER_SERVICES_EVENT_PERSISTER_READ_BATCH_SIZE:-500}
export PREFECT_SERVER_EVENTS_RETENTION_PERIOD=${PREFECT_SERVER_EVENTS_RETENTION_PERIOD:-P7D}
export PREFECT_LOGGING_LEVEL=${PREFECT_LOGGING_LEVEL:-WARNING}
# The UI (served by this process) calls the API at this URL from the user's browser.
export PREFECT_SERVER_API_HOST=$HOST PREFECT_SERVER_API_PORT=$PORT
export PREFECT_UI_API_URL=$API_URL
export PREFECT_UI_URL=${PREFECT_UI_URL:-http://$PUBLIC:$PORT}

healthy() { "$PYTHON" - "$HEALTH_URL/health" <<'PY'
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
PY
}

PIDFILE=$STATE/prefect-server.pid
if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null && healthy; then
  log "already running at $API_URL"
else
  log "starting at $API_URL"
  setsid "$PREFECT" server start --host "$HOST" --port "$PORT" \
    >"$STATE/prefect-server.log" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  WAIT=${DOCMILL_SERVER_WAIT_SECONDS:-120}
  start=$(date +%s)
  until healthy; do
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      log "the server exited; last lines of $STATE/prefect-server.log:"
      tail -n 20 "$STATE/prefect-server.log" >&2
      exit 1
    fi
    if [ $(($(date +%s) - start)) -ge "$WAIT" ]; then
      log "not healthy after ${WAIT}s, see $STATE/prefect-server.log"
      exit 1
    fi
    sleep 0.5
  done
  log "healthy after $(($(date +%s) - start))s"
fi

# Bootstrap, idempotent: the process work pool and the chunk limit (strict=True in the flows
# fails loudly if this limit is missing, instead of silently not limiting).
export PREFECT_API_URL=$HEALTH_URL
"$PYTHON" - "$POOL" "$LIMIT_NAME" "$LIMIT" <<'PY' >&2
import asyncio, sys
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.exceptions import ObjectAlreadyExists

pool, name, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])

async def main() -> None:
    async with get_client() as client:
        try:
            await client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
            print(f"created work pool {pool!r} (process)")
        except ObjectAlreadyExists:
            print(f"work pool {pool!r} exists")
        await client.upsert_global_concurrency_limit_by_name(name=name, limit=limit)
        print(f"global concurrency limit {name!r} = {limit}")

asyncio.run(main())
PY

cat >"$STATE/prefect.env" <<ENV
DOCMILL_PREFECT_PORT=$PORT
PREFECT_API_URL=$API_URL
PREFECT_UI_URL=$PREFECT_UI_URL
DOCMILL_WORK_POOL=$POOL
DOCMILL_CHUNK_LIMIT_NAME=$LIMIT_NAME
ENV
cat "$STATE/prefect.env"
