"""Health probes for process supervisors and Kubernetes: `/healthz` says the process answers (liveness: nothing
else is touched, so a database outage never gets the web pods restarted), `/readyz` says PostgreSQL and Redis
answer now (readiness: a pod that cannot reach them is taken out of the Service until they come back).

Redis is in readiness although every pod shares it, so its outage takes them all out: sign-in through the provider
needs it (django-allauth keeps the ID tokens it accepted in the cache, and fails with a 500 without it), so a pod
without Redis cannot serve everyone. What was accepted before waits in the outbox (docs/failures.md).

Both are plain GETs with no login, never throttled (only writes are), exempt from the HTTPS redirect (probes talk
plain HTTP to the pod) and cheap: one `SELECT 1` and one Redis PING, each bounded by a short timeout (Redis's
below; PostgreSQL's are the connection options of portal/settings/base.py: 2 s to connect, 10 s for a kept
connection whose server went silent), so a silent dependency never holds the workers that answer /healthz."""

import logging

import redis
from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache

log = logging.getLogger(__name__)

# A probe that takes longer than this is as good as a failure (the chart's probes time out after 3 s).
CHECK_TIMEOUT_SECONDS = 2


@never_cache
def healthz(request):
    """Liveness: answers without touching the database or Redis."""
    return JsonResponse({"status": "ok"})


def _database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as error:  # noqa: BLE001 - any failure means "not ready"; the kind is logged, not shown
        connection.close()  # the next probe starts from a fresh connection
        log.warning("readyz: PostgreSQL does not answer: %s", type(error).__name__)
        return "unreachable"
    return None


def _redis() -> str | None:
    client = redis.Redis.from_url(
        settings.REDIS_URL, socket_connect_timeout=CHECK_TIMEOUT_SECONDS, socket_timeout=CHECK_TIMEOUT_SECONDS
    )
    try:
        client.ping()
    except Exception as error:  # noqa: BLE001 - as above
        log.warning("readyz: Redis does not answer: %s", type(error).__name__)
        return "unreachable"
    finally:
        client.close()
    return None


@never_cache
def readyz(request):
    """Readiness: 200 when PostgreSQL and Redis (the broker) both answer, else 503 naming which does not."""
    problems = {name: problem for name, check in (("database", _database), ("redis", _redis)) if (problem := check())}
    checks = {name: problems.get(name, "ok") for name in ("database", "redis")}
    status = 503 if problems else 200
    return JsonResponse({"status": "ready" if not problems else "not ready", "checks": checks}, status=status)
