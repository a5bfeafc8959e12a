#!/usr/bin/env bash
# `make dev`: PostgreSQL, Redis, the local Kubernetes control plane with demo GPU pools, migrations and demo data,
# then the web server, two Celery workers (the cluster's queue, and the others), Celery beat, the outbox dispatcher
# and the cluster sync, each in the background with a pid file and a log under .state/. `make stop` stops them;
# `make status` tells what runs.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/inotify.sh
source scripts/inotify.sh
STATE_DIR=${RESERVOIR_STATE_DIR:-$PWD/.state}
PIDS="$STATE_DIR/pids"
LOGS="$STATE_DIR/logs"
PORT=${RESERVOIR_PORT:-8000}
PY=.venv/bin/python
mkdir -p "$PIDS" "$LOGS"
export DJANGO_SETTINGS_MODULE=${DJANGO_SETTINGS_MODULE:-portal.settings.dev}

PROCESSES=(web worker cluster-worker beat outbox)

say() { printf '[dev] %s\n' "$*"; }

running() { [ -f "$PIDS/$1.pid" ] && kill -0 "$(cat "$PIDS/$1.pid")" 2>/dev/null; }

start() {
  local name=$1; shift
  if running "$name"; then say "$name already running (pid $(cat "$PIDS/$name.pid"))"; return; fi
  # Supervised: a process that exits (e.g. the Celery worker on kombu's unrecoverable error after a Redis restart)
  # is started again a second later; `make stop` ends the process group, supervisor included.
  setsid bash scripts/supervise.sh "$name" "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! >"$PIDS/$name.pid"
  say "started $name (pid $!, log .state/logs/$name.log)"
}

stop_all() {
  for name in "${PROCESSES[@]}" sync; do
    if running "$name"; then
      # The supervisor alone: it passes TERM on to its command once (sent to the whole group as well, the command
      # got it twice, and Celery beat's shutdown handler, entered again while it held its lock, could deadlock).
      kill -TERM "$(cat "$PIDS/$name.pid")" 2>/dev/null || true
      say "stopped $name"
    fi
    rm -f "$PIDS/$name.pid"
  done
  $PY -m devcluster hydra down >/dev/null 2>&1 || true
  if [ -z "${KUBECONFIG:-}" ]; then $PY -m devcluster down || true; fi
}

status_all() {
  for name in "${PROCESSES[@]}" sync; do
    if running "$name"; then say "$name: running (pid $(cat "$PIDS/$name.pid"))"; else say "$name: stopped"; fi
  done
  if [ -z "${KUBECONFIG:-}" ]; then $PY -m devcluster status || true; fi
}

case "${1:-up}" in
  stop) stop_all; exit 0 ;;
  status) status_all; exit 0 ;;
esac

bash scripts/services.sh

if [ -z "${KUBECONFIG:-}" ]; then
  say "local Kubernetes control plane and Kueue (built on first use; a cold build takes 10-30 minutes)"
  ensure_inotify_instances
  $PY -m devcluster up
  eval "$($PY -m devcluster env)"
  if [ -z "${PROMETHEUS_URL:-}" ]; then
    # Prometheus scraping the fake DCGM exporter (and the portal's /metrics); RESERVOIR_DCGM_HOT picks a hot GPU.
    say "Prometheus and the DCGM exporter of the local GPUs"
    $PY -m devcluster monitoring up --scrape-interval 5 --portal-target "127.0.0.1:$PORT" \
      --hot "${RESERVOIR_DCGM_HOT:-gpu-node-11/7}"
    eval "$($PY -m devcluster monitoring env)"
  fi
else
  say "using the cluster of KUBECONFIG=$KUBECONFIG"
fi
export KUBECONFIG
export PROMETHEUS_URL=${PROMETHEUS_URL:-}

$PY manage.py migrate --noinput
$PY manage.py seed_demo | tee "$STATE_DIR/logins.txt"
# Team namespaces and Kueue's queues now, so the demo jobs find them (the beat keeps them so every minute).
$PY manage.py reconcile_cluster || say "the cluster could not be reconciled yet; the beat retries every minute"

# The demo OpenID Connect provider (ory/hydra, built on first use; RESERVOIR_NO_SSO=1 skips it, and a configured
# RESERVOIR_OIDC_ISSUER is used instead). The demo passwords keep working beside it.
if [ -z "${RESERVOIR_OIDC_ISSUER:-}" ] && [ -z "${RESERVOIR_NO_SSO:-}" ]; then
  say "the demo OpenID Connect provider (ory/hydra; a cold build takes a few minutes)"
  if sso_env=$($PY -m devcluster hydra up --portal-url "http://127.0.0.1:$PORT"); then
    eval "$sso_env"
    export RESERVOIR_LOCAL_PASSWORD_LOGIN=${RESERVOIR_LOCAL_PASSWORD_LOGIN:-true}
    $PY -m devcluster hydra logins | tee -a "$STATE_DIR/logins.txt"
  else
    say "the demo provider did not start (see .state/devcluster/logs/hydra.log); password logins only"
  fi
fi

# Django's development server serves each request in a thread of its own, so a connection kept for reuse would never be
# reused: it stays open until Python's collector frees its thread's objects, and a burst of requests took every
# connection PostgreSQL allows (the workers and the sync then failed too). Closed after each request instead.
start web env DATABASE_CONN_MAX_AGE=0 $PY manage.py runserver "127.0.0.1:$PORT" --noreload
start worker .venv/bin/celery -A portal worker -Q default,billing -c 2 --loglevel=INFO
# The cluster's tasks wait on the API server: a thread pool, as the chart's cluster worker (docs/architecture.md).
start cluster-worker .venv/bin/celery -A portal worker -Q cluster -P threads -c 8 -n cluster@%h --loglevel=INFO
start beat .venv/bin/celery -A portal beat --loglevel=INFO --schedule "$STATE_DIR/celerybeat-schedule"
# Sends task messages that a committed change left in the outbox while Redis was unreachable (portal/outbox.py).
start outbox $PY manage.py dispatch_outbox
if $PY manage.py help sync_cluster >/dev/null 2>&1; then
  PROCESSES+=(sync)
  start sync $PY manage.py sync_cluster
fi

# A demo team volume (llm/datasets on the local cluster's local-data class); the worker creates its claim.
if [ -z "${RESERVOIR_NO_DEMO_JOBS:-}" ]; then
  $PY manage.py demo_volume || say "demo volume not registered (see above)"
fi

# A few demo jobs (on an empty job table, or on a cluster that has none of the jobs: the local one starts empty),
# sent to the cluster by the worker just started.
if [ -z "${RESERVOIR_NO_DEMO_JOBS:-}" ]; then
  $PY manage.py demo_jobs --new-cluster || say "demo jobs not submitted (see above)"
fi

# Meter what is already there now rather than at the next ten-minute beat.
$PY manage.py shell -c "from billing.tasks import refresh_usage; refresh_usage.delay()" >/dev/null 2>&1 || true

for _ in $(seq 1 60); do
  if curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1; then break; fi
  sleep 0.5
done
curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null || { say "web server did not answer; see .state/logs/web.log"; exit 1; }

echo
say "Reservoir is up: http://127.0.0.1:$PORT/  (admin: http://127.0.0.1:$PORT/admin/, API: /api/docs/)"
say "KUBECONFIG=$KUBECONFIG"
say "PROMETHEUS_URL=${PROMETHEUS_URL:-(none: no GPU telemetry)}"
say "logins: see above (also in .state/logins.txt); stop everything with 'make stop'"
