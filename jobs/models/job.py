"""GPU jobs and their recorded lifecycle.

A job is what a researcher asks for; it becomes a batch/v1 Job named `job_name` in its team's namespace. Its
state changes only through `Job.transition_to` (called by `jobs.services` under a row lock), which refuses any
edge outside `choices.TRANSITIONS` and writes a `JobEvent` with the time, so the timeline is complete.
"""

from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone, translation
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from pools.models import Pool
from portal.choices import JobMail
from portal.models import Team, TeamScopedQuerySet

from ..choices import ACTIVE_STATES, ADMITTED_STATES, FINAL_STATES, TRANSITIONS, JobState, Placement, Priority


class IllegalTransition(Exception):
    pass


@dataclass(frozen=True)
class Words:
    """A message kept as its English msgid and its arguments, so that each reader gets it in their own language
    (the sync and the workers write events in the default language; a page shows them in the viewer's). A msgid
    "reasons.<function>" (one of `WORDING_FUNCTIONS`) is instead worded by that function of jobs.reasons, called
    with `args`. An argument may itself be `Words` (stored as {"msgid": ..., "args": ...}, see `stored_args`): it
    is worded in the same language before it is put in (an alert's summary names its subject, an invoice's
    correction line the line it corrects). Job events, alerts (monitoring) and invoice lines (billing) keep their
    texts this way."""

    WORDING_FUNCTIONS = ("kueue_reason", "plain_reason", "eviction_reason", "gang_reason")

    msgid: str
    args: dict = field(default_factory=dict)

    def __str__(self) -> str:
        function = self.msgid.removeprefix("reasons.")
        if function != self.msgid and function in self.WORDING_FUNCTIONS:
            from .. import reasons

            return getattr(reasons, function)(**self.args)
        text = gettext(self.msgid) if self.msgid else ""  # gettext("") is the catalogue's header
        return text % {name: _worded(value) for name, value in self.args.items()} if self.args else text

    def english(self) -> str:
        with translation.override("en"):
            return str(self)

    @property
    def stored_args(self) -> dict:
        """`args` as they are kept in a JSON column: nested `Words` as {"msgid": ..., "args": ...}."""
        return {name: _stored(value) for name, value in self.args.items()}


def _stored(value):
    return {"msgid": value.msgid, "args": value.stored_args} if isinstance(value, Words) else value


def _worded(value):
    """An argument as it goes into its message: nested words (as given or as stored) in the active language."""
    if isinstance(value, dict) and value.keys() == {"msgid", "args"}:
        value = Words(value["msgid"], value["args"])
    return str(value) if isinstance(value, Words) else value


def job_name_for(job_id: int) -> str:
    """The name of job `job_id`'s Kubernetes Job (in its team's namespace)."""
    return f"rsv-{job_id}"


class JobQuerySet(TeamScopedQuerySet):
    def holding_quota(self) -> "JobQuerySet":
        """Jobs Kueue has admitted: they hold GPUs of their team's quota. Where they hold them: `in_use`."""
        return self.filter(state__in=ADMITTED_STATES)

    def in_use(self, *, pools=None) -> "JobQuerySet":
        """GPUs in use, the one rule: the jobs of this queryset that hold GPUs, each annotated with `quota_pool` (the
        pool whose quota they hold), only those held in `pools` (pools or ids) when given.

        A job holds GPUs from its admission to its end (`holding_quota`); a queued job, even one Kueue is about to
        admit, holds nothing. It holds them in the pool that admitted it, not in its home pool: Kueue charges an
        admitted workload to the flavor it assigned (`Job.admitted_pool`, from the Workload's flavor), in the
        team's ClusterQueue and in the cohort, and that flavor's nodes are where its pods run. So a soft job of a
        team whose home pool is X, admitted on Y, counts against the team's quota in Y (its reservation and what it
        borrows there) and not in X. An admitted job whose flavor the portal has not recorded counts in its home
        pool, the only flavor its strict placement allows (`Job.quota_pool_id` says the same for one job)."""
        jobs = self.holding_quota().annotate(quota_pool=Coalesce(models.F("admitted_pool"), models.F("pool")))
        if pools is None:
            return jobs
        if not isinstance(pools, models.QuerySet):
            pools = [getattr(pool, "pk", pool) for pool in pools]
        return jobs.filter(quota_pool__in=pools)

    def gpus_in_use(self, *, pools=None) -> dict[tuple[int, int], int]:
        """GPUs in use (`in_use`) per (team id, pool id) among this queryset's jobs: Σ `Job.total_gpus` (all pods
        of each). One query; a (team, pool) using none is not in the answer."""
        rows = self.in_use(pools=pools).values("team_id", "quota_pool").annotate(total=models.Sum("total_gpus"))
        return {(row["team_id"], row["quota_pool"]): row["total"] for row in rows.order_by()}

    def gpus_in_use_of(self, *, team, pool) -> Coalesce:
        """`gpus_in_use` of one team in one pool as an expression (0 when none), for an annotation: `team` and
        `pool` are teams, pools, ids or `OuterRef`s."""
        total = (
            self.filter(team=team)
            .in_use()
            .filter(quota_pool=getattr(pool, "pk", pool))
            .values("team")
            .annotate(total=models.Sum("total_gpus"))
            .values("total")
        )
        return Coalesce(models.Subquery(total, output_field=models.IntegerField()), models.Value(0))

    def with_waiting_since(self) -> "JobQuerySet":
        """Annotated with `waiting_since`: when each job last went to Queued (its submission, or its preemption: a
        job preempted a minute ago after running for hours has waited a minute). The one rule the queue-wait alert
        and the pending page share."""
        last_queued = (
            JobEvent.objects.filter(job=models.OuterRef("pk"), to_state=JobState.QUEUED)
            .order_by("-at")
            .values("at")[:1]
        )
        return self.annotate(waiting_since=Coalesce(models.Subquery(last_queued), models.F("created_at")))

    def expected_in_cluster(self) -> "JobQuerySet":
        """Jobs that should have a Job in the cluster now (queued ones wait there, suspended by Kueue). The one
        definition the submit task and convergence (reconcile/jobs.py) share: change it here, and both follow."""
        return self.filter(state__in=ACTIVE_STATES)


# The columns `Job.transition_to` writes: a caller that saves only what changed writes these with its own.
TRANSITION_FIELDS = ("state", "state_changed_at", "started_at", "finished_at")


class Job(models.Model):
    """A GPU job of one team in one pool, with its whole lifecycle (see module docstring)."""

    team = models.ForeignKey(Team, verbose_name=_("team"), on_delete=models.PROTECT, related_name="jobs")
    pool = models.ForeignKey(Pool, verbose_name=_("pool"), on_delete=models.PROTECT, related_name="jobs")
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("submitted by"), on_delete=models.PROTECT, related_name="jobs"
    )
    name = models.CharField(_("name"), max_length=63)
    image = models.CharField(_("image"), max_length=255)
    command = models.JSONField(_("command"), default=list, blank=True)
    args = models.JSONField(_("arguments"), default=list, blank=True)
    env = models.JSONField(_("environment"), default=dict, blank=True)
    gpus = models.PositiveIntegerField(_("GPUs"), validators=[MinValueValidator(1), MaxValueValidator(64)])
    cpu_millicores = models.PositiveIntegerField(_("CPU (millicores)"), default=1000)
    memory_mib = models.PositiveIntegerField(_("memory (MiB)"), default=4096)
    placement = models.CharField(_("placement"), max_length=20, choices=Placement.choices, default=Placement.STRICT)
    spill_after_minutes = models.PositiveIntegerField(_("spill after (minutes)"), null=True, blank=True)
    priority = models.IntegerField(_("priority"), choices=Priority.choices, default=Priority.NORMAL)
    max_run_minutes = models.PositiveIntegerField(
        _("maximum run time (minutes)"), default=24 * 60, validators=[MinValueValidator(1)]
    )
    termination_grace_seconds = models.PositiveIntegerField(
        _("termination grace period (seconds)"),
        default=30,
        validators=[MaxValueValidator(3600)],
        help_text=_("Time a stopped pod (preempted, cancelled or out of time) has to checkpoint before it is killed."),
    )
    state = models.CharField(_("state"), max_length=20, choices=JobState.choices, default=JobState.QUEUED)
    state_changed_at = models.DateTimeField(_("state changed"), default=timezone.now)
    created_at = models.DateTimeField(_("created"), default=timezone.now, db_index=True)
    started_at = models.DateTimeField(_("started"), null=True, blank=True)
    # The cluster's times have second precision; the path's delay a start-time quote adds is read off this one
    # (jobs/quote_selectors.py `start_delays`).
    running_seen_at = models.DateTimeField(
        _("seen running"),
        null=True,
        blank=True,
        help_text=_("When the portal first saw the job Running, on its own clock (to the microsecond)."),
    )
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)
    node_name = models.CharField(_("node"), max_length=253, blank=True)
    pending_reason = models.TextField(_("pending reason"), blank=True)
    last_error = models.TextField(_("last error"), blank=True)
    submit_attempts = models.PositiveIntegerField(_("submit attempts"), default=0)
    cluster_created_at = models.DateTimeField(_("created in the cluster"), null=True, blank=True)
    anti_affinity_group = models.CharField(
        _("spread from jobs of group"),
        max_length=63,
        blank=True,
        help_text=_("Jobs of the same group prefer different nodes (pod anti-affinity)."),
    )
    pod_annotations = models.JSONField(_("pod annotations"), default=dict, blank=True)
    spilled = models.BooleanField(_("moved to soft placement"), default=False)
    admitted_pool = models.ForeignKey(
        Pool,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("admitted in pool"),
        help_text=_("The pool (Kueue flavor) Kueue assigned the job's GPUs in when it admitted it."),
    )
    preemptions = models.PositiveIntegerField(_("times preempted"), default=0)
    resubmitted_from = models.ForeignKey(
        "self",
        verbose_name=_("resubmitted from"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="resubmissions",
    )
    # Team data, by name only (jobs.specs.JobSpec): the volumes mounted, /dev/shm size, the secrets referenced.
    volumes = models.JSONField(_("volumes"), default=list, blank=True)
    shm_gib = models.PositiveIntegerField(_("shared memory (GiB)"), default=0)
    image_pull_secrets = models.JSONField(_("image pull secrets"), default=list, blank=True)
    secret_env = models.JSONField(_("environment from secrets"), default=dict, blank=True)
    # Multi-node jobs (gangs): `nodes` pods of `gpus` GPUs each, one pod per node, admitted by Kueue all or nothing.
    nodes = models.PositiveIntegerField(
        _("nodes"),
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(64)],
        help_text=_("Pods of the job, one per node, each with the job's GPUs (a multi-node job when above 1)."),
    )
    retries = models.PositiveIntegerField(
        _("retries"),
        default=0,
        validators=[MaxValueValidator(10)],
        help_text=_("Failed pods replaced before the job fails (0: a failed pod fails the job)."),
    )
    notify = ArrayField(
        models.CharField(max_length=10, choices=JobMail.choices),
        verbose_name=_("e-mail the submitter"),
        default=list,
        blank=True,
        help_text=_("When its submitter is e-mailed about the job (jobs/notifications.py)."),
    )
    # The one definition of a job's GPUs wherever quota, queues, fit and previews count them: GPUs per pod × pods.
    total_gpus = models.GeneratedField(
        expression=models.F("gpus") * models.F("nodes"),
        output_field=models.PositiveIntegerField(),
        db_persist=True,
        verbose_name=_("GPUs in all"),
    )

    objects = JobQuerySet.as_manager()

    class Meta:
        verbose_name = _("job")
        verbose_name_plural = _("jobs")
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gt=0), name="%(app_label)s_%(class)s_gpus_positive"),
            models.CheckConstraint(condition=Q(nodes__gt=0), name="%(app_label)s_%(class)s_nodes_positive"),
            models.CheckConstraint(condition=Q(state__in=JobState.values), name="%(app_label)s_%(class)s_valid_state"),
            models.CheckConstraint(
                condition=~Q(placement=Placement.SPILL_AFTER) | Q(spill_after_minutes__gt=0),
                name="%(app_label)s_%(class)s_spill_after_has_minutes",
            ),
            models.CheckConstraint(
                condition=Q(notify__contained_by=JobMail.values), name="%(app_label)s_%(class)s_valid_notify"
            ),
        ]
        indexes = [
            models.Index(fields=["team", "pool", "state"], name="jobs_job_team_pool_state"),
            models.Index(fields=["state", "-priority", "created_at"], name="jobs_job_queue_order"),
            # A team's most recent finished jobs: the history start-time quotes are fitted on (jobs/quote_selectors.py),
            # read from the index alone (what a run's fraction needs is included: 14 ms instead of 23-36 ms for 100
            # teams' 200 jobs each).
            models.Index(
                fields=["team", "-finished_at"],
                name="jobs_job_team_finished_runs",
                condition=Q(finished_at__isnull=False),
                include=["started_at", "max_run_minutes", "state"],
            ),
            # The platform's most recent starts: the path's delay start-time quotes add.
            models.Index(
                fields=["-running_seen_at"], name="jobs_job_seen_running", condition=Q(running_seen_at__isnull=False)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} (#{self.pk})"

    @property
    def job_name(self) -> str:
        """The Kubernetes name, derived from the id so a retried submission can never create a second Job."""
        return job_name_for(self.pk)

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def quota_pool_id(self) -> int | None:
        """The pool whose quota the job holds GPUs of now, None when it holds none: `JobQuerySet.in_use` for one
        loaded job (the pool that admitted it; its home pool while that is not recorded)."""
        if self.state not in ADMITTED_STATES:
            return None
        return self.admitted_pool_id or self.pool_id

    @property
    def is_gang(self) -> bool:
        """Several pods on several nodes (an Indexed Job with a headless Service for their rendezvous)."""
        return self.nodes > 1

    def clean(self) -> None:
        if self.placement == Placement.SPILL_AFTER and not self.spill_after_minutes:
            raise ValidationError({"spill_after_minutes": _("Say after how many minutes the job may spill.")})

    def transition_to(self, new_state: str, *, message: "str | Words" = "", actor=None, at=None) -> "JobEvent":
        """Move to `new_state` along a legal edge and record it, changing only `TRANSITION_FIELDS`. The caller holds
        a row lock and saves."""
        if new_state not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"job {self.pk}: {self.state} -> {new_state} is not allowed")
        at = at or timezone.now()
        event = JobEvent(job=self, from_state=self.state, to_state=new_state, at=at, actor=actor)
        event.say(message)
        self.state = new_state
        self.state_changed_at = at
        if new_state == JobState.RUNNING and self.started_at is None:
            self.started_at = at
        if new_state in FINAL_STATES:
            self.finished_at = at
        return event


class JobEvent(models.Model):
    """One recorded state transition (or note) of a job, with its time."""

    job = models.ForeignKey(Job, verbose_name=_("job"), on_delete=models.CASCADE, related_name="events")
    from_state = models.CharField(_("from state"), max_length=20, choices=JobState.choices, blank=True)
    to_state = models.CharField(_("to state"), max_length=20, choices=JobState.choices, blank=True)
    at = models.DateTimeField(_("at"), default=timezone.now)
    message = models.TextField(_("message"), blank=True, help_text=_("In English; pages show it in the reader's."))
    message_id = models.CharField(_("message id"), max_length=200, blank=True)
    message_args = models.JSONField(_("message arguments"), default=dict, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("actor"), on_delete=models.SET_NULL, null=True, blank=True
    )

    class Meta:
        verbose_name = _("job event")
        verbose_name_plural = _("job events")
        ordering = ["at", "id"]
        indexes = [
            models.Index(fields=["job", "at"], name="jobs_event_job_at"),
            # The platform's most recent evictions of running jobs: how long stopped pods take to exit
            # (jobs/quote_selectors.py `stop_fractions`).
            models.Index(
                fields=["-at"], name="jobs_event_evicted", condition=Q(from_state="running", to_state="queued")
            ),
            # Admitted jobs Kueue took back (preempted, or their borrowed GPUs reclaimed), pods running or not: which
            # starts stopped others first (jobs/quote_selectors.py `start_delays`).
            models.Index(
                fields=["-at"],
                name="jobs_event_requeued",
                condition=Q(from_state__in=sorted(ADMITTED_STATES), to_state=JobState.QUEUED),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.from_state} -> {self.to_state} at {self.at:%Y-%m-%d %H:%M:%S}"

    @classmethod
    def note(cls, *, job: Job, message: "str | Words", **fields) -> "JobEvent":
        """Save an event (a note when no states are given) whose message may be `Words`."""
        event = cls(job=job, **fields)
        event.say(message)
        event.save()
        return event

    def say(self, message: "str | Words") -> None:
        """Keep `message`: text as it is, `Words` as their English text plus what re-words them for a reader."""
        if isinstance(message, Words):
            self.message, self.message_id, self.message_args = message.english(), message.msgid, message.stored_args
        else:
            self.message = str(message)

    @property
    def in_words(self) -> str:
        """The message in the active language (events written before messages kept their msgid: as written)."""
        return str(Words(self.message_id, self.message_args)) if self.message_id else self.message
