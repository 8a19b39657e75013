#!/usr/bin/env bash
# Stop everything the deploy/start-*.sh scripts started under STATE_DIR: workers (with their flow
# runs), the Prefect server, SeaweedFS, the emulator, then PostgreSQL. Safe to run twice.
#
#   deploy/stop-all.sh STATE_DIR
set -uo pipefail

STATE_ARG=${1:?usage: deploy/stop-all.sh STATE_DIR}
[ -d "$STATE_ARG" ] || exit 0
STATE=$(cd "$STATE_ARG" && pwd)

# Each service was started with setsid, so its pid is also its process-group id.
stop_group() {
  local pidfile=$1 pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

for f in "$STATE"/worker-*.pid; do [ -e "$f" ] && stop_group "$f"; done
for name in prefect-server s3 emulator; do stop_group "$STATE/$name.pid"; done

DATA=$STATE/postgres/data
if [ -f "$DATA/postmaster.pid" ]; then
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$PGBIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1
  else
    "$PGBIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1
  fi
  if [ -f "$DATA/postmaster.pid" ]; then
    kill -KILL "$(head -n1 "$DATA/postmaster.pid")" 2>/dev/null || true
  fi
fi
exit 0
