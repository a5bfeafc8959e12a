"""The probes the Helm chart points Kubernetes at: /healthz (the process answers) and /readyz (PostgreSQL and the
cache's Redis answer); both without a login, never redirected to HTTPS in production, and /readyz says 503 naming
what is down (the cache too: sign-in through the provider needs it; the broker alone is not checked)."""

import time

import pytest
import redis
from allauth.socialaccount.internal import jwtkit

from tests.faultkit import database_down, free_port


def test_healthz_answers_without_a_login_and_without_the_database(client):
    with database_down():
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def redis_cache(url: str) -> dict:
    return {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url}}


@pytest.mark.django_db
def test_readyz_is_ready_when_postgresql_and_the_caches_redis_answer(client, settings):
    settings.CACHES = redis_cache(settings.REDIS_URL)  # the tests' Redis, which answers
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "checks": {"database": "ok", "cache": "ok"}}
    assert "no-cache" in response["Cache-Control"]


@pytest.mark.django_db
def test_readyz_is_not_ready_while_the_caches_redis_is_unreachable_even_with_the_broker_up(client, settings):
    """The cache on a Redis of its own (RESERVOIR_CACHE_URL), down while the broker's answers: sign-in through the
    provider fails, so the pod is not ready."""
    settings.CACHES = redis_cache(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"] == {"database": "ok", "cache": "unreachable"}


@pytest.mark.django_db
def test_readyz_stays_ready_while_only_the_broker_is_away(client, settings):
    """Serving needs the broker for nothing: what is accepted waits in the outbox (docs/failures.md)."""
    settings.CACHES = redis_cache(settings.REDIS_URL)
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # the broker: nothing listens there
    settings.CELERY_BROKER_URL = settings.REDIS_URL
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok", "cache": "ok"}


def test_why_redis_is_in_readiness_sign_in_through_the_provider_needs_it(settings):
    """docs/failures.md: every web pod leaves the Service while the cache's Redis is away, because django-allauth
    records each ID token it accepts in the cache and fails without it. Should that stop being true, /readyz could
    leave the cache out."""
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",  # nothing listens there
        }
    }
    claims = {"iss": "https://idp.example.com", "jti": "id-token-1", "exp": time.time() + 300}
    with pytest.raises(redis.ConnectionError):
        jwtkit.verify_jti(claims)


@pytest.mark.django_db(transaction=True)
def test_readyz_is_not_ready_while_postgresql_is_unreachable(client):
    with database_down():
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == "unreachable"
