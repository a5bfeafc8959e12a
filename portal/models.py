"""Users, teams and memberships: who may see and do what.

A user sees the teams they belong to; a platform admin sees everything. Everything scoped to a team (jobs,
quotas, reservations, usage) filters through `Team.objects.visible_to(user)`, so what a user may not see is never
fetched (and answers 404).
"""

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.contrib.postgres.fields import ArrayField
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .choices import JobMail, MembershipSource, QueueingStrategy, Role

SLUG_VALIDATOR = RegexValidator(
    r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$",
    _("Use 1-40 lowercase letters, digits and dashes, starting and ending with a letter or digit."),
)


class User(AbstractUser):
    """A person who logs in. `is_platform_admin` grants every team and the admin functions."""

    is_platform_admin = models.BooleanField(
        _("platform admin"), default=False, help_text=_("Manages pools, reservations, quotas and teams.")
    )
    language = models.CharField(
        _("language"), max_length=10, choices=settings.LANGUAGES, default="en", help_text=_("Language of the portal.")
    )
    is_break_glass = models.BooleanField(
        _("break-glass account"),
        default=False,
        help_text=_("May sign in with a local password even when local passwords are turned off (an emergency admin)."),
    )
    notify_default = ArrayField(
        models.CharField(max_length=10, choices=JobMail.choices),
        verbose_name=_("e-mail me about my jobs"),
        default=list,
        blank=True,
        help_text=_(
            "What a job you submit asks for unless you choose otherwise on the form; each job's page can change it."
        ),
    )

    class Meta(AbstractUser.Meta):
        constraints = [
            models.CheckConstraint(
                condition=Q(notify_default__contained_by=JobMail.values),
                name="%(app_label)s_%(class)s_valid_notify_default",
            ),
        ]

    @property
    def is_admin(self) -> bool:
        return self.is_platform_admin or self.is_superuser


class TeamQuerySet(models.QuerySet):
    def with_member(self, user, *, roles=None) -> "TeamQuerySet":
        """Teams `user` is a member of (in one of `roles` when given): `MembershipQuerySet.of`, whatever the user's
        admin rights."""
        return self.filter(pk__in=Membership.objects.of(user, roles=roles).values("team"))

    def visible_to(self, user) -> "TeamQuerySet":
        """Teams `user` may see: all of them for a platform admin, else the teams they are a member of."""
        if user.is_authenticated and user.is_admin:
            return self.all()
        return self.with_member(user)

    def led_by(self, user) -> "TeamQuerySet":
        """Teams whose billing and usage `user` may see: led teams, or all for an admin."""
        if user.is_authenticated and user.is_admin:
            return self.all()
        return self.with_member(user, roles=[Role.LEAD])


class TeamScopedQuerySet(models.QuerySet):
    """Rows that belong to one team (a `team` foreign key): what a user may see of them is what they may see of
    their team. Every app's team-scoped queryset inherits these two rules rather than spelling them again."""

    def visible_to(self, user):
        """Rows of the teams `user` belongs to (all for a platform admin): `TeamQuerySet.visible_to`."""
        return self.filter(team__in=Team.objects.visible_to(user))

    def led_by(self, user):
        """Rows of the teams `user` leads (all for a platform admin): `TeamQuerySet.led_by`."""
        return self.filter(team__in=Team.objects.led_by(user))


class Team(models.Model):
    """A group of people that shares quotas, reservations and a Kubernetes namespace (named from its slug)."""

    slug = models.SlugField(_("slug"), max_length=40, unique=True, validators=[SLUG_VALIDATOR])
    name = models.CharField(_("name"), max_length=100)
    description = models.TextField(_("description"), blank=True)
    queueing_strategy = models.CharField(
        _("queueing order"),
        max_length=20,
        choices=QueueingStrategy.choices,
        default=QueueingStrategy.STRICT_FIFO,
        help_text=_(
            "Strict order keeps a large job from being overtaken by smaller ones behind it; best effort uses free "
            "GPUs sooner."
        ),
    )
    allow_high_priority = models.BooleanField(
        _("members may use high priority"),
        default=False,
        help_text=_("High priority can preempt other work. Team leads may always use it; this lets every member."),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, verbose_name=_("members"), through="Membership", related_name="teams"
    )

    objects = TeamQuerySet.as_manager()

    class Meta:
        verbose_name = _("team")
        verbose_name_plural = _("teams")
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(queueing_strategy__in=QueueingStrategy.values),
                name="%(app_label)s_%(class)s_valid_queueing_strategy",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def has_member(self, user, *, roles=None) -> bool:
        """Whether `user` is a member of the team (in one of `roles` when given): `MembershipQuerySet.of`. Admin
        rights are not membership: callers that let admins in say so themselves."""
        return Membership.objects.of(user, roles=roles).filter(team=self).exists()

    @property
    def namespace(self) -> str:
        return f"{settings.TEAM_NAMESPACE_PREFIX}{self.slug}"


class MembershipQuerySet(models.QuerySet):
    def of(self, user, *, roles=None) -> "MembershipQuerySet":
        """The one rule of "is a member of the team": the memberships of `user` (none for a visitor who is not signed
        in), only those in one of `roles` when given. Every visibility rule reads it: `TeamQuerySet.with_member`,
        `visible_to`, `led_by`, `Team.has_member`, and through them every app's `visible_to`."""
        if not user.is_authenticated:
            return self.none()
        memberships = self.filter(user=user)
        return memberships if roles is None else memberships.filter(role__in=list(roles))

    def visible_to(self, user) -> "MembershipQuerySet":
        """Memberships of the teams `user` may see (who is in them, with which role)."""
        return self.filter(team__in=Team.objects.visible_to(user))


class Membership(models.Model):
    """One user in one team with one role; a user may belong to several teams."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("user"), on_delete=models.CASCADE, related_name="memberships"
    )
    team = models.ForeignKey(Team, verbose_name=_("team"), on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(_("role"), max_length=20, choices=Role.choices, default=Role.RESEARCHER)
    source = models.CharField(
        _("source"),
        max_length=20,
        choices=MembershipSource.choices,
        default=MembershipSource.MANUAL,
        help_text=_("The identity provider's groups decide a provider user's memberships at every sign-in."),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    objects = MembershipQuerySet.as_manager()

    class Meta:
        verbose_name = _("membership")
        verbose_name_plural = _("memberships")
        ordering = ["team__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="%(app_label)s_%(class)s_unique_user_team"),
            models.CheckConstraint(condition=Q(role__in=Role.values), name="%(app_label)s_%(class)s_valid_role"),
            models.CheckConstraint(
                condition=Q(source__in=MembershipSource.values), name="%(app_label)s_%(class)s_valid_source"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.get_role_display()})"


class AuditEntry(models.Model):
    """Who changed what, when: one row per write made through a service, with the values before and after.

    Append-only: a database trigger refuses UPDATE and DELETE (portal migration `audit_append_only`), except the
    one update deleting a user makes (`actor` set to NULL); `actor_username` keeps who it was. Snapshots never hold
    secrets: environment values are redacted and password hashes hidden (`portal.audit.snapshot`)."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("actor"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="audit_entries",
    )
    actor_username = models.CharField(_("actor"), max_length=150, blank=True, help_text=_("Empty: the system."))
    action = models.CharField(_("action"), max_length=60)
    object_type = models.CharField(_("object type"), max_length=60)
    object_id = models.CharField(_("object id"), max_length=60)
    object_repr = models.CharField(_("object"), max_length=200)
    before = models.JSONField(_("before"), null=True, blank=True)
    after = models.JSONField(_("after"), null=True, blank=True)
    at = models.DateTimeField(_("at"), auto_now_add=True, db_index=True)

    class Meta:
        verbose_name = _("audit entry")
        verbose_name_plural = _("audit entries")
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id"], name="portal_audit_object")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor_username or 'system'} {self.action} {self.object_repr}"


class ApiTokenQuerySet(models.QuerySet):
    def active(self) -> "ApiTokenQuerySet":
        from django.utils import timezone

        now = timezone.now()
        return self.filter(revoked_at__isnull=True).filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))


class ApiToken(models.Model):
    """A secret that lets a program act as `user` in the REST API, created and revoked by platform admins.

    Only the SHA-256 of the secret is stored: the secret is shown once, when the token is made. A token has
    exactly its user's permissions; a revoked or expired token authenticates nobody.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("user"), on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(_("name"), max_length=100, help_text=_("What the token is for, e.g. 'CI quota sync'."))
    prefix = models.CharField(
        _("prefix"), max_length=12, help_text=_("The secret's first characters, to recognise it.")
    )
    key_hash = models.CharField(_("key hash"), max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("created by"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    expires_at = models.DateTimeField(_("expires at"), null=True, blank=True)
    last_used_at = models.DateTimeField(_("last used"), null=True, blank=True)
    revoked_at = models.DateTimeField(_("revoked at"), null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("revoked by"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(expires_at__isnull=True) | Q(expires_at__gt=F("created_at")),
                name="%(app_label)s_%(class)s_expires_after_created",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…) for {self.user}"

    @property
    def is_active(self) -> bool:
        from django.utils import timezone

        return self.revoked_at is None and (self.expires_at is None or self.expires_at > timezone.now())


class OutboxMessage(models.Model):
    """A Celery task to run once the transaction that wrote this row has committed (see portal/outbox.py).

    The row exists exactly when the change that wants the task committed; `sent_at` is set once the message is in
    the broker. Pending rows are published by `manage.py dispatch_outbox` whenever the broker answers again.
    """

    task = models.CharField(_("task"), max_length=200)
    args = models.JSONField(_("args"), default=list, blank=True)
    kwargs = models.JSONField(_("kwargs"), default=dict, blank=True)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    sent_at = models.DateTimeField(_("sent at"), null=True, blank=True)
    # Publications refused for a reason other than an unreachable broker (e.g. a task that no longer exists).
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    last_error = models.TextField(_("last error"), blank=True)

    class Meta:
        verbose_name = _("outbox message")
        verbose_name_plural = _("outbox messages")
        ordering = ["id"]
        indexes = [
            models.Index(fields=["id"], condition=Q(sent_at__isnull=True), name="portal_outbox_pending"),
            models.Index(fields=["task", "created_at"], name="portal_outbox_task_created"),
        ]

    def __str__(self) -> str:
        state = f"sent {self.sent_at:%H:%M:%S}" if self.sent_at else "pending"
        return f"{self.task}{tuple(self.args)} ({state})"
