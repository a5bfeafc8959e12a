"""A forged session cookie is treated as no session, never as a server error."""

import pytest
from django.urls import reverse


@pytest.mark.parametrize("cookie", ["abc\x00def", "../../etc/passwd", "x" * 500, "UPPER-case-key-1234"])
def test_forged_session_cookie_is_ignored(client, db, cookie):
    response = client.get(reverse("portal:home"), HTTP_COOKIE=f"sessionid={cookie}")
    assert response.status_code == 302  # treated as logged out, redirected to the login page
    assert client.get(reverse("portal:login")).status_code == 200


def test_real_sessions_still_work(client, researcher):
    client.force_login(researcher)
    assert client.get(reverse("portal:home")).status_code == 200


@pytest.mark.django_db
def test_the_store_never_sends_a_forged_key_to_the_database():
    from django.contrib.sessions.backends.db import SessionStore as DjangoStore

    from portal.sessions import SessionStore

    forged = "abcdefgh\x00ijklmnop"
    with pytest.raises(ValueError):  # what Django's own store does: PostgreSQL refuses the NUL
        DjangoStore(forged).load()
    assert SessionStore(forged).load() == {}
    assert SessionStore(forged).session_key is None
