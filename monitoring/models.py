"""GPU telemetry rolled up from Prometheus, alert rules and the alerts they raise.

Telemetry: every collection step (aligned to `MONITORING_STEP_SECONDS`) reads the DCGM series from Prometheus
once and writes what pages need, so no page ever queries Prometheus: the latest reading of each GPU
(`GpuReading`), one `UtilisationSample` per pool, team and job for the step, a running summary per job
(`JobUtilisation`, which carries the idle flag) and a `TelemetryRun` saying whether the step was collected.

Alerts: an `AlertRule` is a threshold and a "for" duration for one kind of alert; the row without pool and team
is the default, a row with a pool or a team overrides it there. An `Alert` is one subject (a GPU, a pool, a team,
a job, a pod) breaching its rule: pending while the condition holds for less than "for", then firing, then
resolved when the condition clears; at most one open alert per kind and subject (a DB constraint). Each firing
and each resolution is one `AlertNotification` to the webhook.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from jobs.models import Job, Words
from pools.models import Pool
from portal.models import Team

from .choices import OPEN_STATES, AlertKind, AlertState, NotificationStatus, Scope, Severity


class TelemetryRun(models.Model):
    """One collection step: whether Prometheus answered, and how many GPUs it reported."""

    at = models.DateTimeField(_("step"), unique=True)
    collected_at = models.DateTimeField(_("collected at"))
    ok = models.BooleanField(_("ok"), default=False)
    error = models.TextField(_("error"), blank=True)
    gpus = models.PositiveIntegerField(_("GPUs"), default=0)
    duration_ms = models.PositiveIntegerField(_("duration ms"), default=0)

    class Meta:
        verbose_name = _("telemetry run")
        verbose_name_plural = _("telemetry runs")
        ordering = ["-at"]

    def __str__(self) -> str:
        return f"telemetry at {self.at:%Y-%m-%d %H:%M:%S} ({'ok' if self.ok else 'failed'})"


class GpuReading(models.Model):
    """The latest DCGM reading of one GPU (node and index), and who held it then."""

    node_name = models.CharField(_("node name"), max_length=253)
    gpu = models.PositiveSmallIntegerField(
        _("GPU"),
    )
    uuid = models.CharField(_("uuid"), max_length=64, blank=True)
    model_name = models.CharField(_("model name"), max_length=100, blank=True)
    pool = models.ForeignKey(
        Pool, verbose_name=_("pool"), on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    team = models.ForeignKey(
        Team, verbose_name=_("team"), on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    job = models.ForeignKey(
        Job, verbose_name=_("job"), on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    pod_namespace = models.CharField(_("pod namespace"), max_length=63, blank=True)
    pod_name = models.CharField(_("pod name"), max_length=253, blank=True)
    util_percent = models.FloatField(_("utilisation percent"), null=True)
    memory_copy_util_percent = models.FloatField(_("memory copy utilisation percent"), null=True)
    fb_used_mib = models.FloatField(_("framebuffer used MiB"), null=True)
    fb_free_mib = models.FloatField(_("framebuffer free MiB"), null=True)
    temperature_c = models.FloatField(_("temperature (°C)"), null=True)
    power_watts = models.FloatField(_("power watts"), null=True)
    gr_engine_active = models.FloatField(_("gr engine active"), null=True)
    at = models.DateTimeField(
        _("at"),
    )

    class Meta:
        verbose_name = _("GPU reading")
        verbose_name_plural = _("GPU readings")
        ordering = ["node_name", "gpu"]
        constraints = [
            models.UniqueConstraint(fields=["node_name", "gpu"], name="%(app_label)s_%(class)s_unique_node_gpu"),
        ]

    def __str__(self) -> str:
        return f"{self.node_name}/{self.gpu}"

    @property
    def memory_used_percent(self) -> float | None:
        if self.fb_used_mib is None or self.fb_free_mib is None or self.fb_used_mib + self.fb_free_mib <= 0:
            return None
        return 100.0 * self.fb_used_mib / (self.fb_used_mib + self.fb_free_mib)


class UtilisationSample(models.Model):
    """The GPUs of one pool, team or job at one step: how many reported, their mean and peak figures."""

    scope = models.CharField(_("scope"), max_length=10, choices=Scope.choices)
    pool = models.ForeignKey(
        Pool, verbose_name=_("pool"), on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    team = models.ForeignKey(
        Team, verbose_name=_("team"), on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    job = models.ForeignKey(
        Job, verbose_name=_("job"), on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    at = models.DateTimeField(
        _("at"),
    )
    gpus = models.PositiveIntegerField(_("GPUs reporting"))
    gpus_busy = models.PositiveIntegerField(_("GPUs held by pods"))
    # None when no GPU of the sample reported its utilisation (not 0 %: nothing to alert on)
    util_avg = models.FloatField(_("utilisation avg"), null=True)
    util_max = models.FloatField(_("utilisation max"), null=True)
    memory_used_percent_avg = models.FloatField(_("memory used percent avg"), null=True)
    memory_used_percent_max = models.FloatField(_("memory used percent max"), null=True)
    temperature_max = models.FloatField(_("temperature max"), null=True)
    power_watts = models.FloatField(_("power watts"), null=True)

    class Meta:
        verbose_name = _("utilisation sample")
        verbose_name_plural = _("utilisation samples")
        ordering = ["at"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(scope=Scope.POOL, pool__isnull=False, team__isnull=True, job__isnull=True)
                    | Q(scope=Scope.TEAM, pool__isnull=True, team__isnull=False, job__isnull=True)
                    | Q(scope=Scope.JOB, pool__isnull=True, team__isnull=True, job__isnull=False)
                ),
                name="%(app_label)s_%(class)s_scope_matches_subject",
            ),
            models.UniqueConstraint(
                fields=["pool", "at"], condition=Q(scope=Scope.POOL), name="%(app_label)s_%(class)s_unique_pool_at"
            ),
            models.UniqueConstraint(
                fields=["team", "at"], condition=Q(scope=Scope.TEAM), name="%(app_label)s_%(class)s_unique_team_at"
            ),
            models.UniqueConstraint(
                fields=["job", "at"], condition=Q(scope=Scope.JOB), name="%(app_label)s_%(class)s_unique_job_at"
            ),
        ]
        indexes = [models.Index(fields=["scope", "at"], name="monitoring_sample_scope_at")]

    def __str__(self) -> str:
        util = "no utilisation" if self.util_avg is None else f"{self.util_avg:.0f}%"
        return f"{self.scope} {self.pool_id or self.team_id or self.job_id} at {self.at:%H:%M:%S}: {util}"


class JobUtilisation(models.Model):
    """A job's GPU utilisation over its life, and since when it has been idle (None while it works)."""

    job = models.OneToOneField(Job, verbose_name=_("job"), on_delete=models.CASCADE, related_name="gpu_utilisation")
    samples = models.PositiveIntegerField(_("samples"), default=0)
    util_sum = models.FloatField(_("utilisation sum"), default=0.0)
    last_util = models.FloatField(_("last utilisation"), null=True)
    last_memory_used_percent = models.FloatField(_("last memory used percent"), null=True)
    gpus = models.PositiveIntegerField(_("GPUs"), default=0)
    first_at = models.DateTimeField(_("first at"), null=True)
    last_at = models.DateTimeField(_("last at"), null=True)
    idle_since = models.DateTimeField(_("idle since"), null=True, blank=True)

    class Meta:
        verbose_name = _("job utilisation")
        verbose_name_plural = _("job utilisation")

    def __str__(self) -> str:
        return f"utilisation of job {self.job_id}"

    @property
    def util_avg(self) -> float | None:
        return self.util_sum / self.samples if self.samples else None


class AlertRuleQuerySet(models.QuerySet):
    def defaults(self) -> "AlertRuleQuerySet":
        return self.filter(pool__isnull=True, team__isnull=True)


class AlertRule(models.Model):
    """A threshold and a "for" duration for one kind of alert: the default (no pool, no team), or an override for
    one pool or one team. A team's override wins over a pool's, which wins over the default."""

    kind = models.CharField(_("alert"), max_length=40, choices=AlertKind.choices)
    pool = models.ForeignKey(
        Pool, verbose_name=_("pool"), on_delete=models.CASCADE, null=True, blank=True, related_name="alert_rules"
    )
    team = models.ForeignKey(
        Team, verbose_name=_("team"), on_delete=models.CASCADE, null=True, blank=True, related_name="alert_rules"
    )
    threshold = models.DecimalField(_("threshold"), max_digits=10, decimal_places=2)
    for_seconds = models.PositiveIntegerField(
        _("for (seconds)"), default=0, help_text=_("How long the condition must hold before the alert fires.")
    )
    severity = models.CharField(_("severity"), max_length=10, choices=Severity.choices, default=Severity.WARNING)
    enabled = models.BooleanField(_("enabled"), default=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("updated by"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )

    objects = AlertRuleQuerySet.as_manager()

    class Meta:
        verbose_name = _("alert rule")
        verbose_name_plural = _("alert rules")
        ordering = ["kind", "pool__name", "team__name"]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=AlertKind.values), name="%(app_label)s_%(class)s_valid_kind"),
            models.CheckConstraint(
                condition=Q(pool__isnull=True) | Q(team__isnull=True), name="%(app_label)s_%(class)s_pool_or_team"
            ),
            models.CheckConstraint(
                condition=Q(threshold__gte=0), name="%(app_label)s_%(class)s_threshold_not_negative"
            ),
            models.UniqueConstraint(
                fields=["kind"],
                condition=Q(pool__isnull=True, team__isnull=True),
                name="%(app_label)s_%(class)s_one_default_per_kind",
            ),
            models.UniqueConstraint(
                fields=["kind", "pool"],
                condition=Q(pool__isnull=False),
                name="%(app_label)s_%(class)s_one_per_kind_pool",
            ),
            models.UniqueConstraint(
                fields=["kind", "team"],
                condition=Q(team__isnull=False),
                name="%(app_label)s_%(class)s_one_per_kind_team",
            ),
        ]

    def __str__(self) -> str:
        where = f" for pool {self.pool}" if self.pool_id else f" for team {self.team}" if self.team_id else ""
        return f"{self.get_kind_display()}{where}"

    @property
    def scope_label(self) -> str:
        if self.pool_id:
            return _("pool %(pool)s") % {"pool": self.pool}
        if self.team_id:
            return _("team %(team)s") % {"team": self.team}
        return _("default")


class AlertQuerySet(models.QuerySet):
    def visible_to(self, user) -> "AlertQuerySet":
        """Alerts of the user's teams, and those that belong to no team and no other team's job (pools and free
        GPUs are everyone's business, PRODUCT.md roles); all for a platform admin."""
        if not user.is_authenticated:
            return self.none()
        if user.is_admin:
            return self.all()
        teams = Team.objects.visible_to(user)
        return self.filter(Q(team__in=teams) | Q(team__isnull=True) & (Q(job__isnull=True) | Q(job__team__in=teams)))

    def open(self) -> "AlertQuerySet":
        return self.filter(state__in=OPEN_STATES)

    def firing(self) -> "AlertQuerySet":
        return self.filter(state=AlertState.FIRING)


class Alert(models.Model):
    """One subject breaching one rule: pending → firing → resolved (pending ones that clear are dropped)."""

    kind = models.CharField(_("kind"), max_length=40, choices=AlertKind.choices)
    rule = models.ForeignKey(
        AlertRule, verbose_name=_("rule"), on_delete=models.SET_NULL, null=True, blank=True, related_name="alerts"
    )
    subject_key = models.CharField(_("subject key"), max_length=300)
    subject = models.CharField(_("subject"), max_length=300, help_text=_("In English; pages show it in the reader's."))
    subject_id = models.CharField(_("subject message id"), max_length=200, blank=True)
    subject_args = models.JSONField(_("subject message arguments"), default=dict, blank=True)
    pool = models.ForeignKey(
        Pool, verbose_name=_("pool"), on_delete=models.SET_NULL, null=True, blank=True, related_name="alerts"
    )
    team = models.ForeignKey(
        Team, verbose_name=_("team"), on_delete=models.SET_NULL, null=True, blank=True, related_name="alerts"
    )
    job = models.ForeignKey(
        Job, verbose_name=_("job"), on_delete=models.SET_NULL, null=True, blank=True, related_name="alerts"
    )
    state = models.CharField(_("state"), max_length=10, choices=AlertState.choices, default=AlertState.PENDING)
    severity = models.CharField(_("severity"), max_length=10, choices=Severity.choices, default=Severity.WARNING)
    value = models.FloatField(_("value"))
    peak_value = models.FloatField(_("worst value"))
    threshold = models.DecimalField(_("threshold"), max_digits=10, decimal_places=2)
    for_seconds = models.PositiveIntegerField(_("for seconds"), default=0)
    summary = models.CharField(_("summary"), max_length=300, help_text=_("In English; pages show it in the reader's."))
    summary_id = models.CharField(_("summary message id"), max_length=200, blank=True)
    summary_args = models.JSONField(_("summary message arguments"), default=dict, blank=True)
    active_since = models.DateTimeField(_("condition since"))
    fired_at = models.DateTimeField(_("fired"), null=True, blank=True)
    resolved_at = models.DateTimeField(_("resolved"), null=True, blank=True)
    last_evaluated_at = models.DateTimeField(
        _("last evaluated at"),
    )

    objects = AlertQuerySet.as_manager()

    class Meta:
        verbose_name = _("alert")
        verbose_name_plural = _("alerts")
        ordering = ["-fired_at", "-active_since", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=AlertState.values), name="%(app_label)s_%(class)s_valid_state"
            ),
            models.UniqueConstraint(
                fields=["kind", "subject_key"],
                condition=Q(state__in=OPEN_STATES),
                name="%(app_label)s_%(class)s_one_open_per_subject",
            ),
            models.CheckConstraint(
                condition=(
                    Q(state=AlertState.PENDING, fired_at__isnull=True, resolved_at__isnull=True)
                    | Q(state=AlertState.FIRING, fired_at__isnull=False, resolved_at__isnull=True)
                    | Q(state=AlertState.RESOLVED, fired_at__isnull=False, resolved_at__isnull=False)
                ),
                name="%(app_label)s_%(class)s_times_match_state",
            ),
        ]
        indexes = [
            models.Index(fields=["state", "team"], name="monitoring_alert_state_team"),
            models.Index(fields=["-resolved_at"], name="monitoring_alert_resolved"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.subject} ({self.state})"

    def say(self, *, subject: Words, summary: Words) -> None:
        """Keep the subject and summary as English text (emails, webhooks, search, the admin) and as `Words`."""
        self.subject, self.subject_id, self.subject_args = subject.english()[:300], subject.msgid, subject.stored_args
        self.summary, self.summary_id, self.summary_args = summary.english()[:300], summary.msgid, summary.stored_args

    @property
    def subject_in_words(self) -> str:
        """The subject in the active language (alerts raised before texts kept their msgid: as written)."""
        return str(Words(self.subject_id, self.subject_args)) if self.subject_id else self.subject

    @property
    def summary_in_words(self) -> str:
        """The summary in the active language (alerts raised before texts kept their msgid: as written)."""
        return str(Words(self.summary_id, self.summary_args)) if self.summary_id else self.summary


class AlertNotification(models.Model):
    """One webhook delivery: an alert's firing or its resolution (at most one of each per alert). A pending one whose
    sending stopped is taken up again by `monitoring.resend_alert_notifications` for a day, then failed, saying so."""

    alert = models.ForeignKey(Alert, verbose_name=_("alert"), on_delete=models.CASCADE, related_name="notifications")
    event = models.CharField(
        _("event"), max_length=10, choices=[(AlertState.FIRING, _("Firing")), (AlertState.RESOLVED, _("Resolved"))]
    )
    status = models.CharField(
        _("status"), max_length=10, choices=NotificationStatus.choices, default=NotificationStatus.PENDING
    )
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    tried_at = models.DateTimeField(_("last tried at"), null=True, blank=True)
    response_status = models.PositiveIntegerField(_("response status"), null=True, blank=True)
    last_error = models.TextField(_("last error"), blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    sent_at = models.DateTimeField(_("sent at"), null=True, blank=True)

    class Meta:
        verbose_name = _("alert notification")
        verbose_name_plural = _("alert notifications")
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["alert", "event"], name="%(app_label)s_%(class)s_unique_alert_event"),
        ]

    def __str__(self) -> str:
        return f"{self.alert_id} {self.event}: {self.status}"
