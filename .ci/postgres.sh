#!/usr/bin/env bash
# Starts (or reuses) a private PostgreSQL cluster on 127.0.0.1 for the store's backend tests.
# Idempotent: a second call finds the running cluster and only prints its URL.
# stdout: exactly one line, the URL to export as REASEARCH_TEST_POSTGRES_URL; progress goes to stderr.
# Settings: REASEARCH_PG_DIR (default /tmp/reasearch-pg), REASEARCH_PG_PORT (default 54329).
set -euo pipefail

PG_DIR="${REASEARCH_PG_DIR:-/tmp/reasearch-pg}"
PG_PORT="${REASEARCH_PG_PORT:-54329}"
DB_NAME="reasearch_test"
log() { echo "postgres.sh: $*" >&2; }

find_bindir() {
    local d
    for d in /usr/lib/postgresql/*/bin; do
        [ -x "$d/initdb" ] && { echo "$d"; return 0; }
    done
    command -v initdb >/dev/null 2>&1 && { dirname "$(command -v initdb)"; return 0; }
    return 1
}

BIN="$(find_bindir || true)"
if [ -z "$BIN" ]; then
    log "installing PostgreSQL (apt-get)"
    if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >&2
    BIN="$(find_bindir)"
fi

# initdb refuses to run as root: run the cluster as the `postgres` user when we are root.
if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    as_pg() { runuser -u postgres -- "$@"; }
    PG_USER="postgres"
else
    as_pg() { "$@"; }
    PG_USER="$(id -un)"
fi

mkdir -p "$PG_DIR"
[ "$(id -u)" -eq 0 ] && chown postgres "$PG_DIR"
chmod 700 "$PG_DIR"
DATA="$PG_DIR/data"

if [ ! -f "$DATA/PG_VERSION" ]; then
    log "initdb in $DATA"
    as_pg "$BIN/initdb" -D "$DATA" -U "$PG_USER" --auth=trust -E UTF8 --no-instructions >&2
fi

if as_pg "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    log "cluster already running in $DATA"
else
    log "starting on 127.0.0.1:$PG_PORT"
    as_pg "$BIN/pg_ctl" -D "$DATA" -l "$PG_DIR/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_DIR" start >&2
fi

if ! as_pg "$BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U "$PG_USER" -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname='$DB_NAME'" | grep -q 1; then
    as_pg "$BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U "$PG_USER" "$DB_NAME" >&2
fi

echo "postgresql://$PG_USER@127.0.0.1:$PG_PORT/$DB_NAME"
