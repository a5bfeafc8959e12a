"""A browser session lasts `SESSION_COOKIE_AGE` from its sign-in (portal.middleware.SessionLifetimeMiddleware), not
from its last save: Django's own expiry slides each time the session is saved, and a signed-in user who opens the
provider's sign-in URL has allauth save a state into it."""

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

pytestmark = pytest.mark.django_db


def _signed_in(client):
    return client.get("/").wsgi_request.user.is_authenticated


def test_a_session_saved_every_hour_still_ends_twelve_hours_after_its_sign_in(client, researcher, settings):
    settings.SESSION_COOKIE_AGE = 12 * 3600
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        client.force_login(researcher)
        for hours in range(1, 12):
            clock.move_to(start + timedelta(hours=hours))
            session = client.session
            session["touched"] = hours  # saved: Django's expiry moves 12 hours on from now
            session.save()
            assert _signed_in(client)
        clock.move_to(start + timedelta(hours=12, minutes=1))
        session = client.session
        assert session.get_expiry_age() > 0  # Django alone would keep it
        assert not _signed_in(client)
        answer = client.get("/jobs/")
        assert answer.status_code == 302 and answer["Location"].startswith("/login/")


def test_signing_in_again_counts_from_the_new_sign_in(client, researcher, settings):
    settings.SESSION_COOKIE_AGE = 12 * 3600
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        client.force_login(researcher)
        clock.move_to(start + timedelta(hours=11))
        client.force_login(researcher)
        clock.move_to(start + timedelta(hours=13))
        assert _signed_in(client)
