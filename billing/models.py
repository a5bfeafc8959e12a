"""Usage as metered: one row per GPU pod's stay on a node.

`UsageInterval` is written by the cluster sync (jobs/sync) and read by metering. A pod's interval is
[started_at, ended_at): from when it was bound to a node to when it terminated; `ended_at` is NULL while it still
holds its GPUs. The pod's UID is unique, so a sync that sees the same pod twice (after its own restart, or a
relist) updates the one row instead of counting it again.
"""

from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext_lazy as _

from pools.models import Pool
from portal.models import Team


class UsageIntervalQuerySet(models.QuerySet):
    def visible_to(self, user) -> "UsageIntervalQuerySet":
        return self.filter(team__in=Team.objects.visible_to(user))

    def overlapping(self, starts_at, ends_at) -> "UsageIntervalQuerySet":
        return self.filter(Q(ended_at__isnull=True) | Q(ended_at__gt=starts_at), started_at__lt=ends_at)


class UsageInterval(models.Model):
    """One GPU pod's [started_at, ended_at) on a node of `pool`, holding `gpus` GPUs, attributed to `team`."""

    pod_uid = models.CharField(_("pod UID"), max_length=64, unique=True)
    namespace = models.CharField(_("namespace"), max_length=63)
    pod_name = models.CharField(_("pod"), max_length=253)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, null=True, blank=True, related_name="usage_intervals")
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="usage_intervals")
    node_name = models.CharField(_("node"), max_length=253)
    job = models.ForeignKey(
        "jobs.Job", on_delete=models.SET_NULL, null=True, blank=True, related_name="usage_intervals"
    )
    gpus = models.PositiveIntegerField(_("GPUs"))
    started_at = models.DateTimeField(_("started"))
    ended_at = models.DateTimeField(_("ended"), null=True, blank=True)

    objects = UsageIntervalQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gt=0), name="%(app_label)s_%(class)s_gpus_positive"),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=F("started_at")),
                name="%(app_label)s_%(class)s_ends_after_start",
            ),
        ]
        indexes = [
            models.Index(fields=["team", "pool", "started_at"], name="billing_interval_team_pool"),
            models.Index(fields=["pool", "started_at"], name="billing_interval_pool_start"),
            models.Index(fields=["ended_at"], name="billing_interval_ended"),
        ]

    def __str__(self) -> str:
        return f"{self.pod_name} · {self.gpus} GPUs on {self.node_name}"
