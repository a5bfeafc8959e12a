"""OpenID Connect with django-allauth's `openid_connect` provider, held to what the portal promises:

- authorization code flow with PKCE (settings) and `state` (allauth keeps it in the session and checks it);
- a `nonce` sent with every authorization request, kept in that state and compared with the ID token's (adapter);
- the ID token's signature always checked against the provider's JWKS (allauth skips it for a token fetched over
  TLS; we do not), its issuer, audience (our client id) and expiry too;
- the discovery document must name the configured issuer, so a provider that answers for another issuer is refused;
- the scopes and authorization parameters are the configured ones, never taken from the request.
"""

from __future__ import annotations

import logging
import secrets

import requests
from allauth.socialaccount.internal import jwtkit
from allauth.socialaccount.providers.base.constants import AuthProcess
from allauth.socialaccount.providers.oauth2.client import OAuth2Error
from allauth.socialaccount.providers.oauth2.views import OAuth2CallbackView, OAuth2LoginView
from allauth.socialaccount.providers.openid_connect.provider import OpenIDConnectProvider
from allauth.socialaccount.providers.openid_connect.views import OpenIDConnectOAuth2Adapter
from django.conf import settings
from django.core.cache import cache
from django.http import Http404
from django.shortcuts import render

logger = logging.getLogger(__name__)
PROVIDER_ID = "sso"
# The raw ID token of the current sign-in, kept in the session for RP-initiated logout's id_token_hint.
ID_TOKEN_SESSION_KEY = "identity_id_token"
DISCOVERY_CACHE_SECONDS = 300


def same_issuer(left: str, right: str) -> bool:
    return left.rstrip("/") == right.rstrip("/")


class ReservoirOIDCAdapter(OpenIDConnectOAuth2Adapter):
    @property
    def openid_config(self):
        config = super().openid_config
        configured = self.get_provider().app.settings["server_url"]
        if not same_issuer(config.get("issuer", ""), configured):
            raise OAuth2Error(
                f"The provider's discovery document names issuer {config.get('issuer')!r}, not {configured!r}"
            )
        return config

    def complete_login(self, request, app, token, **kwargs):
        id_token = kwargs["response"].get("id_token")
        if not id_token:
            raise OAuth2Error("The provider sent no ID token.")
        claims = jwtkit.verify_and_decode(
            credential=id_token,
            keys_url=self.openid_config["jwks_uri"],
            issuer=self.openid_config["issuer"],
            audience=app.client_id,
            lookup_kid=jwtkit.lookup_kid_jwk,
            verify_signature=True,
        )
        data = {"id_token": claims}
        if app.settings.get("fetch_userinfo", True) and self.openid_config.get("userinfo_endpoint"):
            userinfo = self._fetch_user_info(token.token)
            if userinfo.get("sub") != claims.get("sub"):
                raise OAuth2Error("The userinfo answer is about another subject than the ID token.")
            data["userinfo"] = userinfo
        request.session[ID_TOKEN_SESSION_KEY] = id_token
        return self.get_provider().sociallogin_from_response(request, data)


class ReservoirOIDCProvider(OpenIDConnectProvider):
    oauth2_adapter_class = ReservoirOIDCAdapter
    # allauth.urls includes the URLs of this package; identity.urls serves the same paths first, with this adapter.
    package = "allauth.socialaccount.providers.openid_connect"

    def get_scope_from_request(self, request):
        return self.get_scope()

    def get_auth_params_from_request(self, request, action):
        return self.get_auth_params()

    def redirect(self, request, process, next_url=None, data=None, **kwargs):
        # A sign-in, whatever `?process=` asks: allauth's "connect" would join the provider identity to the account
        # signed in now (a break-glass admin's too, by a plain link), and sign-ins through it would then land there.
        process = AuthProcess.LOGIN
        nonce = secrets.token_urlsafe(32)
        auth_params = kwargs.pop("auth_params", None) or self.get_auth_params()
        auth_params["nonce"] = nonce
        return super().redirect(request, process, next_url, data, auth_params=auth_params, nonce=nonce, **kwargs)


def _check_known(provider_id: str) -> None:
    """Only the configured provider has sign-in pages: any other id (or none configured) is a 404, not a 500."""
    app = configured_app()
    if app is None or provider_id != app["provider_id"]:
        raise Http404("no such sign-in provider")


def login(request, provider_id):
    """Start a sign-in; a provider that cannot be reached or names another issuer gets the sign-in failed page."""
    _check_known(provider_id)
    try:
        return OAuth2LoginView.adapter_view(ReservoirOIDCAdapter(request, provider_id))(request)
    except (OAuth2Error, requests.RequestException):
        logger.warning("sign-in through the provider could not start", exc_info=True)
        return render(request, "socialaccount/authentication_error.html", status=502)


def callback(request, provider_id):
    _check_known(provider_id)
    return OAuth2CallbackView.adapter_view(ReservoirOIDCAdapter(request, provider_id))(request)


# --- What the pages need to know about the configured provider ------------------------------------------------------
def configured_app() -> dict | None:
    apps = settings.SOCIALACCOUNT_PROVIDERS.get("openid_connect", {}).get("APPS", [])
    return apps[0] if apps else None


def provider_label() -> str:
    app = configured_app()
    return app["name"] if app else ""


def actor_name() -> str:
    """How the audit log names the provider: `oidc:<issuer>`."""
    app = configured_app()
    return f"oidc:{app['settings']['server_url']}" if app else "oidc"


def groups_claim(extra_data: dict) -> list[str]:
    """The groups the provider sent (the configured claim, default `groups`), from the ID token, else userinfo. A
    single string counts as one group; anything else as none."""
    claim = settings.OIDC_GROUPS_CLAIM
    for part in ("id_token", "userinfo"):
        value = (extra_data.get(part) or {}).get(claim)
        if isinstance(value, str):
            return [value]
        if isinstance(value, list):
            return [item for item in value if isinstance(item, str)]
    return []


def end_session_endpoint() -> str:
    """The provider's RP-initiated logout endpoint (discovery's `end_session_endpoint`), empty when it offers none or
    cannot be reached now. Cached for a few minutes."""
    app = configured_app()
    if app is None:
        return ""
    issuer = app["settings"]["server_url"]
    key = f"identity:end_session:{issuer}"
    cached = cache.get(key)
    if cached is not None:
        return cached
    try:
        answer = requests.get(f"{issuer.rstrip('/')}/.well-known/openid-configuration", timeout=3)
        answer.raise_for_status()
        endpoint = answer.json().get("end_session_endpoint") or ""
    except (requests.RequestException, ValueError):
        return ""
    cache.set(key, endpoint, DISCOVERY_CACHE_SECONDS)
    return endpoint
