"""Writes to jobs: submission, the admission queue, cancel, resubmit, and the state changes sync observes.

Admission: a job is admitted (Queued -> Submitted) only while its team's GPUs in use in the pool plus its own stay
within the team's quota there. All admissions for one (team, pool) run under `SELECT ... FOR UPDATE` on that
Quota row, so concurrent submissions queue on the lock and each sees the GPUs the previous ones took: the quota
can never be exceeded by a race. The queue is strict: jobs are admitted in order (higher priority first, then
older first) and a job that does not fit holds back the ones behind it, so large jobs are not starved.
"""

import logging
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from pools.models import NamespaceLimits, Node, Pool, Quota
from portal import audit, outbox
from portal.choices import Role
from portal.models import Team

from .choices import ADMITTED_STATES, FINAL_STATES, TRANSITIONS, JobState, Placement
from .models import Job, JobEvent
from .specs import JobSpec, validate_spec

log = logging.getLogger(__name__)


def _can_submit(user, team: Team) -> bool:
    if user.is_admin:
        return True
    return team.memberships.filter(user=user, role__in=[Role.RESEARCHER, Role.LEAD]).exists()


def gpus_in_use(*, team: Team, pool: Pool) -> int:
    return (
        Job.objects.filter(team=team, pool=pool, state__in=ADMITTED_STATES).aggregate(total=Sum("gpus"))["total"] or 0
    )


def check_fits_limits(*, team: Team, pool: Pool, spec: JobSpec) -> None:
    """Refuse what can never run: above the team quota, above the per-container max, bigger than any node."""
    errors = {}
    quota = Quota.objects.filter(team=team, pool=pool).values_list("max_gpus", flat=True).first()
    if not quota:
        errors["pool"] = _("%(team)s has no GPU quota in %(pool)s; ask a platform admin for one.") % {
            "team": team.name,
            "pool": pool.name,
        }
    elif spec.gpus > quota:
        errors["gpus"] = _("%(team)s may use at most %(quota)d GPUs at once in %(pool)s.") % {
            "team": team.name,
            "quota": quota,
            "pool": pool.name,
        }
    limits = NamespaceLimits.objects.filter(team=team).first()
    if limits is not None and "gpus" not in errors:
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
    largest_node = Node.objects.filter(pool=pool).order_by("-gpu_allocatable").values_list("gpu_allocatable", flat=True)
    largest = largest_node.first()
    if largest is not None and spec.gpus > largest and "gpus" not in errors:
        errors["gpus"] = _("The largest node of %(pool)s has %(largest)d GPUs: a %(gpus)d-GPU job can never fit.") % {
            "pool": pool.name,
            "largest": largest,
            "gpus": spec.gpus,
        }
    if spec.placement in (Placement.SOFT, Placement.SPILL_AFTER) and not pool.spill_pools.exists():
        errors["placement"] = _("%(pool)s has no pools to spill into: use strict placement.") % {"pool": pool.name}
    if errors:
        raise ValidationError(errors)


def _record(job: Job, event: JobEvent) -> None:
    job.save()
    event.save()


@transaction.atomic
def submit_job(*, team: Team, pool: Pool, user, spec: JobSpec, resubmitted_from: Job | None = None) -> Job:
    """Create a job as Queued and admit it at once if the team's quota allows; admitted jobs are sent to the
    cluster by the `jobs.submit_job` task after commit."""
    if not _can_submit(user, team):
        raise ValidationError({"team": _("You are not a member of %(team)s.") % {"team": team.name}})
    validate_spec(spec)
    check_fits_limits(team=team, pool=pool, spec=spec)
    job = Job(team=team, pool=pool, submitted_by=user, resubmitted_from=resubmitted_from, **spec.as_model_fields())
    job.full_clean()
    job.save()
    note = _("resubmitted from #%(id)d") % {"id": resubmitted_from.pk} if resubmitted_from else _("submitted")
    JobEvent.objects.create(
        job=job, from_state="", to_state=JobState.QUEUED, at=job.created_at, message=note, actor=user
    )
    admit_queued(team_id=team.pk, pool_id=pool.pk)
    job.refresh_from_db()
    audit.record(actor=user, action="job.submit", instance=job, before=None, after=audit.snapshot(job))
    return job


def admit_queued(*, team_id: int, pool_id: int) -> list[int]:
    """Admit queued jobs of (team, pool) in queue order while the quota allows. Returns the admitted ids."""
    from .tasks import submit_job_to_cluster

    admitted: list[int] = []
    with transaction.atomic():
        quota = Quota.objects.select_for_update().filter(team_id=team_id, pool_id=pool_id).first()
        if quota is None:
            return admitted
        in_use = (
            Job.objects.filter(team_id=team_id, pool_id=pool_id, state__in=ADMITTED_STATES).aggregate(
                total=Sum("gpus")
            )["total"]
            or 0
        )
        queued = (
            Job.objects.select_for_update()
            .filter(team_id=team_id, pool_id=pool_id, state=JobState.QUEUED)
            .order_by("-priority", "created_at", "id")
        )
        for job in queued:
            if in_use + job.gpus > quota.max_gpus:
                break
            event = job.transition_to(
                JobState.SUBMITTED,
                message=_("admitted: %(used)d of %(quota)d GPUs of the quota in use")
                % {"used": in_use + job.gpus, "quota": quota.max_gpus},
            )
            _record(job, event)
            in_use += job.gpus
            admitted.append(job.pk)
        for job_id in admitted:
            outbox.send(submit_job_to_cluster, job_id)
    return admitted


def queue_position(job: Job) -> int | None:
    """1 for the head of its (team, pool) queue; None when the job is not queued."""
    if job.state != JobState.QUEUED:
        return None
    ahead = Job.objects.filter(team_id=job.team_id, pool_id=job.pool_id, state=JobState.QUEUED).filter(
        Q(priority__gt=job.priority)
        | Q(priority=job.priority, created_at__lt=job.created_at)
        | Q(priority=job.priority, created_at=job.created_at, id__lt=job.id)
    )
    return ahead.count() + 1


def _locked(job_id: int) -> Job:
    return Job.objects.select_for_update().get(pk=job_id)


def _after_release(job: Job) -> None:
    """GPUs of (team, pool) were freed: admit what waits, once this transaction has committed."""
    from .tasks import admit_queued_jobs

    outbox.send(admit_queued_jobs, job.team_id, job.pool_id)


@transaction.atomic
def cancel_job(*, job: Job, user) -> Job:
    """Cancel a job. A job already in the cluster has its Job and pods deleted by the `jobs.delete_job` task."""
    from .tasks import delete_job_from_cluster

    job = _locked(job.pk)
    if job.is_final:
        raise ValidationError(_("Job #%(id)d is already %(state)s.") % {"id": job.pk, "state": job.get_state_display()})
    before = audit.snapshot(job)
    was_admitted = job.state in ADMITTED_STATES
    _record(job, job.transition_to(JobState.CANCELLED, message=_("cancelled"), actor=user))
    audit.record(actor=user, action="job.cancel", instance=job, before=before, after=audit.snapshot(job))
    if was_admitted:
        outbox.send(delete_job_from_cluster, job.pk)
        _after_release(job)
    return job


def resubmit_job(*, job: Job, user) -> Job:
    """Submit a new job with the same spec (the original stays as it was)."""
    if not job.is_final:
        raise ValidationError(_("Only a finished job can be resubmitted; cancel it first."))
    return submit_job(team=job.team, pool=job.pool, user=user, spec=JobSpec.from_job(job), resubmitted_from=job)


# --- what the cluster tells us ---------------------------------------------------------------------------------


@transaction.atomic
def mark_created_in_cluster(*, job_id: int, created: bool) -> None:
    job = _locked(job_id)
    if job.cluster_created_at is not None:
        return
    job.cluster_created_at = timezone.now()
    job.last_error = ""
    job.save(update_fields=["cluster_created_at", "last_error"])
    message = _("Job created in the cluster") if created else _("Job already in the cluster (retried submission)")
    JobEvent.objects.create(job=job, message=message)


@transaction.atomic
def note_submit_problem(*, job_id: int, message: str, attempt: int) -> None:
    job = _locked(job_id)
    job.last_error = message
    job.submit_attempts = attempt
    job.save(update_fields=["last_error", "submit_attempts"])
    JobEvent.objects.create(job=job, message=message)


@transaction.atomic
def fail_job(*, job_id: int, message: str) -> None:
    job = _locked(job_id)
    if job.is_final:
        return
    job.last_error = message
    was_admitted = job.state in ADMITTED_STATES
    _record(job, job.transition_to(JobState.FAILED, message=message))
    if was_admitted:
        _after_release(job)


@dataclass(frozen=True)
class Observation:
    """What sync saw of a job in the cluster: the state it implies, and details for the job page."""

    state: str
    at: object = None
    node_name: str = ""
    pending_reason: str = ""
    message: str = ""


@transaction.atomic
def observe(*, job_id: int, observation: Observation) -> bool:
    """Bring a job to the state the cluster shows, through legal edges; True when something changed.

    A final job never moves again (a cancelled job's pods may still report Running while they are deleted)."""
    job = _locked(job_id)
    if job.is_final or job.state == JobState.QUEUED:
        return False
    changed = False
    fields = []
    if observation.node_name and job.node_name != observation.node_name:
        job.node_name = observation.node_name
        fields.append("node_name")
    if job.pending_reason != observation.pending_reason:
        job.pending_reason = observation.pending_reason
        fields.append("pending_reason")
    if job.state != observation.state and observation.state in TRANSITIONS[job.state]:
        # Cluster times have second precision: never record a step before the one it follows.
        at = max(observation.at or timezone.now(), job.state_changed_at)
        job.transition_to(observation.state, message=observation.message, at=at).save()
        changed = True
        if job.state in FINAL_STATES:
            _after_release(job)
    if changed or fields:
        job.save()
        return True
    return False


def fail_job_deleted_outside(*, job_id: int) -> None:
    """The Job of an admitted portal job disappeared from the cluster without the portal deleting it."""
    job = Job.objects.filter(pk=job_id).only("state").first()
    if job is None or job.state not in ADMITTED_STATES:
        return
    fail_job(job_id=job_id, message=_("the Job was deleted from the cluster outside the portal"))
