#!/usr/bin/env bash
# Stop everything the deploy/start-*.sh scripts started under STATE_DIR: workers (with their flow
# runs), the Prefect server, SeaweedFS, the emulator, then PostgreSQL. Safe to run twice.
#
#   deploy/stop-all.sh STATE_DIR
set -uo pipefail

STATE_ARG=${1:?usage: deploy/stop-all.sh STATE_DIR}
[ -d "$STATE_ARG" ] || exit 0
STATE=$(cd "$STATE_ARG" && pwd)

# Each service was started with setsid, so its pid is also its process-group id. Signal every
# group at once (workers take their flow runs with them), give them 5 s, then SIGKILL the rest.
PIDS=()
for f in "$STATE"/worker-*.pid "$STATE"/prefect-server.pid "$STATE"/s3.pid "$STATE"/emulator.pid; do
  [ -f "$f" ] || continue
  pid=$(cat "$f")
  rm -f "$f"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || continue
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
  PIDS+=("$pid")
done
for _ in $(seq 1 50); do
  alive=0
  for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
  [ $alive = 0 ] && break
  sleep 0.1
done
for pid in "${PIDS[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done

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
