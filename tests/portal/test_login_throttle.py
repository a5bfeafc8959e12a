"""Login throttling (django-axes, issue 15): after the configured number of failures for one username from one
address, that pair is refused, even with the right password, until the cool-off has passed; other users and other
addresses are not locked with it; a success resets the count."""

from datetime import timedelta

import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone

PASSWORD = "pw-for-tests"


def log_in(client, username, password, address="10.0.0.1", **extra):
    return client.post(
        reverse("portal:login"), {"username": username, "password": password}, REMOTE_ADDR=address, **extra
    )


@pytest.fixture
def limit(settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)
    return 3


def test_a_username_is_locked_out_from_an_address_after_the_failure_limit(client, researcher, lead, limit):
    for _ in range(limit - 1):
        assert log_in(client, "rita", "wrong").status_code == 200  # the form again, with its error
    locked = log_in(client, "rita", "wrong")
    assert locked.status_code == 429
    assert b"Too many failed log-ins" in locked.content and b"15 minutes" in locked.content
    # Even the right password is refused now, from that address ...
    assert log_in(client, "rita", PASSWORD).status_code == 429
    # ... but another user from that address, and the same user from elsewhere, may log in.
    assert log_in(client, "leo", PASSWORD).status_code == 302
    client.logout()
    assert log_in(client, "rita", PASSWORD, address="10.0.0.2").status_code == 302


def test_the_lockout_ends_after_the_cool_off(client, researcher, limit):
    for _ in range(limit):
        log_in(client, "rita", "wrong")
    assert log_in(client, "rita", PASSWORD).status_code == 429
    with time_machine.travel(timezone.now() + timedelta(minutes=16)):
        assert log_in(client, "rita", PASSWORD).status_code == 302


def test_a_success_resets_the_count(client, researcher, limit):
    for _ in range(limit - 1):
        log_in(client, "rita", "wrong")
    assert log_in(client, "rita", PASSWORD).status_code == 302
    client.logout()
    for _ in range(limit - 1):
        assert log_in(client, "rita", "wrong").status_code == 200


def test_behind_a_trusted_proxy_the_forwarded_address_counts(client, researcher, limit, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    for n in range(limit):
        # The proxy's own address is always 10.9.9.9; the client spoofs a different left-most entry each time.
        log_in(client, "rita", "wrong", address="10.9.9.9", HTTP_X_FORWARDED_FOR=f"1.1.1.{n}, 203.0.113.7")
    forwarded = {"HTTP_X_FORWARDED_FOR": "9.9.9.9, 203.0.113.7"}
    assert log_in(client, "rita", PASSWORD, address="10.9.9.9", **forwarded).status_code == 429
    other = {"HTTP_X_FORWARDED_FOR": "203.0.113.8"}
    assert log_in(client, "rita", PASSWORD, address="10.9.9.9", **other).status_code == 302
