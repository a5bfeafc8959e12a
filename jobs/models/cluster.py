"""What the sync mirrors of the cluster for jobs: their Workloads, their pods and the watches' progress."""

from django.db import models
from django.utils.translation import gettext_lazy as _

from pools.models import Pool
from portal.models import Team, TeamScopedQuerySet

from .job import Job


class Workload(models.Model):
    """Kueue's Workload of a portal job, as the sync last saw it (one row per Workload uid; Kueue makes a new
    Workload when a suspended Job's pod template changes, e.g. when spill-after widens its placement).

    The job's state follows from its newest Workload and its pods (`jobs.settling.settle_jobs`): not admitted →
    Queued with `message` (Kueue's reason), admitted → Admitted / Pending / Running.
    """

    uid = models.CharField(_("UID"), max_length=64, unique=True)
    namespace = models.CharField(_("namespace"), max_length=63)
    name = models.CharField(_("name"), max_length=253)
    job = models.ForeignKey(Job, verbose_name=_("job"), on_delete=models.CASCADE, related_name="workloads")
    cluster_queue = models.CharField(_("cluster queue"), max_length=253, blank=True)
    priority = models.IntegerField(_("priority"), default=0)
    quota_reserved = models.BooleanField(_("quota reserved"), default=False)
    admitted = models.BooleanField(_("admitted"), default=False)
    finished = models.BooleanField(_("finished"), default=False)
    flavors = models.JSONField(
        _("flavors"), default=list, blank=True, help_text=_("Flavors (pool slugs) assigned at admission.")
    )
    message = models.TextField(_("message"), blank=True, help_text=_("Kueue's latest word on why the workload waits."))
    evicted_reason = models.CharField(_("evicted reason"), max_length=80, blank=True)
    evicted_message = models.TextField(_("evicted message"), blank=True)
    requeue_count = models.PositiveIntegerField(_("requeue count"), default=0)
    created_at = models.DateTimeField(
        _("created at"),
    )
    admitted_at = models.DateTimeField(_("admitted at"), null=True, blank=True)
    seen_at = models.DateTimeField(_("seen at"), auto_now=True)

    class Meta:
        verbose_name = _("workload")
        verbose_name_plural = _("workloads")
        ordering = ["created_at"]
        indexes = [
            models.Index(fields=["job", "created_at"], name="jobs_workload_job_created"),
            models.Index(fields=["cluster_queue", "admitted"], name="jobs_workload_queue_admitted"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


# A pod in one of these phases has stopped: its containers are over and it holds nothing any more.
FINISHED_POD_PHASES = ("Succeeded", "Failed")


class PodQuerySet(TeamScopedQuerySet):
    def stopping(self):
        """Pods being deleted that have not stopped yet (`Pod.is_stopping`): preempted, cancelled or out of time,
        they checkpoint within their grace period and hold their GPUs until they stop, and the namespace's
        ResourceQuota counts them until then, though Kueue has given their quota to other jobs already."""
        return self.filter(deleting=True).exclude(phase__in=FINISHED_POD_PHASES)


class Pod(models.Model):
    """A pod that holds or wants GPUs (or that the portal created), as last seen by sync.

    Rows exist while the pod exists in the cluster; its GPU time is kept in billing.UsageInterval.
    """

    uid = models.CharField(_("UID"), max_length=64, unique=True)
    namespace = models.CharField(_("namespace"), max_length=63)
    name = models.CharField(_("name"), max_length=253)
    team = models.ForeignKey(
        Team, verbose_name=_("team"), on_delete=models.SET_NULL, null=True, blank=True, related_name="pods"
    )
    pool = models.ForeignKey(
        Pool, verbose_name=_("pool"), on_delete=models.SET_NULL, null=True, blank=True, related_name="pods"
    )
    job = models.ForeignKey(
        Job, verbose_name=_("job"), on_delete=models.SET_NULL, null=True, blank=True, related_name="pods"
    )
    node_name = models.CharField(_("node name"), max_length=253, blank=True)
    gpus = models.PositiveIntegerField(_("GPUs"), default=0)
    phase = models.CharField(_("phase"), max_length=20)
    scheduled = models.BooleanField(_("scheduled"), default=False)
    pending_reason = models.TextField(_("pending reason"), blank=True)
    created_at = models.DateTimeField(
        _("created at"),
    )
    bound_at = models.DateTimeField(_("bound at"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    seen_at = models.DateTimeField(_("seen at"), auto_now=True)
    completion_index = models.PositiveIntegerField(
        _("completion index"), null=True, blank=True, help_text=_("The pod's rank in an Indexed Job (its node rank).")
    )
    restarts = models.PositiveIntegerField(_("restarts"), default=0, help_text=_("Container restarts in the pod."))
    deleting = models.BooleanField(_("being deleted"), default=False)

    objects = PodQuerySet.as_manager()

    class Meta:
        verbose_name = _("pod")
        verbose_name_plural = _("pods")
        ordering = ["created_at"]
        indexes = [
            models.Index(fields=["phase", "scheduled"], name="jobs_pod_phase_scheduled"),
            models.Index(fields=["node_name"], name="jobs_pod_node"),
            models.Index(fields=["pool", "phase"], name="jobs_pod_pool_phase"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_stopping(self) -> bool:
        """Being deleted and not stopped yet: the row form of `PodQuerySet.stopping`."""
        return self.deleting and self.phase not in FINISHED_POD_PHASES


class SyncState(models.Model):
    """Where the cluster sync stopped reading a resource: it resumes its watch from `resource_version`."""

    resource = models.CharField(_("resource"), max_length=40, unique=True)
    resource_version = models.CharField(_("resource version"), max_length=40, blank=True)
    listed_at = models.DateTimeField(_("listed at"), null=True, blank=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("sync state")
        verbose_name_plural = _("sync states")

    def __str__(self) -> str:
        return f"{self.resource}@{self.resource_version}"
