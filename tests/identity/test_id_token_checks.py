"""The ID token checks hydra cannot be made to fail: a small provider of our own (discovery, a JWKS we control, a
token endpoint answering with the ID token each test forges) stands in for it. The control case shows a well-formed
token from it signs in, so each refusal below is the check it names."""

import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from portal.models import Membership, User
from tests.identity.conftest import CLIENT_ID, provider_settings

pytestmark = pytest.mark.django_db
KID = "test-key"


class ForgingProvider:
    def __init__(self):
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.claims: dict = {}
        self.discovery_issuer: str | None = None
        self.signing_key = self.key
        self.token_delay = 0.0
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _json(self, data):
                body = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                path = urllib.parse.urlsplit(self.path).path
                if path == "/.well-known/openid-configuration":
                    self._json(provider.discovery())
                elif path == "/jwks":
                    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(provider.key.public_key()))
                    self._json({"keys": [{**public, "kid": KID, "alg": "RS256", "use": "sig"}]})
                elif path == "/userinfo":
                    self._json({key: provider.claims[key] for key in ("sub", "preferred_username", "groups")})
                else:
                    self.send_error(404)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                time.sleep(provider.token_delay)
                token = jwt.encode(provider.claims, provider.signing_key, algorithm="RS256", headers={"kid": KID})
                self._json({"access_token": "opaque", "token_type": "Bearer", "expires_in": 300, "id_token": token})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def discovery(self) -> dict:
        return {
            "issuer": self.discovery_issuer or self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "userinfo_endpoint": f"{self.issuer}/userinfo",
            "jwks_uri": f"{self.issuer}/jwks",
            "token_endpoint_auth_methods_supported": ["client_secret_post"],
        }

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def forger(settings, db):
    from identity import services
    from portal.choices import Role
    from tests.factories import TeamFactory

    provider = ForgingProvider()
    settings.SOCIALACCOUNT_PROVIDERS = provider_settings(provider.issuer, CLIENT_ID, "secret")
    services.create_rule(group="gpu-llm", team=TeamFactory(slug="llm", name="LLM"), role=Role.RESEARCHER)
    yield provider
    provider.stop()


def sign_in_with(client, forger, start=None, **changes):
    """Start a sign-in (or open `start`, a URL that starts one), forge the ID token the token endpoint will answer
    with, come back with the state."""
    answer = client.get(start) if start else client.post("/accounts/oidc/sso/login/", {"process": "login"})
    assert answer.status_code == 302, answer.content[:300]
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(answer["Location"]).query))
    now = int(time.time())
    forger.claims = {
        "iss": forger.issuer,
        "aud": CLIENT_ID,
        "sub": "eve",
        "iat": now,
        "exp": now + 300,
        "nonce": query["nonce"],
        "preferred_username": "eve",
        "groups": ["gpu-llm"],
        **changes,
    }
    return client.get(f"/accounts/oidc/sso/login/callback/?code=forged&state={query['state']}")


def refused(client, answer) -> bool:
    return (
        "Sign-in failed" in answer.content.decode()
        and not client.get("/").wsgi_request.user.is_authenticated
        and not User.objects.filter(username="eve").exists()
    )


def test_control_a_well_formed_token_of_this_provider_signs_in(client, forger):
    answer = sign_in_with(client, forger)
    assert answer.status_code == 302
    assert client.get("/").wsgi_request.user.username == "eve"
    assert Membership.objects.get(user__username="eve").team.slug == "llm"


def test_a_token_for_another_audience_is_refused(client, forger):
    assert refused(client, sign_in_with(client, forger, aud="another-client"))


def test_an_expired_token_is_refused_and_the_log_says_why(client, forger, caplog):
    now = int(time.time())
    assert refused(client, sign_in_with(client, forger, iat=now - 900, exp=now - 600))
    (record,) = [r for r in caplog.records if r.name == "identity.adapter"]
    assert record.levelname == "WARNING" and "Signature has expired" in caplog.text


def test_a_provider_slower_than_the_configured_timeout_is_refused_and_a_slow_one_within_it_is_not(
    client, forger, settings, caplog
):
    settings.SOCIALACCOUNT_REQUESTS_TIMEOUT = 0.5
    forger.token_delay = 1.5
    assert refused(client, sign_in_with(client, forger))
    assert "ReadTimeout" in caplog.text

    settings.SOCIALACCOUNT_REQUESTS_TIMEOUT = 5
    assert sign_in_with(client, forger).status_code == 302


def test_an_error_the_provider_sends_back_is_refused_and_logged_in_its_words(client, forger, caplog):
    answer = client.post("/accounts/oidc/sso/login/", {"process": "login"})
    state = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(answer["Location"]).query))["state"]
    query = urllib.parse.urlencode(
        {"error": "server_error", "error_description": "the database is gone", "state": state}
    )
    answer = client.get(f"/accounts/oidc/sso/login/callback/?{query}")
    assert answer.status_code == 401 and "Sign-in failed" in answer.content.decode()
    assert "'server_error'" in caplog.text and "the database is gone" in caplog.text


def test_a_token_from_an_unknown_issuer_is_refused(client, forger):
    assert refused(client, sign_in_with(client, forger, iss="https://unknown.example.com"))


def test_a_token_signed_with_a_key_not_in_the_jwks_is_refused(client, forger):
    forger.signing_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert refused(client, sign_in_with(client, forger))


def test_a_token_with_another_nonce_is_refused(client, forger):
    assert refused(client, sign_in_with(client, forger, nonce="replayed-from-another-sign-in"))


def test_a_provider_whose_discovery_names_another_issuer_is_refused(client, forger):
    forger.discovery_issuer = "https://impostor.example.com"
    answer = client.post("/accounts/oidc/sso/login/", {"process": "login"})
    assert answer.status_code != 302 and "Sign-in failed" in answer.content.decode()
