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


def test_a_page_left_polling_when_its_session_ends_goes_to_the_sign_in_page_whole(client, researcher, settings):
    """A poll of a page left open (htmx) that meets the end of its session gets `HX-Redirect` to the sign-in page,
    and back to the page after it, instead of a 302 the browser would follow and htmx swap into the fragment."""
    settings.SESSION_COOKIE_AGE = 3600
    poll = {"HTTP_HX_REQUEST": "true", "HTTP_HX_CURRENT_URL": "http://testserver/jobs/?state=running"}
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        client.force_login(researcher)
        signed_in = client.get("/jobs/", **poll)
        assert signed_in.status_code == 200 and "HX-Redirect" not in signed_in
        clock.move_to(start + timedelta(hours=1, minutes=1))
        ended = client.get("/jobs/", **poll)
        assert ended.status_code == 200 and ended.content == b""
        assert ended["HX-Redirect"] == "/login/?next=%2Fjobs%2F%3Fstate%3Drunning"
        assert client.get("/jobs/").status_code == 302  # a whole page is redirected as before
    # A fragment from another site's page (no usable current URL) goes home after the sign-in.
    answer = client.get("/pools/", HTTP_HX_REQUEST="true")
    assert answer["HX-Redirect"] == "/login/?next=%2F"
