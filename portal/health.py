"""Health probes for process supervisors and Kubernetes: `/healthz` says the process answers (liveness: nothing
else is touched, so a database outage never gets the web pods restarted), `/readyz` says PostgreSQL and the cache's
Redis answer now (readiness: a pod that cannot reach them is taken out of the Service until they come back).

The cache is in readiness although every pod shares it, so its outage takes them all out: sign-in through the
provider needs it (django-allauth keeps the ID tokens it accepted in the cache, and cannot finish a sign-in without
it), so a pod without it cannot serve everyone. The cache is `RESERVOIR_CACHE_URL`, by default the broker's Redis
(`REDIS_URL`); the broker alone is not checked: serving needs it for nothing, what is accepted while it is away
waits in the outbox (docs/failures.md).

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


def cache_redis_url() -> str | None:
    """The Redis the default cache writes to (the first of several servers), or None for a cache that is not Redis
    (the tests' in-memory one)."""
    cache = settings.CACHES["default"]
    if cache["BACKEND"] != "django.core.cache.backends.redis.RedisCache":
        return None
    location = cache["LOCATION"]
    servers = location.split(",") if isinstance(location, str) else list(location)
    return servers[0].strip()


def _cache() -> str | None:
    url = cache_redis_url()
    if url is None:
        return None
    client = redis.Redis.from_url(
        url, socket_connect_timeout=CHECK_TIMEOUT_SECONDS, socket_timeout=CHECK_TIMEOUT_SECONDS
    )
    try:
        client.ping()
    except Exception as error:  # noqa: BLE001 - as above
        log.warning("readyz: the cache's Redis does not answer: %s", type(error).__name__)
        return "unreachable"
    finally:
        client.close()
    return None


@never_cache
def readyz(request):
    """Readiness: 200 when PostgreSQL and the cache's Redis both answer, else 503 naming which does not."""
    problems = {name: problem for name, check in (("database", _database), ("cache", _cache)) if (problem := check())}
    checks = {name: problems.get(name, "ok") for name in ("database", "cache")}
    status = 503 if problems else 200
    return JsonResponse({"status": "ready" if not problems else "not ready", "checks": checks}, status=status)
