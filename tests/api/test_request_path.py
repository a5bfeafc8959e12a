"""What every API request passes through, made cheaper for bench/api.py without changing an answer: one router for
every resource (the root lists them all), DRF's choice of renderer remembered per Accept header, and the
Content-Security-Policy header built once per policy (portal/middleware.py)."""

import pytest
from csp.constants import HEADER
from csp.utils import build_policy
from django.http import HttpResponse
from django.test import RequestFactory
from django.urls import resolve, reverse
from rest_framework.test import APIClient

from portal.api.negotiation import ContentNegotiation
from portal.middleware import ContentSecurityPolicyMiddleware

# Every resource with a list (the spend forecast has only its per-team views), jobs first.
RESOURCES = [
    "jobs", "pools", "nodes", "reservations", "quotas", "namespace-limits", "quota-requests", "usage", "invoices",
    "budget-lifts", "alerts", "volumes", "secrets", "group-rules", "teams", "memberships", "tokens", "audit",
]  # fmt: skip


def test_the_api_root_lists_every_resource_of_every_app(platform_admin):
    client = APIClient()
    client.force_authenticate(platform_admin)
    answer = client.get("/api/v1/", HTTP_ACCEPT="application/json")
    assert answer.status_code == 200
    assert list(answer.json()) == RESOURCES
    for name in RESOURCES:
        assert answer.json()[name] == f"http://testserver/api/v1/{name}/"


@pytest.mark.parametrize("path", ["/api/v1/jobs/", "/api/v1/jobs/7/cancel/", "/api/v1/quotas/3/", "/api/v1/jobs.json"])
def test_api_paths_resolve_to_their_viewsets(path):
    match = resolve(path)
    assert match.url_name.split("-")[0] in ("job", "quota")
    assert reverse(match.view_name, kwargs=match.kwargs) == path


def test_the_renderer_chosen_for_an_accept_header_is_remembered_and_never_mixed_up(platform_admin):
    ContentNegotiation._chosen.clear()
    client = APIClient()
    client.force_authenticate(platform_admin)
    for _round in range(2):  # the second round answers from what the first remembered
        assert client.get("/api/v1/pools/", HTTP_ACCEPT="application/json")["Content-Type"] == "application/json"
        assert client.get("/api/v1/pools/", HTTP_ACCEPT="text/html")["Content-Type"].startswith("text/html")
        # A format asked for in the URL wins over the header, as in DRF.
        answer = client.get("/api/v1/pools/", {"format": "json"}, HTTP_ACCEPT="text/html")
        assert answer["Content-Type"] == "application/json"
        assert client.get("/api/v1/pools.json", HTTP_ACCEPT="text/html")["Content-Type"] == "application/json"
        assert client.get("/api/v1/pools/", HTTP_ACCEPT="image/png").status_code == 406
    remembered = {accept for accept, _renderers in ContentNegotiation._chosen}
    assert {"application/json", "text/html"} <= remembered and "image/png" not in remembered


def test_only_so_many_accept_headers_are_remembered(platform_admin, monkeypatch):
    ContentNegotiation._chosen.clear()
    monkeypatch.setattr(ContentNegotiation, "remembered_at_most", 3)
    client = APIClient()
    client.force_authenticate(platform_admin)
    for n in range(6):
        answer = client.get("/api/v1/pools/", HTTP_ACCEPT=f"application/json; q=0.{n + 1}")
        assert answer.status_code == 200 and answer["Content-Type"] == "application/json"
    assert len(ContentNegotiation._chosen) == 3


def _csp(request, response):
    return ContentSecurityPolicyMiddleware(lambda _request: response).process_response(request, response)


def test_the_built_once_policy_is_the_one_django_csp_writes(client, settings):
    expected = build_policy()
    assert "frame-ancestors 'none'" in expected
    assert client.get("/login/")[HEADER] == expected
    assert client.get("/api/v1/jobs/")[HEADER] == expected  # a 403 of the API carries it too
    # A replaced setting is read again.
    settings.CONTENT_SECURITY_POLICY = {"DIRECTIVES": {"default-src": ["'none'"]}}
    assert client.get("/login/")[HEADER] == "default-src 'none'"


def test_responses_that_change_the_policy_go_through_django_csp():
    factory = RequestFactory()
    exempt = HttpResponse()
    exempt._csp_exempt = True
    assert HEADER not in _csp(factory.get("/"), exempt)
    updated = HttpResponse()
    updated._csp_update = {"img-src": ["https://images.example.com"]}
    assert "https://images.example.com" in _csp(factory.get("/"), updated)[HEADER]
    # A page that asked for a nonce gets django-csp's header for it.
    request = factory.get("/")
    ContentSecurityPolicyMiddleware(lambda _request: None).process_request(request)
    nonce = str(request.csp_nonce)
    assert _csp(request, HttpResponse())[HEADER] == build_policy(nonce=nonce)
    # Once the header is written, asking for a nonce is an error, as with django-csp.
    plain = factory.get("/")
    _csp(plain, HttpResponse())
    with pytest.raises(Exception, match="csp_nonce"):
        str(plain.csp_nonce)
