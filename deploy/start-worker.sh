#!/usr/bin/env bash
# Start one Prefect process worker on the docmill work pool. Run it once per machine (or several
# times on one machine with different names). Each flow run becomes a subprocess of this worker.
#
#   deploy/start-worker.sh STATE_DIR NAME [LIMIT]
#
# PREFECT_API_URL comes from the environment, else from STATE_DIR/prefect.env (written by
# deploy/start-prefect-server.sh on the server machine; copy it, or set PREFECT_API_URL).
# LIMIT (default 2) caps the flow runs this worker runs at once (`prefect worker start --limit`).
# Pid in STATE_DIR/worker-NAME.pid, log in STATE_DIR/worker-NAME.log. Prints KEY=VALUE lines.
#
# Environment (all optional):
#   DOCMILL_WORK_POOL            pool name (default docmill)
#   PREFECT_WORKER_QUERY_SECONDS how often the worker polls for runs (Prefect's default 10)
#   PREFECT_BIN                  the prefect executable (default: the repo's .venv, else PATH)
#   DOCMILL_*, AWS_*             passed through to the flow runs (store, S3 endpoint, API base URL)
set -euo pipefail

STATE_ARG=${1:?usage: deploy/start-worker.sh STATE_DIR NAME [LIMIT]}
NAME=${2:?usage: deploy/start-worker.sh STATE_DIR NAME [LIMIT]}
LIMIT=${3:-2}
mkdir -p "$STATE_ARG"
STATE=$(cd "$STATE_ARG" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
log() { echo "start-worker: $*" >&2; }
case $NAME in *[!A-Za-z0-9_-]*) log "NAME may use letters, digits, - and _ only"; exit 1 ;; esac

PREFECT=${PREFECT_BIN:-$HERE/../.venv/bin/prefect}
[ -x "$PREFECT" ] || PREFECT=$(command -v prefect) || { log "prefect not found. Fix: pip install -e ."; exit 1; }
if [ -z "${PREFECT_API_URL:-}" ]; then
  [ -f "$STATE/prefect.env" ] || { log "set PREFECT_API_URL or run deploy/start-prefect-server.sh $STATE"; exit 1; }
  PREFECT_API_URL=$(sed -n 's/^PREFECT_API_URL=//p' "$STATE/prefect.env")
fi
export PREFECT_API_URL
export PREFECT_HOME=${PREFECT_HOME:-$STATE/worker-$NAME-home}
export PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1
export PREFECT_LOGGING_LEVEL=${PREFECT_LOGGING_LEVEL:-WARNING}
POOL=${DOCMILL_WORK_POOL:-docmill}

PIDFILE=$STATE/worker-$NAME.pid
if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  log "worker $NAME already running (pid $(cat "$PIDFILE"))"
else
  # setsid: the worker and its flow-run subprocesses form one process group, stopped together.
  setsid "$PREFECT" worker start --pool "$POOL" --type process --name "$NAME" --limit "$LIMIT" \
    >"$STATE/worker-$NAME.log" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  log "worker $NAME started (pid $!) on pool $POOL, limit $LIMIT"
fi
echo "DOCMILL_WORKER_PID=$(cat "$PIDFILE")"
echo "DOCMILL_WORKER_LOG=$STATE/worker-$NAME.log"
