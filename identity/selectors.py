"""Reads about who may sign in and what the provider's groups give."""

from dataclasses import dataclass, field

from portal.choices import Role
from portal.models import Membership

from .models import GroupRule

ROLE_RANK = {Role.RESEARCHER: 1, Role.LEAD: 2}


@dataclass(frozen=True)
class GrantedAccess:
    """What a set of provider groups gives: a role per team (by team id) and whether platform admin."""

    roles: dict[int, str] = field(default_factory=dict)
    platform_admin: bool = False

    @property
    def anything(self) -> bool:
        return self.platform_admin or bool(self.roles)


def access_for_groups(groups) -> GrantedAccess:
    """The one rule of what groups give: every rule naming one of them; per team the highest role."""
    roles: dict[int, str] = {}
    platform_admin = False
    for rule in GroupRule.objects.for_groups(groups):
        if rule.platform_admin:
            platform_admin = True
        elif ROLE_RANK[rule.role] > ROLE_RANK.get(roles.get(rule.team_id), 0):
            roles[rule.team_id] = rule.role
    return GrantedAccess(roles=roles, platform_admin=platform_admin)


def signs_in_through_provider(user) -> bool:
    """Whether `user` came from the identity provider (has a linked provider account)."""
    return user.socialaccount_set.exists()


def has_lost_every_team(user) -> bool:
    """A provider user who is neither a platform admin nor a member of any team any more: their API tokens are
    refused (checked on each request, identity/authentication.py)."""
    if user.is_admin:
        return False
    return signs_in_through_provider(user) and not Membership.objects.of(user).exists()
