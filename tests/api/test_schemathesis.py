"""Property-based requests generated from the OpenAPI schema (schemathesis) against the WSGI application gunicorn
serves, as a platform admin with an API token (so through its token lane, portal/token_lane.py): no request, however
odd, may answer 5xx."""

import pytest
import schemathesis
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from portal import services as portal_services
from portal.wsgi import application

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.usefixtures("wsgi_keeps_the_test_connection"),
]

schema = schemathesis.from_dict(SchemaGenerator().get_schema(request=None, public=True), app=application)


@pytest.fixture
def admin_token(world, platform_admin):
    _token, secret = portal_services.create_token(owner=platform_admin, name="schemathesis", user=platform_admin)
    return secret


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_no_request_answers_a_server_error(case, admin_token):
    # Authenticated by token: the generated session cookie is dropped. (A session cookie holding a NUL character
    # fails in Django's database session store for every page alike; that is reported, not an API matter.)
    case.cookies = None
    response = case.call_wsgi(headers={"Authorization": f"Bearer {admin_token}"})
    case.validate_response(response, checks=(not_a_server_error,))
