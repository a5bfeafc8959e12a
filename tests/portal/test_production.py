"""Production hardening (issue 15): `check --deploy` is clean under production settings; HTTPS is enforced
(HSTS, redirect, configurable proxy header) with the probes exempt; /metrics is refused without its token in
production; the API schema and Swagger UI are for signed-in users and Swagger UI comes from our own static files;
sessions last the configured age; every page carries a Content-Security-Policy without inline script."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.urls import reverse

ROOT = Path(__file__).resolve().parents[2]
PROD_ENV = {
    "DJANGO_SETTINGS_MODULE": "portal.settings.prod",
    "DJANGO_SECRET_KEY": "x7-Qm2v9-production-like-secret-key-of-sufficient-length-and-variety-41",
    "DJANGO_ALLOWED_HOSTS": "reservoir.example.com,testserver",
    "RESERVOIR_METRICS_TOKEN": "scrape-token",
}


def run_prod(args: list[str], **extra_env) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DJANGO_", "RESERVOIR_"))}
    env.update(PROD_ENV)
    env.update(extra_env)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_check_deploy_is_clean_under_production_settings():
    result = run_prod(["manage.py", "check", "--deploy", "--fail-level", "WARNING"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_warns_when_metrics_would_refuse_every_scrape():
    result = run_prod(["manage.py", "check", "--deploy"], RESERVOIR_METRICS_TOKEN="")
    assert "reservoir.W001" in result.stdout + result.stderr


PROBE = """
import json, django
django.setup()
from django.test import Client
from django.conf import settings
client = Client()
secure = {"HTTP_X_FORWARDED_PROTO": "https"}
answers = {
    "login_http": [client.get("/login/").status_code, client.get("/login/").get("Location", "")],
    "login_forwarded_https": client.get("/login/", **secure).status_code,
    "hsts": client.get("/login/", secure=True).get("Strict-Transport-Security", ""),
    "healthz_http": client.get("/healthz").status_code,
    "readyz_http": client.get("/readyz").status_code,
    "metrics_http": client.get("/metrics").status_code,
    "session_age": settings.SESSION_COOKIE_AGE,
}
print(json.dumps(answers))
"""


def probe(**extra_env) -> dict:
    result = run_prod(["-c", PROBE], **extra_env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_https_is_enforced_and_the_proxy_header_is_trusted_only_when_configured():
    direct = probe()
    assert direct["login_http"] == [301, "https://testserver/login/"]
    assert direct["login_forwarded_https"] == 301  # no proxy configured: a client cannot claim HTTPS
    assert direct["hsts"] == "max-age=31536000; includeSubDomains; preload"
    assert direct["healthz_http"] == 200  # probes talk plain HTTP to the pod
    assert direct["readyz_http"] in (200, 503)  # not redirected (503 when this run's database or Redis is elsewhere)
    assert direct["metrics_http"] == 403  # exempt from the redirect, but not without its token

    behind_proxy = probe(DJANGO_SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto", RESERVOIR_SESSION_AGE_SECONDS="3600")
    assert behind_proxy["login_forwarded_https"] == 200
    assert behind_proxy["session_age"] == 3600


@pytest.mark.django_db
def test_metrics_are_refused_without_a_token_in_production(client, settings):
    settings.METRICS_REQUIRE_TOKEN = True
    settings.METRICS_BEARER_TOKEN = ""
    assert client.get("/metrics").status_code == 403
    settings.METRICS_BEARER_TOKEN = "scrape-token"
    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-token").status_code == 200


def test_the_schema_and_swagger_ui_are_for_signed_in_users_only(client, researcher):
    assert client.get("/api/schema/").status_code in (401, 403)
    docs = client.get("/api/docs/")
    assert docs.status_code == 302 and reverse("portal:login") in docs["Location"]
    client.force_login(researcher)
    assert client.get("/api/schema/").status_code == 200
    assert client.get("/api/docs/").status_code == 200


def test_swagger_ui_is_served_from_our_own_static_files(client, researcher):
    client.force_login(researcher)
    html = client.get("/api/docs/").content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert assets and all(url.startswith("/") for url in assets), assets
    bundle = next(url for url in assets if url.endswith("swagger-ui-bundle.js"))
    assert finders.find(bundle.removeprefix("/static/")) is not None
    assert "<script>" not in html and "<style>" not in html  # start-up script and styles are files too
    script = next(url for url in assets if "script=" in url)
    assert client.get(script).status_code == 200


def test_a_session_lasts_the_configured_age(client, researcher, settings):
    assert settings.SESSION_COOKIE_AGE == 12 * 3600
    response = client.post(reverse("portal:login"), {"username": "rita", "password": "pw-for-tests"})
    assert response.status_code == 302
    assert response.cookies["sessionid"]["max-age"] == 12 * 3600


PAGES = ["portal:home", "pools:pool_list", "jobs:job_list", "jobs:pending", "jobs:job_submit", "monitoring:alert_list"]


@pytest.mark.parametrize("url_name", PAGES)
def test_pages_carry_a_content_security_policy_and_no_inline_script_or_style(client, researcher, url_name):
    client.force_login(researcher)
    response = client.get(reverse(url_name))
    policy = response["Content-Security-Policy"]
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";") if part.strip())
    assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'" and directives["object-src"] == "'none'"
    html = response.content.decode()
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "inline <script>"
    assert "<style" not in html and not re.search(r"\son[a-z]+=", html), "inline style element or handler"


def test_the_served_application_builds_its_token_lane_under_production_settings():
    """gunicorn's application (portal/token_lane.py) under production settings: WhiteNoise in both chains, the
    browser-only middleware in the whole chain only."""
    probe = (
        "import json\n"
        "from portal.wsgi import application\n"
        "from portal.token_lane import token_lane_middleware\n"
        "from django.conf import settings\n"
        "print(json.dumps([settings.MIDDLEWARE, token_lane_middleware(settings.MIDDLEWARE),"
        " type(application.lane).__name__]))\n"
    )
    result = run_prod(["-c", probe])
    assert result.returncode == 0, result.stdout + result.stderr
    whole, lane, lane_type = json.loads(result.stdout.strip().splitlines()[-1])
    assert (
        "whitenoise.middleware.WhiteNoiseMiddleware" in whole and "whitenoise.middleware.WhiteNoiseMiddleware" in lane
    )
    assert (
        "django.middleware.csrf.CsrfViewMiddleware" in whole and "django.middleware.csrf.CsrfViewMiddleware" not in lane
    )
    assert lane_type == "_LaneHandler"
