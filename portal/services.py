"""Writes to memberships and API tokens (a team itself is written by `pools.teams`: it is a ClusterQueue and a
LocalQueue in Kueue). The API, Django admin and commands all call these, and each
write leaves an audit entry in the same transaction."""

import secrets
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from . import audit
from .authentication import TOKEN_PREFIX, hash_secret
from .choices import MembershipSource
from .models import ApiToken, Membership, Team, User

# `source` says who decides the membership (an admin by hand, or the identity provider's groups: identity/); a write
# made by the provider at sign-in has no signed-in `user` and names the provider in `actor_name` for the audit log.


@transaction.atomic
def add_member(
    *, team: Team, member: User, role: str, user=None, source: str = MembershipSource.MANUAL, actor_name: str = ""
) -> Membership:
    membership = Membership(team=team, user=member, role=role, source=source)
    membership.full_clean()
    membership.save()
    audit.record(
        actor=user,
        actor_name=actor_name,
        action="membership.create",
        instance=membership,
        before=None,
        after=audit.snapshot(membership),
    )
    return membership


@transaction.atomic
def change_role(
    *, membership: Membership, role: str, user=None, source: str | None = None, actor_name: str = ""
) -> Membership:
    membership = Membership.objects.select_for_update().get(pk=membership.pk)
    before = audit.snapshot(membership)
    membership.role = role
    if source is not None:
        membership.source = source
    membership.full_clean()
    membership.save(update_fields=["role", "source"])
    audit.record(
        actor=user,
        actor_name=actor_name,
        action="membership.update",
        instance=membership,
        before=before,
        after=audit.snapshot(membership),
    )
    return membership


@transaction.atomic
def remove_member(*, membership: Membership, user=None, actor_name: str = "") -> None:
    before = audit.snapshot(membership)
    pk = membership.pk
    membership.delete()
    membership.pk = pk
    audit.record(
        actor=user, actor_name=actor_name, action="membership.delete", instance=membership, before=before, after=None
    )


@transaction.atomic
def create_token(*, owner: User, name: str, expires_at: datetime | None = None, user=None) -> tuple[ApiToken, str]:
    """Make a token acting as `owner`. Returns the token and its secret, which is never stored nor shown again."""
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(
        user=owner,
        name=name,
        prefix=secret[: len(TOKEN_PREFIX) + 6],
        key_hash=hash_secret(secret),
        created_by=user if user is not None and user.is_authenticated else None,
        expires_at=expires_at,
    )
    token.full_clean()
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": _("The token would be expired already: choose a moment in the future.")})
    token.save()
    audit.record(actor=user, action="token.create", instance=token, before=None, after=_token_snapshot(token))
    return token, secret


@transaction.atomic
def revoke_token(*, token: ApiToken, user=None) -> ApiToken:
    """Revoke a token at once; revoking a revoked token changes nothing."""
    token = ApiToken.objects.select_for_update().get(pk=token.pk)
    if token.revoked_at is not None:
        return token
    before = _token_snapshot(token)
    token.revoked_at = timezone.now()
    token.revoked_by = user if user is not None and user.is_authenticated else None
    token.save(update_fields=["revoked_at", "revoked_by"])
    audit.record(actor=user, action="token.revoke", instance=token, before=before, after=_token_snapshot(token))
    return token


def _token_snapshot(token: ApiToken) -> dict:
    data = audit.snapshot(token)
    data.pop("key_hash", None)  # the hash is not secret, but the audit log has no use for it
    return data
