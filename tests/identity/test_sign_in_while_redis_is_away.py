"""Signing in through the provider while Redis does not answer (docs/failures.md, "Redis away"): django-allauth
records each ID token it accepts in the cache, so the sign-in cannot finish. The user is told so, with a 503 and a
Retry-After, never a 500 or a traceback page; nothing is half made (no user, no session); and the same sign-in
started again once Redis answers goes through."""

import socket

import pytest
from django.test import Client

from portal.models import User
from tests.identity.test_id_token_checks import forger, sign_in_with  # noqa: F401  (the fixture)

pytestmark = pytest.mark.django_db


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _unreachable_cache(settings):
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{_closed_port()}/0",  # nothing listens there
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }


def test_a_sign_in_while_redis_is_away_answers_503_with_a_clear_message_and_makes_no_user(
    settings,
    forger,  # noqa: F811
):
    client = Client(raise_request_exception=False)
    kept = settings.CACHES
    _unreachable_cache(settings)
    answer = sign_in_with(client, forger, jti="id-token-1")

    assert answer.status_code == 503
    assert int(answer["Retry-After"]) > 0
    page = answer.content.decode()
    assert "Signing in is not possible right now" in page
    assert "Traceback" not in page
    assert 'href="/login/"' in page  # a link to sign in again, not a reload of a callback that cannot be sent twice
    assert 'http-equiv="refresh"' not in page
    assert not User.objects.filter(username="eve").exists()

    settings.CACHES = kept  # Redis is back: the same sign-in, started again, goes through
    again = sign_in_with(client, forger, jti="id-token-2")
    assert again.status_code == 302
    assert client.get("/").wsgi_request.user.username == "eve"


def test_control_an_error_that_is_not_the_cache_stays_a_500(settings, forger, monkeypatch):  # noqa: F811
    """The 503 is for an unreachable cache only: another failure in the same callback is still a server error."""
    from allauth.socialaccount.internal import jwtkit

    def broken(data):
        raise RuntimeError("a bug, not an outage")

    monkeypatch.setattr(jwtkit, "verify_jti", broken)  # where the cache is asked: raising something else
    client = Client(raise_request_exception=False)
    answer = sign_in_with(client, forger, jti="id-token-3")
    assert answer.status_code == 500
