"""What is kept around a job: the templates it may be made from, the start-time quotes it was given and the
e-mails about it."""

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from pools.models import Pool
from portal.choices import JobMail
from portal.models import Team, TeamScopedQuerySet

from .job import Job, JobEvent


class JobTemplateQuerySet(TeamScopedQuerySet):
    pass


class JobTemplate(models.Model):
    """A job spec saved by a team under a name, to submit again later.

    `spec` holds the fields of `jobs.specs.JobSpec` as they were submitted; it is validated again (with the team's
    current limits) whenever a job is submitted from it, so an old template can never bypass a rule.
    """

    team = models.ForeignKey(Team, verbose_name=_("team"), on_delete=models.CASCADE, related_name="job_templates")
    pool = models.ForeignKey(
        Pool, verbose_name=_("pool"), on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    name = models.CharField(_("name"), max_length=80)
    spec = models.JSONField(_("spec"), default=dict)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("created by"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    objects = JobTemplateQuerySet.as_manager()

    class Meta:
        verbose_name = _("job template")
        verbose_name_plural = _("job templates")
        ordering = ["team__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="%(app_label)s_%(class)s_unique_team_name"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.team})"


class JobQuote(models.Model):
    """A start-time quote a queued job was given (`jobs.quote`), kept when the queue moved it: the job page shows how
    its quote changed. `basis` holds the quote's reasons as `jobs.quote_words.basis_in_words` words them, in any
    language. `estimate`, `low` and `high` are empty when the job could not start with its team's quota, or waited
    for GPUs other teams borrowed (a basis item "others")."""

    job = models.ForeignKey(Job, verbose_name=_("job"), on_delete=models.CASCADE, related_name="quotes")
    at = models.DateTimeField(_("quoted at"), default=timezone.now)
    starts_now = models.BooleanField(_("starts now"), default=False)
    estimate = models.DateTimeField(_("expected start"), null=True, blank=True)
    low = models.DateTimeField(_("earliest likely start"), null=True, blank=True)
    high = models.DateTimeField(_("latest likely start"), null=True, blank=True)
    basis = models.JSONField(_("basis"), default=list, blank=True)

    class Meta:
        verbose_name = _("start-time quote")
        verbose_name_plural = _("start-time quotes")
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["job", "-at"], name="jobs_quote_job_at")]
        constraints = [
            models.CheckConstraint(
                condition=Q(low__lte=F("estimate"), estimate__lte=F("high"))
                | Q(estimate__isnull=True, low__isnull=True, high__isnull=True),
                name="%(app_label)s_%(class)s_interval_holds_estimate",
            )
        ]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.estimate} at {self.at:%Y-%m-%d %H:%M:%S}"

    def as_quote(self):
        from ..quote import Quote

        return Quote(
            starts_now=self.starts_now,
            estimate=self.estimate,
            low=self.low,
            high=self.high,
            basis=self.basis,
            waits_for_others=any(item.get("say") == "others" for item in self.basis or ()),
        )


class JobNotification(models.Model):
    """The e-mail of one kind (`JobMail`) about one job to its submitter: at most one row per job and kind, made in
    the transaction that wrote the transition, and `sent_at` set only in the transaction of the task that sent it
    (jobs/notifications.py says why that sends it once)."""

    job = models.ForeignKey(Job, verbose_name=_("job"), on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(_("kind"), max_length=10, choices=JobMail.choices)
    event = models.ForeignKey(
        JobEvent, verbose_name=_("transition"), on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    sent_at = models.DateTimeField(_("sent at"), null=True, blank=True)
    tried_at = models.DateTimeField(_("last tried at"), null=True, blank=True)
    attempts = models.PositiveIntegerField(
        _("attempts"), default=0, help_text=_("Sends tried, the one that worked too.")
    )
    last_error = models.TextField(_("last error"), blank=True)
    # Set when the mail will never be sent, why in `last_error`: its submitter had no address when it was to be sent,
    # or was no longer in the job's team (jobs/notifications.py `send`). The sweep passes it over.
    dropped_at = models.DateTimeField(_("dropped at"), null=True, blank=True)

    class Meta:
        verbose_name = _("job e-mail")
        verbose_name_plural = _("job e-mails")
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["job", "kind"], name="%(app_label)s_%(class)s_one_per_job_and_kind"),
            models.CheckConstraint(condition=Q(kind__in=JobMail.values), name="%(app_label)s_%(class)s_valid_kind"),
        ]
        # The sweep's question (`notifications.due_again`): the unsent ones.
        indexes = [
            models.Index(fields=["created_at"], name="jobs_notification_unsent", condition=Q(sent_at__isnull=True))
        ]

    def __str__(self) -> str:
        state = "sent" if self.sent_at else "dropped" if self.dropped_at else "not sent"
        return f"{self.job_id} {self.kind}: {state}"
