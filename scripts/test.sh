#!/usr/bin/env bash
# `make test`: start what the tests need (PostgreSQL, Redis, the local Kubernetes control plane), lint, run pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/inotify.sh
source scripts/inotify.sh
PY=.venv/bin/python
started=$(date +%s)

bash scripts/services.sh
if [ -z "${KUBECONFIG:-}" ]; then
  # Build the control plane and Kueue into the cache outside the repo when missing (a cold build takes a while);
  # the pytest session fixture starts the cluster, Kueue included, itself.
  ensure_inotify_instances
  $PY -m devcluster build
fi

echo "[test] ruff check + format check"
.venv/bin/ruff check .
.venv/bin/ruff format --check .

echo "[test] import contracts (the floors, docs/architecture.md)"
.venv/bin/lint-imports

echo "[test] helm lint (the chart, deploy/helm/reservoir)"
HELM=$($PY -m devcluster helm)  # built into the control plane's cache when missing
"$HELM" lint --strict deploy/helm/reservoir

echo "[test] pytest"
set +e
DJANGO_SETTINGS_MODULE=portal.settings.test $PY -m pytest "$@"
status=$?
set -e
echo "[test] finished in $(( $(date +%s) - started ))s"
exit $status
