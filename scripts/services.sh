#!/usr/bin/env bash
# Install (when missing) and start PostgreSQL and Redis on loopback, idempotently.
# DATABASE_URL / REDIS_URL set in the environment mean "use that one": the local service is then left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
STATE_DIR=${RESERVOIR_STATE_DIR:-$PWD/.state}
mkdir -p "$STATE_DIR/logs" "$STATE_DIR/redis"

DB_USER=reservoir
DB_PASSWORD=reservoir
DB_NAME=reservoir

say() { printf '[services] %s\n' "$*"; }

install_packages() {
  local missing=()
  if [ -z "${DATABASE_URL:-}" ] && ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then missing+=(postgresql); fi
  if [ -z "${REDIS_URL:-}" ] && ! command -v redis-server >/dev/null 2>&1; then missing+=(redis-server); fi
  # Browser tests (tests/e2e) drive Debian's Chromium through Playwright; translations need gettext's msgfmt.
  if ! command -v chromium >/dev/null 2>&1; then missing+=(chromium); fi
  if ! command -v msgfmt >/dev/null 2>&1; then missing+=(gettext); fi
  # A CJK font, so that screenshots of the Chinese pages show text (users' own browsers bring theirs).
  if ! fc-list :lang=zh 2>/dev/null | grep -q .; then missing+=(fonts-wqy-zenhei); fi
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]} from Debian packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  # Prometheus for GPU telemetry (devcluster monitoring, tests); not started here: `devcluster monitoring up` does.
  if [ -z "${PROMETHEUS_URL:-}" ] && ! command -v prometheus >/dev/null 2>&1; then
    say "installing prometheus from Debian packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends prometheus >/dev/null
  fi
}

as_postgres() { runuser -u postgres -- "$@"; }

start_postgres() {
  if [ -n "${DATABASE_URL:-}" ]; then say "PostgreSQL: using DATABASE_URL"; return; fi
  local version
  version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
  if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -qx "$version main"; then
    say "creating PostgreSQL $version cluster 'main'"
    pg_createcluster "$version" main >/dev/null
  fi
  if ! pg_lsclusters -h | awk -v v="$version" '$1==v && $2=="main" {print $4}' | grep -q online; then
    say "starting PostgreSQL $version"
    pg_ctlcluster "$version" main start
  fi
  for _ in $(seq 1 30); do
    if as_postgres psql -qAtc 'select 1' >/dev/null 2>&1; then break; fi
    sleep 1
  done
  if [ "$(as_postgres psql -qAtc "select 1 from pg_roles where rolname='$DB_USER'")" != "1" ]; then
    say "creating role $DB_USER"
    as_postgres psql -qc "create role $DB_USER login createdb password '$DB_PASSWORD'"
  fi
  if [ "$(as_postgres psql -qAtc "select 1 from pg_database where datname='$DB_NAME'")" != "1" ]; then
    say "creating database $DB_NAME"
    as_postgres createdb -O "$DB_USER" "$DB_NAME"
  fi
  say "PostgreSQL ready on 127.0.0.1:$(pg_lsclusters -h | awk -v v="$version" '$1==v && $2=="main" {print $3}')"
}

start_redis() {
  if [ -n "${REDIS_URL:-}" ]; then say "Redis: using REDIS_URL"; return; fi
  if redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; then
    say "Redis already running on 127.0.0.1:6379"
    return
  fi
  say "starting Redis on 127.0.0.1:6379 (append-only file in $STATE_DIR/redis)"
  # Append-only persistence: task messages (and retries waiting for their countdown) survive a Redis restart.
  # fsync once a second: a crash of the machine may lose the last second, which convergence resends.
  redis-server --bind 127.0.0.1 --port 6379 --daemonize yes --dir "$STATE_DIR/redis" \
    --logfile "$STATE_DIR/logs/redis.log" --pidfile "$STATE_DIR/redis/redis.pid" --save "" \
    --appendonly yes --appendfsync everysec
  for _ in $(seq 1 20); do
    if redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; then return; fi
    sleep 0.5
  done
  say "Redis did not answer; see $STATE_DIR/logs/redis.log" >&2
  exit 1
}

install_packages
start_postgres
start_redis
