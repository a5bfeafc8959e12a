"""A request to the REST API that misses its routes is answered like an API, through the WSGI application gunicorn
serves (the token lane). A write to a collection without its trailing slash (`POST /api/v1/jobs`, what a CI
pipeline's `curl`/`requests` call writes) answered `301 Moved Permanently` to the slashed URL, with an empty HTML body;
HTTP clients follow a 301 of a POST as a GET (requests, curl -L, browsers' fetch), so the pipeline read the jobs list,
answered 200, and no job was submitted. An id the route's pattern does not take (`/api/v1/pools/Train/`) answered the
portal's HTML 404 page, where every other API error is JSON (`{"detail": ...}`).

Both spellings of a route now reach its view (portal/api/routers.py), URLs are still written with the slash, and a
path under /api/v1/ that no route takes answers DRF's JSON 404."""

import json

import pytest
from django.urls import reverse
from drf_spectacular.generators import SchemaGenerator

from jobs.models import Job
from portal import services as portal_services
from portal.wsgi import application
from tests.api.test_token_lane import call

pytestmark = pytest.mark.usefixtures("wsgi_keeps_the_test_connection")


@pytest.fixture
def researcher_secret(world, researcher, platform_admin):
    _token, secret = portal_services.create_token(owner=researcher, name="ci", user=platform_admin)
    return secret


def test_a_job_posted_without_the_trailing_slash_is_submitted_not_redirected(researcher_secret):
    body = json.dumps({"team": "alpha", "pool": "train", "name": "ci-run", "image": "r.io/t/a:1", "gpus": 1}).encode()
    status, headers, content = call(
        application, "POST", "/api/v1/jobs", body=body, HTTP_AUTHORIZATION=f"Bearer {researcher_secret}"
    )
    assert not 300 <= status < 400, f"POST answered {status} to {headers.get('Location')}: a client re-sends it as GET"
    assert status == 201, content
    assert Job.objects.filter(name="ci-run").count() == 1


def test_both_spellings_read_the_same_and_urls_keep_the_slash(researcher_secret):
    token = f"Bearer {researcher_secret}"
    with_slash = call(application, "GET", "/api/v1/jobs/", HTTP_AUTHORIZATION=token)
    without = call(application, "GET", "/api/v1/jobs", HTTP_AUTHORIZATION=token)
    assert with_slash[0] == without[0] == 200
    assert json.loads(without[2])["results"] == json.loads(with_slash[2])["results"] != []
    job = json.loads(with_slash[2])["results"][0]["id"]
    assert call(application, "GET", f"/api/v1/jobs/{job}", HTTP_AUTHORIZATION=token)[0] == 200
    assert reverse("job-list") == "/api/v1/jobs/"
    assert reverse("job-detail", kwargs={"pk": job}) == f"/api/v1/jobs/{job}/"
    # The schema names each route once, with its slash.
    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    assert "/api/v1/jobs/" in paths
    assert [path for path in paths if not path.endswith("/")] == []


@pytest.mark.parametrize("path", ["/api/v1/pools/Train/", "/api/v1/no-such-resource/", "/api/v1/jobs/1/2/3/"])
def test_an_api_not_found_is_json(researcher_secret, path):
    status, headers, content = call(application, "GET", path, HTTP_AUTHORIZATION=f"Bearer {researcher_secret}")
    assert status == 404
    assert headers["Content-Type"].startswith("application/json"), content[:80]
    assert "detail" in json.loads(content)


def test_an_unrouted_write_is_a_json_404_too(researcher_secret):
    status, headers, content = call(
        application, "DELETE", "/api/v1/pools/Train/", HTTP_AUTHORIZATION=f"Bearer {researcher_secret}"
    )
    assert status == 404
    assert headers["Content-Type"].startswith("application/json"), content[:80]


def test_an_unrouted_path_without_a_valid_token_is_refused_first(world):
    status, headers, _content = call(application, "GET", "/api/v1/no-such-resource/", HTTP_AUTHORIZATION="Bearer nope")
    assert status == 401
    assert headers["Content-Type"].startswith("application/json")
