"""The probes the Helm chart points Kubernetes at: /healthz (the process answers) and /readyz (PostgreSQL and Redis
answer); both without a login, never redirected to HTTPS in production, and /readyz says 503 naming what is down."""

import pytest

from tests.faultkit import database_down, free_port


def test_healthz_answers_without_a_login_and_without_the_database(client):
    with database_down():
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_is_ready_when_postgresql_and_redis_answer(client):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "checks": {"database": "ok", "redis": "ok"}}
    assert "no-cache" in response["Cache-Control"]


@pytest.mark.django_db
def test_readyz_is_not_ready_while_redis_is_unreachable(client, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"] == {"database": "ok", "redis": "unreachable"}


@pytest.mark.django_db(transaction=True)
def test_readyz_is_not_ready_while_postgresql_is_unreachable(client):
    with database_down():
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == "unreachable"
