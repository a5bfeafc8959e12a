"""Group rules: which of the identity provider's groups give which team role, or platform admin.

A rule names one group (as the provider spells it in the groups claim) and either a team and a role in it, or
platform admin. At every sign-in through the provider the user's memberships become exactly what the rules give for
the groups the provider sent (identity/services.py).
"""

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from portal.choices import Role
from portal.models import Team


class GroupRuleQuerySet(models.QuerySet):
    def for_groups(self, groups) -> "GroupRuleQuerySet":
        """The rules that name one of `groups` (exact, case-sensitive: groups are identifiers at the provider)."""
        return self.filter(group__in=list(groups)).select_related("team")


class GroupRule(models.Model):
    """One provider group → a role in one team, or platform admin. Several rules may name the same group (a group
    may give several teams), and several groups the same team (the highest role wins: lead over researcher)."""

    group = models.CharField(
        _("group"), max_length=200, db_index=True, help_text=_("The group's name as the provider sends it.")
    )
    team = models.ForeignKey(
        Team, verbose_name=_("team"), on_delete=models.CASCADE, null=True, blank=True, related_name="group_rules"
    )
    role = models.CharField(_("role"), max_length=20, choices=Role.choices, blank=True)
    platform_admin = models.BooleanField(
        _("platform admin"), default=False, help_text=_("Members of the group are platform admins.")
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    objects = GroupRuleQuerySet.as_manager()

    class Meta:
        verbose_name = _("group rule")
        verbose_name_plural = _("group rules")
        ordering = ["group", "team__name"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(team__isnull=False) & Q(role__in=Role.values) & Q(platform_admin=False))
                | (Q(team__isnull=True) & Q(role="") & Q(platform_admin=True)),
                name="%(app_label)s_%(class)s_team_role_or_admin",
            ),
            models.UniqueConstraint(
                fields=["group", "team"], condition=Q(team__isnull=False), name="%(app_label)s_%(class)s_unique_team"
            ),
            models.UniqueConstraint(
                fields=["group"], condition=Q(platform_admin=True), name="%(app_label)s_%(class)s_unique_admin"
            ),
        ]

    def __str__(self) -> str:
        if self.platform_admin:
            return f"{self.group} → {_('platform admin')}"
        return f"{self.group} → {self.team} ({self.get_role_display()})"

    def clean(self):
        if self.platform_admin and (self.team_id or self.role):
            raise ValidationError(_("A platform admin rule names no team and no role."))
        if not self.platform_admin and not (self.team_id and self.role):
            raise ValidationError(_("Name a team and a role, or make the group's members platform admins."))
