"""Writes of sign-in: group rules (admin and API), and applying the provider's groups at every sign-in.

The provider wins for a user who signs in through it: after each sign-in their memberships are exactly what the
group rules give for the groups the provider sent. A membership an admin set by hand on such a user (source
"manual") is taken over (source "provider", the rules' role) when the rules give that team, and removed when they
do not. Every change is audited with the provider as the actor ("oidc:<issuer>").
"""

from django.contrib.auth import password_validation
from django.db import transaction

from portal import audit
from portal import services as portal_services
from portal.choices import MembershipSource
from portal.models import Membership, Team, User

from .models import GroupRule
from .selectors import GrantedAccess, access_for_groups


@transaction.atomic
def create_rule(*, group: str, team: Team | None = None, role: str = "", platform_admin: bool = False, user=None):
    rule = GroupRule(group=group, team=team, role=role, platform_admin=platform_admin)
    rule.full_clean()
    rule.save()
    audit.record(actor=user, action="grouprule.create", instance=rule, before=None, after=audit.snapshot(rule))
    return rule


@transaction.atomic
def update_rule(*, rule: GroupRule, user=None, **values) -> GroupRule:
    rule = GroupRule.objects.select_for_update().get(pk=rule.pk)
    before = audit.snapshot(rule)
    for name, value in values.items():
        setattr(rule, name, value)
    rule.full_clean()
    rule.save()
    audit.record(actor=user, action="grouprule.update", instance=rule, before=before, after=audit.snapshot(rule))
    return rule


@transaction.atomic
def delete_rule(*, rule: GroupRule, user=None) -> None:
    before, pk = audit.snapshot(rule), rule.pk
    rule.delete()
    rule.pk = pk
    audit.record(actor=user, action="grouprule.delete", instance=rule, before=before, after=None)


@transaction.atomic
def apply_groups(*, member: User, groups: list[str], provider: str) -> GrantedAccess:
    """Make `member`'s memberships and platform-admin flag what the rules give for `groups`; return what they give.

    `provider` names the actor in the audit log. Idempotent: a second call with the same groups changes nothing.
    """
    access = access_for_groups(groups)
    member = User.objects.select_for_update().get(pk=member.pk)
    # OF self: Membership's ordering joins the teams, whose rows would be locked too (and every job insert of them).
    held = {m.team_id: m for m in Membership.objects.of(member).select_for_update(of=("self",))}
    for team_id, membership in held.items():
        wanted = access.roles.get(team_id)
        if wanted is None:
            portal_services.remove_member(membership=membership, actor_name=provider)
        elif membership.role != wanted or membership.source != MembershipSource.PROVIDER:
            portal_services.change_role(
                membership=membership, role=wanted, source=MembershipSource.PROVIDER, actor_name=provider
            )
    teams = Team.objects.in_bulk([team_id for team_id in access.roles if team_id not in held])
    for team_id, team in teams.items():
        portal_services.add_member(
            team=team, member=member, role=access.roles[team_id], source=MembershipSource.PROVIDER, actor_name=provider
        )
    # All three flags, not only platform admin: one left set by hand in Django admin (superuser ticked, platform admin
    # not) would keep `User.is_admin` true whatever the groups say.
    flags = (member.is_platform_admin, member.is_staff, member.is_superuser)
    if flags != (access.platform_admin,) * 3 and not member.is_break_glass:
        before = audit.snapshot(member)
        # Platform admins use Django admin too (staff); a provider user loses both with the group.
        member.is_platform_admin = member.is_staff = member.is_superuser = access.platform_admin
        member.save(update_fields=["is_platform_admin", "is_staff", "is_superuser"])
        audit.record(
            actor=None,
            actor_name=provider,
            action="user.update",
            instance=member,
            before=before,
            after=audit.snapshot(member),
        )
    return access


@transaction.atomic
def save_break_glass_admin(*, username: str, password: str, email: str = "", actor_name: str = "") -> tuple[User, bool]:
    """Make `username` a break-glass platform admin with `password` (created when missing); return it and whether it
    was created. The password is checked by AUTH_PASSWORD_VALIDATORS first (ValidationError). Break-glass: it signs
    in with this password also when local passwords are off (identity/backends.py), and the provider's groups never
    take its admin flags away (apply_groups)."""
    member = User.objects.select_for_update().filter(username=username).first()
    created = member is None
    if created:
        member = User(username=username)
    before = None if created else audit.snapshot(member)
    if email:
        member.email = email
    password_validation.validate_password(password, member)
    member.set_password(password)
    member.is_active = member.is_break_glass = True
    member.is_platform_admin = member.is_staff = member.is_superuser = True
    member.full_clean()
    member.save()
    audit.record(
        actor=None,
        actor_name=actor_name,
        action="user.create" if created else "user.update",
        instance=member,
        before=before,
        after=audit.snapshot(member),
    )
    return member, created
