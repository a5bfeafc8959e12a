"""A real OpenID Connect provider for the sign-in tests: ory/hydra (built into the cache outside the repository by
devcluster/hydra_build.py) on free ports, with a PostgreSQL database of its own made here and dropped afterwards,
and the login/consent app of devcluster/hydra.py accepting sign-ins through hydra's admin API for demo users whose
groups the tests change between sign-ins."""

import os
import re
import secrets
import urllib.parse
from pathlib import Path

import pytest
import requests
from django.conf import settings

from devcluster import hydra as hydra_module
from portal.choices import Role
from tests.factories import TeamFactory

CLIENT_ID = "reservoir-tests"
LABEL = "Hydra"
TEST_SERVER = "http://testserver"
# hydra's log, printed (into the captured output a failed test shows) when a sign-in does not come back signed in.
HYDRA_LOG: list[Path] = []


def database_server_url() -> str:
    """The tests' PostgreSQL server as a URL (its database part a placeholder): hydra's databases are made there."""
    base = settings.DATABASES["default"]
    return f"postgres://{base['USER']}:{base['PASSWORD']}@{base['HOST'] or '127.0.0.1'}:{base['PORT'] or 5432}/x"


@pytest.fixture(scope="session")
def hydra(tmp_path_factory):
    base_url = database_server_url()
    database = f"rsv_hydra_{os.getpid()}_{secrets.token_hex(3)}"
    # The stand-in provider's commits do not wait for the disk: its durability is nothing the tests check, and with
    # the disk busy (a load of fsync'd writes beside it) a sign-in's calls to it took up to 4 s.
    hydra_module.create_database(base_url, database, drop_first=True, durable=False)
    app = hydra_module.LoginConsentApp(admin_url="").start()
    server = hydra_module.Hydra(
        dsn=hydra_module.database_url(base_url, database),
        login_url=app.base_url,
        log_path=tmp_path_factory.mktemp("hydra") / "hydra.log",
    )
    try:
        server.start()
        HYDRA_LOG[:] = [server.log_path]
        app.admin_url = server.admin_url
        server.login_app = app
        server.client_secret = secrets.token_urlsafe(24)
        yield server
    finally:
        server.stop()
        app.stop()
        hydra_module.drop_database(base_url, database)


def provider_settings(issuer: str, client_id: str, secret: str) -> dict:
    return {
        "openid_connect": {
            "provider_class": "identity.oidc.ReservoirOIDCProvider",
            "OAUTH_PKCE_ENABLED": True,
            "APPS": [
                {
                    "provider_id": "sso",
                    "name": LABEL,
                    "client_id": client_id,
                    "secret": secret,
                    "settings": {
                        "server_url": issuer,
                        "scope": ["openid", "profile", "email"],
                        "oauth_pkce_enabled": True,
                    },
                }
            ],
        }
    }


@pytest.fixture
def sso(hydra, settings, db):
    """The portal configured for hydra, hydra knowing the portal (test client and any live server), the demo users'
    groups reset, teams llm and vision and the demo group rules."""
    from identity import services

    redirect_uris = [f"{TEST_SERVER}/accounts/oidc/sso/login/callback/"]
    hydra.redirect_hosts = getattr(hydra, "redirect_hosts", [])
    for host in hydra.redirect_hosts:
        redirect_uris.append(f"{host}/accounts/oidc/sso/login/callback/")
    hydra.create_client(
        client_id=CLIENT_ID,
        client_secret=hydra.client_secret,
        redirect_uris=redirect_uris,
        post_logout_redirect_uris=[f"{TEST_SERVER}/login/", *(f"{h}/login/" for h in hydra.redirect_hosts)],
    )
    settings.SOCIALACCOUNT_PROVIDERS = provider_settings(hydra.issuer, CLIENT_ID, hydra.client_secret)
    settings.LOCAL_PASSWORD_LOGIN = False
    hydra.login_app.users = {name: list(groups) for name, groups in hydra_module.DEMO_USERS.items()}
    teams = {slug: TeamFactory(slug=slug, name=slug.upper()) for slug in ("llm", "vision", "speech")}
    for slug, team in teams.items():
        services.create_rule(group=f"gpu-{slug}-leads", team=team, role=Role.LEAD)
        services.create_rule(group=f"gpu-{slug}", team=team, role=Role.RESEARCHER)
    services.create_rule(group="gpu-admins", platform_admin=True)
    hydra.teams = teams
    return hydra


def walk_the_provider(authorize_url: str, username: str, password: str, stop_at: str) -> str:
    """Follow hydra's redirects as a browser would, filling the demo login form for `username`; return the first URL
    that points back at the portal (`stop_at`): the callback with the code and the state."""
    browser = requests.Session()
    url = authorize_url
    for _ in range(20):
        if url.startswith(stop_at):
            return url
        answer = browser.get(url, allow_redirects=False, timeout=10)
        if answer.status_code in (301, 302, 303, 307):
            url = urllib.parse.urljoin(url, answer.headers["Location"])
            continue
        challenge = re.search(r'name="challenge" value="([^"]*)"', answer.text)
        assert answer.status_code == 200 and challenge, f"unexpected page at {url}: {answer.status_code}"
        posted = browser.post(
            urllib.parse.urljoin(url, "/login"),
            data={"challenge": challenge.group(1), "username": username, "password": password},
            allow_redirects=False,
            timeout=10,
        )
        assert posted.status_code == 302, posted.text[:300]
        url = urllib.parse.urljoin(url, posted.headers["Location"])
    raise AssertionError("too many redirects at the provider")


def start_sign_in(client):
    """Press "Sign in with ...": the portal answers with a redirect to the provider's authorization endpoint."""
    answer = client.post("/accounts/oidc/sso/login/", {"process": "login"})
    assert answer.status_code == 302, answer.content[:300]
    return answer["Location"]


def sign_in(client, username: str, *, password: str = hydra_module.DEMO_PASSWORD):
    """Sign `username` in through hydra with the Django test client; return the portal's answer to the callback."""
    callback = walk_the_provider(start_sign_in(client), username, password, TEST_SERVER)
    answer = client.get(callback.removeprefix(TEST_SERVER))
    if answer.status_code != 302:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(callback).query)
        print(f"sign-in of {username}: {answer.status_code}; the provider's error: {query.get('error_description')}")
        for log in HYDRA_LOG:
            print(f"--- the end of {log}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-30:]))
    return answer
