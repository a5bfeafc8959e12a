"""API test helpers: a client per role (session or token), and a small world around team `alpha`."""

import pytest
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from rest_framework.test import APIClient

from portal import services as portal_services
from tests.factories import JobFactory, NodeFactory, PoolFactory, QuotaFactory, ReservationFactory


@pytest.fixture
def api():
    """api(user) -> an APIClient logged in with a browser session; api(None) -> anonymous."""

    def make(user=None):
        client = APIClient()
        if user is not None:
            client.force_login(user)
        return client

    return make


@pytest.fixture
def token_client(platform_admin):
    """token_client(user) -> an APIClient sending a fresh API token of `user` (made by the admin)."""

    def make(user):
        _token, secret = portal_services.create_token(owner=user, name="tests", user=platform_admin)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
        return client

    return make


@pytest.fixture
def wsgi_keeps_the_test_connection():
    """For a test that calls the WSGI application itself, as Django's test client does: a request must not close the
    connection that holds the test's transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def pool(db):
    return PoolFactory(slug="train", name="Training", contracted_gpus=16)


@pytest.fixture
def world(team, other_team, pool, researcher, lead, outsider, platform_admin):
    """alpha and beta each have a quota, a reservation, a node and a running job in `train`."""
    node = NodeFactory(name="gpu-a", pool=pool)
    quotas = {t.slug: QuotaFactory(team=t, pool=pool, max_gpus=8) for t in (team, other_team)}
    reservations = {t.slug: ReservationFactory(team=t, pool=pool, gpus=4) for t in (team, other_team)}
    jobs = {
        team.slug: JobFactory(team=team, pool=pool, submitted_by=researcher, state="running", gpus=2, name="alpha-run"),
        other_team.slug: JobFactory(
            team=other_team, pool=pool, submitted_by=outsider, state="running", gpus=1, name="beta-run"
        ),
    }
    return {"node": node, "quotas": quotas, "reservations": reservations, "jobs": jobs}
