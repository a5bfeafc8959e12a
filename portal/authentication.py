"""API token authentication: `Authorization: Bearer <secret>` (or `Token <secret>`).

The secret is looked up by its SHA-256, so the database never holds a usable secret. A revoked or expired token,
or one whose user is inactive, authenticates nobody (401). `last_used_at` is written at most once a minute per
token, so a busy automation does not turn every read into a write.
"""

import functools
import hashlib
from datetime import timedelta

from django.db import connection
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from .models import ApiToken, User

KEYWORDS = (b"bearer", b"token")
TOKEN_PREFIX = "rsv_"
LAST_USED_RESOLUTION = timedelta(minutes=1)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@functools.cache
def _token_lookup() -> tuple[str, list[str], list[str]]:
    """The SQL that reads a token and its user by key hash (unique: no ordering, no limit), written once from the two
    models' columns, and each model's field names in the order of its columns."""
    token_fields, user_fields = ApiToken._meta.concrete_fields, User._meta.concrete_fields
    quote = connection.ops.quote_name
    columns = [f"t.{quote(f.column)}" for f in token_fields] + [f"u.{quote(f.column)}" for f in user_fields]
    sql = (
        f"SELECT {', '.join(columns)} FROM {quote(ApiToken._meta.db_table)} t "
        f"JOIN {quote(User._meta.db_table)} u ON u.{quote(User._meta.pk.column)} = "
        f"t.{quote(ApiToken._meta.get_field('user').column)} "
        f"WHERE t.{quote(ApiToken._meta.get_field('key_hash').column)} = %s"
    )
    return sql, [f.attname for f in token_fields], [f.attname for f in user_fields]


def token_with_user(key_hash: str) -> ApiToken | None:
    """The token of `key_hash` with its user, or None: what `ApiToken.objects.select_related("user")` reads, in one
    query whose SQL is not compiled again on each request (that compiling cost more CPU than the query; none of the
    two models' fields converts what the database answers, which tests/api/test_auth_and_audit.py holds)."""
    sql, token_names, user_names = _token_lookup()
    with connection.cursor() as cursor:
        cursor.execute(sql, [key_hash])
        row = cursor.fetchone()
    if row is None:
        return None
    token = ApiToken.from_db(connection.alias, token_names, row[: len(token_names)])
    token.user = User.from_db(connection.alias, user_names, row[len(token_names) :])
    return token


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
        # Whether the token is still active is checked on the row (`ApiToken.is_active`, the rule of
        # `ApiToken.objects.active()`).
        token = token_with_user(hash_secret(secret))
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
