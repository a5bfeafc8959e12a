"""The WSGI application's token lane (portal/token_lane.py): an API request with a token skips the browser-only
middleware and answers as the whole chain does; every other request takes the whole chain."""

import json

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import RequestFactory

from portal import services as portal_services
from portal import token_lane
from portal.models import AuditEntry
from portal.wsgi import application

pytestmark = pytest.mark.usefixtures("wsgi_keeps_the_test_connection")


class Counting:
    """Stands in for one of the application's handlers and counts the requests it is given."""

    def __init__(self, handler):
        self.handler, self.calls = handler, 0

    def __call__(self, environ, start_response):
        self.calls += 1
        return self.handler(environ, start_response)


@pytest.fixture
def lanes(monkeypatch):
    lane, full = Counting(application.lane), Counting(application.full)
    monkeypatch.setattr(application, "lane", lane)
    monkeypatch.setattr(application, "full", full)
    return lane, full


def call(app, method, path, *, body=b"", **headers):
    """(status, headers, body) of `app` for a request built as Django's test client builds it."""
    request = RequestFactory().generic(method, path, data=body, content_type="application/json", **headers)
    answer = {}

    def start_response(status, response_headers, exc_info=None):
        answer["status"], answer["headers"] = int(status.split()[0]), dict(response_headers)

    result = app(request.environ, start_response)
    try:
        content = b"".join(result)
    finally:
        result.close()
    return answer["status"], answer["headers"], content


@pytest.fixture
def admin_secret(world, platform_admin):
    _token, secret = portal_services.create_token(owner=platform_admin, name="lane", user=platform_admin)
    return secret


@pytest.mark.parametrize(
    ("path", "authorization", "expected"),
    [
        ("/api/v1/jobs/", "Bearer rsv_abc", True),
        ("/api/v1/jobs/", "token rsv_abc", True),
        ("/api/v1/jobs/", "  BEARER rsv_abc", True),
        ("/api/v1/jobs/", "Basic YWxpY2U6c2VjcmV0", False),
        ("/api/v1/jobs/", "", False),
        ("/api/v1/jobs/", "Bearertoken", False),
        ("/jobs/", "Bearer rsv_abc", False),
        ("/api/v1x/", "Bearer rsv_abc", False),
        ("/api/docs/", "Bearer rsv_abc", False),
    ],
)
def test_only_an_api_request_with_a_token_takes_the_lane(path, authorization, expected):
    environ = {"PATH_INFO": path}
    if authorization:
        environ["HTTP_AUTHORIZATION"] = authorization
    assert token_lane.is_token_api_request(environ) is expected


def test_the_lane_is_the_whole_chain_without_the_browser_only_middleware(settings):
    lane = token_lane.token_lane_middleware(settings.MIDDLEWARE)
    assert lane == [path for path in settings.MIDDLEWARE if path not in token_lane.BROWSER_ONLY_MIDDLEWARE]
    assert len(lane) == len(settings.MIDDLEWARE) - len(token_lane.BROWSER_ONLY_MIDDLEWARE)
    assert "monitoring.middleware.RequestMetricsMiddleware" in lane
    assert "portal.outage.DatabaseUnavailableMiddleware" in lane
    assert "portal.middleware.ContentSecurityPolicyMiddleware" in lane


def test_a_browser_only_middleware_missing_from_the_settings_is_an_error_at_start(settings):
    with pytest.raises(ImproperlyConfigured, match="SessionMiddleware"):
        token_lane.token_lane_middleware(
            [path for path in settings.MIDDLEWARE if not path.endswith(".SessionMiddleware")]
        )


@pytest.mark.django_db
def test_a_token_list_takes_the_lane_and_answers_as_the_whole_chain(lanes, admin_secret):
    lane, full = lanes
    headers = {"HTTP_AUTHORIZATION": f"Bearer {admin_secret}", "HTTP_ACCEPT": "application/json"}
    status, lane_headers, body = call(application, "GET", "/api/v1/jobs/?state=running", **headers)
    assert (status, lane.calls, full.calls) == (200, 1, 0)
    whole_status, whole_headers, whole_body = call(full.handler, "GET", "/api/v1/jobs/?state=running", **headers)
    assert whole_status == 200
    assert json.loads(body) == json.loads(whole_body)
    assert {job["name"] for job in json.loads(body)["results"]} == {"alpha-run", "beta-run"}
    # The security headers are the whole chain's; only the session's Vary: Cookie is not there (no session read).
    for name in (
        "Content-Security-Policy",
        "X-Frame-Options",
        "X-Content-Type-Options",
        "Referrer-Policy",
        "Cross-Origin-Opener-Policy",
    ):
        assert lane_headers[name] == whole_headers[name], name
    assert "Accept-Language" in lane_headers["Vary"]
    assert "Cookie" in whole_headers["Vary"] and "Cookie" not in lane_headers["Vary"]


@pytest.mark.django_db
def test_a_write_through_the_lane_is_made_and_audited(lanes, world, platform_admin, admin_secret):
    quota = world["quotas"]["alpha"]
    status, _headers, body = call(
        application,
        "PATCH",
        f"/api/v1/quotas/{quota.pk}/",
        body=json.dumps({"max_gpus": 6}),
        HTTP_AUTHORIZATION=f"Bearer {admin_secret}",
    )
    assert status == 200, body
    assert json.loads(body)["max_gpus"] == 6
    assert lanes[0].calls == 1
    quota.refresh_from_db()
    assert quota.max_gpus == 6
    assert AuditEntry.objects.filter(actor=platform_admin, action="quota.set", object_id=str(quota.pk)).exists()


@pytest.mark.django_db
def test_a_token_that_is_not_valid_is_refused_in_the_lane(lanes, world):
    status, headers, body = call(application, "GET", "/api/v1/jobs/", HTTP_AUTHORIZATION="Bearer rsv_not-a-token")
    assert status == 401
    assert headers["WWW-Authenticate"] == 'Bearer realm="api"'
    assert lanes[0].calls == 1


@pytest.mark.django_db
def test_the_browsable_api_and_an_unknown_route_answer_a_token_in_the_lane(lanes, admin_secret):
    token = f"Bearer {admin_secret}"
    status, _headers, body = call(
        application, "GET", "/api/v1/jobs/", HTTP_AUTHORIZATION=token, HTTP_ACCEPT="text/html"
    )
    assert status == 200 and b"alpha-run" in body
    status, _headers, _body = call(application, "GET", "/api/v1/no-such-thing/", HTTP_AUTHORIZATION=token)
    assert status == 404
    assert lanes[0].calls == 2


@pytest.mark.django_db
def test_a_session_request_to_the_api_takes_the_whole_chain_and_its_csrf_check(lanes, client, world, platform_admin):
    client.force_login(platform_admin)
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    quota = world["quotas"]["alpha"]
    status, _headers, body = call(
        application, "PATCH", f"/api/v1/quotas/{quota.pk}/", body=json.dumps({"max_gpus": 6}), HTTP_COOKIE=cookie
    )
    assert status == 403 and b"CSRF" in body
    status, _headers, _body = call(application, "GET", "/api/v1/jobs/", HTTP_COOKIE=cookie)
    assert status == 200
    assert lanes[1].calls == 2 and lanes[0].calls == 0
    quota.refresh_from_db()
    assert quota.max_gpus == 8


@pytest.mark.django_db
def test_a_token_sent_to_a_page_takes_the_whole_chain(lanes, admin_secret):
    for path in ("/jobs/", "/api/docs/"):
        status, headers, _body = call(application, "GET", path, HTTP_AUTHORIZATION=f"Bearer {admin_secret}")
        assert status == 302 and "/login/" in headers["Location"], path  # pages sign in with a session only
    assert lanes[1].calls == 2 and lanes[0].calls == 0
