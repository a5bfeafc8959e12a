"""A team's data in its Kubernetes namespace: the volumes its jobs may mount and the secrets they may reference.

A `TeamVolume` is a PersistentVolumeClaim of the team namespace: one that already exists, or one the portal creates.
Its state is what the cluster last said of the claim (pending, bound, lost, or failed with the reason), recorded
by the `teamdata` tasks. A `TeamSecret` is a Kubernetes Secret of the team namespace that the portal wrote; the
row keeps its name, kind, keys, and who made and last rotated it — never a value, which exists only in the
cluster. Jobs name volumes and secrets; another team's are unknown to them (`check_job_references`).
"""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal.models import Team, TeamScopedQuerySet

from .choices import VOLUME_TRANSITIONS, AccessMode, SecretKind, VolumeSource, VolumeState

OBJECT_NAME_VALIDATOR = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    _("Use up to 63 lowercase letters, digits and dashes, starting and ending with a letter or digit."),
)
STORAGE_CLASS_VALIDATOR = RegexValidator(
    r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$", _("Not a storage class name (lowercase letters, digits, '-' and '.').")
)
MAX_VOLUME_GIB = 1024 * 1024


class TeamDataQuerySet(TeamScopedQuerySet):
    """`visible_to`: of the teams `user` belongs to (all for a platform admin): members read them and use them in
    jobs."""

    def managed_by(self, user) -> "TeamDataQuerySet":
        """Of the teams `user` leads (all for a platform admin): those they may register, rotate and remove."""
        return self.led_by(user)


class TeamVolume(models.Model):
    """A PersistentVolumeClaim of the team namespace that the team's jobs may mount (see module docstring).

    `name` is the claim's name. For a claim the portal creates, size, access mode and storage class are what it
    asks for; for an existing one they are read back from the cluster (`capacity`, `access_mode`)."""

    team = models.ForeignKey(Team, verbose_name=_("team"), on_delete=models.CASCADE, related_name="volumes")
    name = models.CharField(_("claim name"), max_length=63, validators=[OBJECT_NAME_VALIDATOR])
    source = models.CharField(_("source"), max_length=20, choices=VolumeSource.choices, default=VolumeSource.CREATED)
    size_gib = models.PositiveIntegerField(
        _("size (GiB)"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_VOLUME_GIB)],
        help_text=_("For a new claim."),
    )
    access_mode = models.CharField(
        _("access mode"), max_length=20, choices=AccessMode.choices, default=AccessMode.READ_WRITE_ONCE
    )
    storage_class = models.CharField(
        _("storage class"),
        max_length=253,
        blank=True,
        validators=[STORAGE_CLASS_VALIDATOR],
        help_text=_("For a new claim; empty: the cluster's default class."),
    )
    read_only_for_researchers = models.BooleanField(
        _("read-only for researchers"),
        default=False,
        help_text=_("Researchers' jobs mount it read-only, whatever they ask; leads and admins may still write."),
    )
    state = models.CharField(_("state"), max_length=20, choices=VolumeState.choices, default=VolumeState.PENDING)
    state_reason = models.TextField(_("reason"), blank=True)
    state_changed_at = models.DateTimeField(_("state changed"), default=timezone.now)
    capacity = models.CharField(_("capacity"), max_length=40, blank=True, help_text=_("As the cluster reports it."))
    checked_at = models.DateTimeField(_("checked at"), null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("registered by"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    created_at = models.DateTimeField(_("registered at"), auto_now_add=True)

    objects = TeamDataQuerySet.as_manager()

    class Meta:
        verbose_name = _("team volume")
        verbose_name_plural = _("team volumes")
        ordering = ["team__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="%(app_label)s_%(class)s_unique_team_name"),
            models.CheckConstraint(
                condition=Q(state__in=VolumeState.values), name="%(app_label)s_%(class)s_valid_state"
            ),
            models.CheckConstraint(
                condition=~Q(source=VolumeSource.CREATED) | Q(size_gib__gt=0),
                name="%(app_label)s_%(class)s_created_has_size",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.team})"

    def clean(self) -> None:
        if self.source == VolumeSource.CREATED and not self.size_gib:
            raise ValidationError({"size_gib": _("Say how large the new claim is, in GiB.")})

    def transition_to(self, state: str, *, reason: str = "", at=None) -> bool:
        """Record the claim's state as the cluster reports it; True when the state or its reason changed. The
        caller holds a row lock and saves."""
        if state == self.state:
            changed = reason != self.state_reason
            self.state_reason = reason
            return changed
        if state not in VOLUME_TRANSITIONS[self.state]:
            raise ValueError(f"volume {self.pk}: {self.state} -> {state} is not a volume state")
        self.state, self.state_reason, self.state_changed_at = state, reason, at or timezone.now()
        return True


class TeamSecret(models.Model):
    """A Kubernetes Secret of the team namespace, written through the portal (see module docstring).

    Never holds a value: `keys` are the names of the Secret's data keys (for image pull credentials,
    `.dockerconfigjson`), `registry` the registry host the credentials are for."""

    team = models.ForeignKey(Team, verbose_name=_("team"), on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(_("name"), max_length=63, validators=[OBJECT_NAME_VALIDATOR])
    kind = models.CharField(_("kind"), max_length=20, choices=SecretKind.choices)
    keys = models.JSONField(_("keys"), default=list, blank=True)
    registry = models.CharField(_("registry"), max_length=253, blank=True)
    version = models.PositiveIntegerField(_("version"), default=1, help_text=_("1, then one more per rotation."))
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("created by"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    rotated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("rotated by"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    rotated_at = models.DateTimeField(_("rotated at"), null=True, blank=True)

    objects = TeamDataQuerySet.as_manager()

    class Meta:
        verbose_name = _("team secret")
        verbose_name_plural = _("team secrets")
        ordering = ["team__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="%(app_label)s_%(class)s_unique_team_name"),
            models.CheckConstraint(condition=Q(kind__in=SecretKind.values), name="%(app_label)s_%(class)s_valid_kind"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.team})"
