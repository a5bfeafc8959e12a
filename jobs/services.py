"""Writes to jobs: submission, cancel, resubmit, and the state changes the cluster reports.

Admission is Kueue's (kubernetes-sigs/kueue). A submitted job is saved as Queued and, once committed, its batch/v1
Job is created in the team namespace, suspended and labelled with the team's LocalQueue; Kueue admits it against
the team's ClusterQueue (its reservation as nominal quota, quota above it borrowed in the cohort), unsuspends it
and chooses the pool (flavor). The portal checks beforehand what can never run (quota, per-container limits, the
largest node, spill pools). Kueue's verdicts mirrored back (the Workload rows, the state each job's newest Workload
and pods imply) are `jobs.settling`'s.
"""

import logging
from dataclasses import replace

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from pools.models import NamespaceLimits, Node, Pool, Quota
from portal import audit, outbox
from portal.choices import JobMail, Role
from portal.models import Team
from teamdata.selectors import check_job_references, with_enforced_read_only

from . import notifications, policy
from .choices import JobState, Placement
from .models import Job, JobEvent, Words
from .specs import JobSpec, validate_spec

log = logging.getLogger(__name__)


def _can_submit(user, team: Team) -> bool:
    if user.is_admin:
        return True
    return team.has_member(user, roles=[Role.RESEARCHER, Role.LEAD])


def gpus_in_use(*, team: Team, pool: Pool) -> int:
    """GPUs the team's jobs hold in the pool (`JobQuerySet.in_use`: where Kueue admitted them)."""
    return Job.objects.filter(team=team).gpus_in_use(pools=[pool]).get((team.pk, pool.pk), 0)


def check_fits_limits(*, team: Team, pool: Pool, spec: JobSpec) -> None:
    """Refuse what can never run: above the team quota, above the per-container max, bigger than any node."""
    errors = {}
    quota = Quota.objects.filter(team=team, pool=pool).values_list("max_gpus", flat=True).first()
    if not quota:
        errors["pool"] = _("%(team)s has no GPU quota in %(pool)s; ask a platform admin for one.") % {
            "team": team.name,
            "pool": pool.name,
        }
    elif spec.total_gpus > quota:
        errors["gpus"] = _("%(team)s may use at most %(quota)d GPUs at once in %(pool)s.") % {
            "team": team.name,
            "quota": quota,
            "pool": pool.name,
        }
    # A team without a row of its own gets the defaults in the cluster (pools.projection), so they are checked here too.
    limits = NamespaceLimits.objects.filter(team=team).first() or NamespaceLimits(team=team)
    if "gpus" not in errors:
        _check_namespace_limits(team=team, limits=limits, spec=spec, errors=errors)
    largest_node = Node.objects.filter(pool=pool).order_by("-gpu_allocatable").values_list("gpu_allocatable", flat=True)
    largest = largest_node.first()
    if largest is not None and spec.gpus > largest and "gpus" not in errors:
        errors["gpus"] = _("The largest node of %(pool)s has %(largest)d GPUs: a %(gpus)d-GPU job can never fit.") % {
            "pool": pool.name,
            "largest": largest,
            "gpus": spec.gpus,
        }
    if spec.nodes > 1 and "gpus" not in errors:
        _check_gang_can_ever_fit(pool=pool, spec=spec, errors=errors)
    if spec.placement in (Placement.SOFT, Placement.SPILL_AFTER) and not pool.spill_pools.exists():
        errors["placement"] = _("%(pool)s has no pools to spill into: use strict placement.") % {"pool": pool.name}
    if errors:
        raise ValidationError(errors)


def _check_namespace_limits(*, team: Team, limits: NamespaceLimits, spec: JobSpec, errors: dict) -> None:
    """The team namespace's LimitRange (per container: its pods are refused outside it) and ResourceQuota (the whole
    namespace at once: a job whose pods together ask for more is never admitted by Kueue, or its pods never all
    made)."""
    if spec.gpus > limits.container_max_gpus:
        errors["gpus"] = _("%(team)s's namespace allows at most %(max)d GPUs per container.") % {
            "team": team.name,
            "max": limits.container_max_gpus,
        }
    elif spec.cpu_millicores > limits.container_max_cpu_millicores:
        errors["cpu_millicores"] = _("At most %(max)d millicores per container.") % {
            "max": limits.container_max_cpu_millicores
        }
    elif spec.memory_mib > limits.container_max_memory_mib:
        errors["memory_mib"] = _("At most %(max)d MiB per container.") % {"max": limits.container_max_memory_mib}
    elif spec.cpu_millicores < limits.container_min_cpu_millicores:
        errors["cpu_millicores"] = _("At least %(min)d millicores per container.") % {
            "min": limits.container_min_cpu_millicores
        }
    elif spec.memory_mib < limits.container_min_memory_mib:
        errors["memory_mib"] = _("At least %(min)d MiB per container.") % {"min": limits.container_min_memory_mib}
    elif spec.nodes > limits.max_pods:
        errors["nodes"] = _(
            "%(team)s's namespace holds at most %(max)d pods: a job of %(nodes)d nodes can never run."
        ) % {"team": team.name, "max": limits.max_pods, "nodes": spec.nodes}
    elif spec.nodes * spec.cpu_millicores > limits.requests_cpu_millicores:
        errors["cpu_millicores"] = _(
            "%(nodes)d × %(each)d millicores is more CPU than %(team)s's namespace may request at once "
            "(%(max)d millicores)."
        ) % {"nodes": spec.nodes, "each": spec.cpu_millicores, "team": team.name, "max": limits.requests_cpu_millicores}
    elif spec.nodes * spec.memory_mib > limits.requests_memory_mib:
        errors["memory_mib"] = _(
            "%(nodes)d × %(each)d MiB is more memory than %(team)s's namespace may request at once (%(max)d MiB)."
        ) % {"nodes": spec.nodes, "each": spec.memory_mib, "team": team.name, "max": limits.requests_memory_mib}


def _check_gang_can_ever_fit(*, pool: Pool, spec: JobSpec, errors: dict) -> None:
    """A multi-node job needs `nodes` different nodes of the pool with `gpus` GPUs each (one pod per node)."""
    big_enough = Node.objects.filter(pool=pool, gpu_allocatable__gte=spec.gpus).count()
    if Node.objects.filter(pool=pool).exists() and big_enough < spec.nodes:
        errors["nodes"] = _(
            "%(pool)s has %(have)d nodes with %(gpus)d GPUs or more: a job on %(nodes)d nodes can never fit."
        ) % {"pool": pool.name, "have": big_enough, "gpus": spec.gpus, "nodes": spec.nodes}


def _record(job: Job, event: JobEvent, *, update_fields=None) -> None:
    """Save a transition `job.transition_to` made: the job, its event, and the e-mail its submitter asked for about
    it (`notifications.transition_written`), all in the caller's transaction. Every transition is saved here.
    `update_fields`: the job's columns to write (`TRANSITION_FIELDS` and what else the caller changed); None: all."""
    job.save(update_fields=update_fields)
    event.save()
    notifications.transition_written(job, event)


def _send_to_cluster(job: Job) -> None:
    """Create the job's Job in the cluster: the message is saved in this transaction (outbox) and published after
    commit, so a broker outage can neither lose it nor fail the submission."""
    outbox.send("jobs.submit_job", job.pk)


def _delete_from_cluster(job: Job) -> None:
    """Delete the job's Job (and so its Workload and pods) after commit, through the outbox like a submission."""
    outbox.send("jobs.delete_job", job.pk)


@transaction.atomic
def submit_job(
    *,
    team: Team,
    pool: Pool,
    user,
    spec: JobSpec,
    resubmitted_from: Job | None = None,
    notify: list[str] | None = None,
) -> Job:
    """Save a job as Queued and, after commit, create its Job in the cluster, where Kueue admits it. `notify`: when
    the submitter is e-mailed about it (`JobMail` values; None: the user's default, `User.notify_default`)."""
    if not _can_submit(user, team):
        raise ValidationError({"team": _("You are not a member of %(team)s.") % {"team": team.name}})
    validate_spec(spec)
    policy.check_submission(team=team, user=user, spec=spec)
    check_fits_limits(team=team, pool=pool, spec=spec)
    check_job_references(team=team, spec=spec)
    # A volume its lead made read-only for researchers is mounted read-only in a researcher's job, whatever it asked.
    spec = replace(spec, volumes=with_enforced_read_only(team=team, user=user, volumes=spec.volumes))
    job = Job(team=team, pool=pool, submitted_by=user, resubmitted_from=resubmitted_from, **spec.as_model_fields())
    job.notify = JobMail.ordered(user.notify_default if notify is None else notify)
    # Field by field, as a form says it. The team, pool, submitter and original are rows the caller holds (no query
    # to see that they exist), and each check constraint is also a field's own validator (GPUs, nodes, state, the
    # e-mail choices) or validate_spec's (spill-after minutes): checking them again costs a query in a savepoint
    # each, which was half of a submission's CPU. The database still enforces all of them.
    job.full_clean(exclude=["team", "pool", "submitted_by", "resubmitted_from"], validate_constraints=False)
    job.save()
    note = (
        Words(gettext_noop("resubmitted from #%(id)d"), {"id": resubmitted_from.pk})
        if resubmitted_from
        else Words(gettext_noop("submitted"))
    )
    JobEvent.note(job=job, from_state="", to_state=JobState.QUEUED, at=job.created_at, message=note, actor=user)
    _send_to_cluster(job)
    audit.record(actor=user, action="job.submit", instance=job, before=None, after=audit.snapshot(job))
    return job


def queue_position(job: Job) -> int | None:
    """1 for the head of its team's queue (Kueue's order in a ClusterQueue: priority, then submission time);
    None when the job is not queued."""
    if job.state != JobState.QUEUED:
        return None
    ahead = Job.objects.filter(team_id=job.team_id, state=JobState.QUEUED).filter(
        Q(priority__gt=job.priority)
        | Q(priority=job.priority, created_at__lt=job.created_at)
        | Q(priority=job.priority, created_at=job.created_at, id__lt=job.id)
    )
    return ahead.count() + 1


def _locked(job_id: int) -> Job:
    return Job.objects.select_for_update().get(pk=job_id)


@transaction.atomic
def cancel_job(*, job: Job, user) -> Job:
    """Cancel a job; its Job (with its Workload and pods) is deleted from the cluster by `jobs.delete_job`."""
    job = _locked(job.pk)
    if job.is_final:
        raise ValidationError(_("Job #%(id)d is already %(state)s.") % {"id": job.pk, "state": job.get_state_display()})
    before = audit.snapshot(job)
    _record(job, job.transition_to(JobState.CANCELLED, message=Words(gettext_noop("cancelled")), actor=user))
    audit.record(actor=user, action="job.cancel", instance=job, before=before, after=audit.snapshot(job))
    _delete_from_cluster(job)
    return job


def resubmit_job(*, job: Job, user) -> Job:
    """Submit a new job with the same spec (the original stays as it was); its submitter's e-mail choice goes with
    it, another user's job gets that user's default."""
    if not job.is_final:
        raise ValidationError(_("Only a finished job can be resubmitted; cancel it first."))
    notify = job.notify if job.submitted_by_id == user.pk else None
    spec = JobSpec.from_job(job)
    return submit_job(team=job.team, pool=job.pool, user=user, spec=spec, resubmitted_from=job, notify=notify)


@transaction.atomic
def set_job_notify(*, job: Job, user, notify: list[str]) -> Job:
    """Choose anew when the job's submitter is e-mailed about it (`JobMail` values): the submitter only, while the
    job is not finished. It counts for the transitions still to come; one already written is not mailed afterwards,
    nor a start once the job has run (its restart after a preemption: jobs/notifications.py)."""
    job = _locked(job.pk)
    if job.submitted_by_id != user.pk:
        raise PermissionDenied(_("Only the job's submitter chooses the e-mails about it."))
    before = audit.snapshot(job)
    if job.is_final:
        raise ValidationError(
            {"notify": _("Job #%(id)d is already %(state)s.") % {"id": job.pk, "state": job.get_state_display()}}
        )
    try:
        job.notify = Job._meta.get_field("notify").clean(JobMail.ordered(notify), job)
    except ValidationError as error:
        raise ValidationError({"notify": error.messages}) from None
    job.save(update_fields=["notify"])
    audit.record(actor=user, action="job.set_notify", instance=job, before=before, after=audit.snapshot(job))
    return job


# --- spill-after: the strict -> soft edge ------------------------------------------------------------------


@transaction.atomic
def mark_spilled(*, job_id: int, spill_pools: list[str]) -> bool:
    """Record that a spill-after job's suspended Job now also allows its spill pools (`jobs.spill` patched it): the
    one edge strict → soft of its placement, taken once and noted with why. A job already moved, or not spill-after,
    is left as it is (False)."""
    job = _locked(job_id)
    if job.spilled or job.placement != Placement.SPILL_AFTER:
        return False
    job.spilled = True
    job.save(update_fields=["spilled"])
    JobEvent.note(
        job=job,
        message=Words(
            gettext_noop("not admitted after %(minutes)d min: moved to soft placement (may run in %(pools)s)"),
            {"minutes": job.spill_after_minutes, "pools": ", ".join(spill_pools)},
        ),
    )
    return True


@transaction.atomic
def note_spill_problem(*, job_id: int, error: str) -> None:
    """A spill-after job could not be moved to soft placement this time (the next check retries): noted."""
    JobEvent.note(
        job=_locked(job_id),
        message=Words(gettext_noop("moving to soft placement failed, will retry: %(error)s"), {"error": error}),
    )


# --- start-time quotes: kept when the queue moves ----------------------------------------------------------------

QUOTE_MOVED = timezone.timedelta(minutes=5)
# The most quotes kept per job: its first and the most recent others. A job that waits for days behind a queue that
# keeps moving would otherwise add a row every few minutes for as long as it waits.
QUOTES_KEPT = 50


def _untimed_why(basis) -> list[str]:
    return [item.get("say") for item in basis or () if item.get("say") in ("never", "others")]


def _quote_moved(kept, quote) -> bool:
    """Whether `quote` says something new against the last kept one: starts now, never or no time (waiting for other
    teams' GPUs) where it did not, a job more or fewer ahead, or a bound that moved by `QUOTE_MOVED` or more. A job
    still quoted "starts now" says nothing new (its times follow the clock while Kueue has not admitted it)."""
    if kept is None:
        return True
    if (kept.starts_now, kept.estimate is None) != (quote.starts_now, quote.estimate is None):
        return True
    if _untimed_why(kept.basis) != _untimed_why(quote.basis):  # never, or waiting for other teams' GPUs
        return True
    if quote.starts_now:
        return False
    ahead = [item for item in kept.basis if item.get("say") == "ahead"]
    if ahead != [item for item in quote.basis if item.get("say") == "ahead"]:
        return True
    if quote.estimate is None:
        return False
    return any(
        abs(new - old) >= QUOTE_MOVED
        for new, old in ((quote.estimate, kept.estimate), (quote.low, kept.low), (quote.high, kept.high))
    )


def record_quotes(*, now=None) -> int:
    """Keep a `JobQuote` for every queued job whose quote moved since the last one kept (the first one always):
    the history on the job page. Idempotent: run again with nothing moved, it writes nothing. Answers how many it
    wrote."""
    from .models import JobQuote
    from .quote import quote_queue
    from .quote_selectors import team_queues

    now = now or timezone.now()
    team_ids = set(Job.objects.filter(state=JobState.QUEUED).values_list("team_id", flat=True).order_by().distinct())
    quotes = {}
    for queue in team_queues(team_ids, now=now).values():
        quotes.update(quote_queue(queue, now=now))
    kept = {
        quote.job_id: quote
        for quote in JobQuote.objects.filter(job__in=list(quotes)).order_by("job_id", "-at", "-id").distinct("job_id")
    }
    new = [
        JobQuote(
            job_id=job_id,
            at=now,
            starts_now=quote.starts_now,
            estimate=quote.estimate,
            low=quote.low,
            high=quote.high,
            basis=quote.basis,
        )
        for job_id, quote in quotes.items()
        if _quote_moved(kept.get(job_id), quote)
    ]
    JobQuote.objects.bulk_create(new)
    if new:
        _trim_quotes([each.job_id for each in new])
    return len(new)


_TRIM_QUOTES = """
DELETE FROM jobs_jobquote WHERE id IN (
    SELECT id FROM (
        SELECT id,
               row_number() OVER (PARTITION BY job_id ORDER BY at, id) AS first,
               row_number() OVER (PARTITION BY job_id ORDER BY at DESC, id DESC) AS latest
        FROM jobs_jobquote WHERE job_id = ANY(%s)
    ) AS kept
    WHERE first > 1 AND latest >= %s
)
"""


def _trim_quotes(job_ids: list[int]) -> None:
    """Keep `QUOTES_KEPT` quotes of each of `job_ids`: its first and the most recent others."""
    with connection.cursor() as cursor:
        cursor.execute(_TRIM_QUOTES, [job_ids, QUOTES_KEPT])
