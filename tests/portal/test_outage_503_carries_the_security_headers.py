"""docs/security.md: every page and API answer carries the security headers and the Content-Security-Policy. The 503
that pages and the API answer while PostgreSQL is unreachable (docs/failures.md) used to be built outside the
middlewares that write them, and went out with none (nor HSTS in production)."""

import pytest
from django.test import Client

from tests.factories import UserFactory
from tests.faultkit import database_down

SECURITY_HEADERS = ("Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/pools/", "/api/v1/pools/"])
def test_the_503_of_a_database_outage_carries_the_security_headers(path):
    client = Client(raise_request_exception=False)
    client.force_login(UserFactory(username="zed"))
    with database_down():
        response = client.get(path)
    assert response.status_code == 503
    missing = [name for name in SECURITY_HEADERS if not response.has_header(name)]
    assert not missing, f"the 503 of {path} goes out without {missing}"
