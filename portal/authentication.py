"""API token authentication: `Authorization: Bearer <secret>` (or `Token <secret>`).

The secret is looked up by its SHA-256, so the database never holds a usable secret. A revoked or expired token,
or one whose user is inactive, authenticates nobody (401). `last_used_at` is written at most once a minute per
token, so a busy automation does not turn every read into a write.
"""

import hashlib
from datetime import timedelta

from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from .models import ApiToken

KEYWORDS = (b"bearer", b"token")
TOKEN_PREFIX = "rsv_"
LAST_USED_RESOLUTION = timedelta(minutes=1)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class ApiTokenAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() not in KEYWORDS:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(_("Invalid token header: give exactly one token."))
        try:
            secret = header[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed(_("Invalid token.")) from None
        # The key hash is unique: no ordering or limit to compile; whether the token is still active is checked on the
        # row (`ApiToken.is_active`, the rule of `ApiToken.objects.active()`).
        tokens = ApiToken.objects.select_related("user").filter(key_hash=hash_secret(secret)).order_by()
        token = next(iter(tokens), None)
        if token is None or not token.is_active or not token.user.is_active:
            raise exceptions.AuthenticationFailed(_("Invalid, revoked or expired token."))
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="api"'


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "portal.authentication.ApiTokenAuthentication"
    match_subclasses = True  # identity's subclass (settings) is the one in use
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token made by a platform admin (POST /api/v1/tokens/); shown once.",
        }
