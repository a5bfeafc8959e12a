"""Job tasks (queue: cluster). Thin: take ids, re-check state on entry, and let the services decide.

`jobs.submit_job` is safe to run twice or to be cut short by a dying worker: the Kubernetes Job's name derives
from the portal job's id, and AlreadyExists counts as done."""

import logging

from celery import shared_task
from django.conf import settings

from cluster import resources
from cluster.errors import ClusterError, backoff_seconds

from . import services
from .choices import ADMITTED_STATES, JobState
from .models import Job

log = logging.getLogger(__name__)


def _ensure_namespace(job: Job) -> None:
    from pools.models import TeamNamespace
    from pools.namespaces import reconcile

    state = TeamNamespace.objects.filter(team=job.team).first()
    if state is None or not state.is_applied or state.applied_at is None:
        reconcile(job.team)


@shared_task(name="jobs.submit_job", bind=True, acks_late=True, max_retries=None)
def submit_job_to_cluster(self, job_id: int) -> str:
    job = Job.objects.select_related("team", "pool").filter(pk=job_id).first()
    if job is None or job.state not in ADMITTED_STATES or job.cluster_created_at is not None:
        return "nothing to do"
    from .manifests import render

    attempt = self.request.retries + 1
    try:
        _ensure_namespace(job)
        created = resources.create_job(render(job))
    except ClusterError as error:
        budget = settings.JOB_SUBMIT_MAX_ATTEMPTS
        if error.transient and attempt < budget:
            delay = backoff_seconds(attempt, base=settings.JOB_SUBMIT_BACKOFF_SECONDS, cap=300)
            services.note_submit_problem(
                job_id=job_id,
                message=f"{error} — retrying in {delay:.0f}s (attempt {attempt} of {budget})",
                attempt=attempt,
            )
            raise self.retry(countdown=delay, exc=error) from error
        services.fail_job(job_id=job_id, message=f"could not create the Job in the cluster: {error}")
        return "failed"
    services.mark_created_in_cluster(job_id=job_id, created=created)
    return "created" if created else "already there"


@shared_task(name="jobs.delete_job", bind=True, acks_late=True, max_retries=10)
def delete_job_from_cluster(self, job_id: int) -> str:
    job = Job.objects.select_related("team").filter(pk=job_id).first()
    if job is None:
        return "nothing to do"
    try:
        gone = not resources.delete_job(job.team.namespace, job.job_name)
    except ClusterError as error:
        if error.transient:
            raise self.retry(countdown=backoff_seconds(self.request.retries, base=2, cap=120), exc=error) from error
        raise
    return "already gone" if gone else "deleted"


@shared_task(name="jobs.admit_queued", acks_late=True)
def admit_queued_jobs(team_id: int, pool_id: int) -> list[int]:
    return services.admit_queued(team_id=team_id, pool_id=pool_id)


@shared_task(name="jobs.admit_all_queued", acks_late=True)
def admit_all_queued() -> int:
    """Periodic safety net: admit whatever fits now in every (team, pool) with a queue."""
    pairs = Job.objects.filter(state=JobState.QUEUED).values_list("team_id", "pool_id").distinct()
    return sum(len(services.admit_queued(team_id=team_id, pool_id=pool_id)) for team_id, pool_id in pairs)


@shared_task(name="jobs.resend_unsubmitted", acks_late=True)
def resend_unsubmitted() -> int:
    """Periodic safety net: an admitted job whose submit message was lost (broker restart) is sent again."""
    from datetime import timedelta

    from django.utils import timezone

    stale = Job.objects.filter(
        state=JobState.SUBMITTED,
        cluster_created_at__isnull=True,
        state_changed_at__lt=timezone.now() - timedelta(minutes=10),
        last_error="",
    ).values_list("pk", flat=True)
    for job_id in stale:
        submit_job_to_cluster.delay(job_id)
    return len(stale)


@shared_task(name="jobs.spill_stuck_jobs", acks_late=True)
def spill_stuck_jobs() -> list[int]:
    from .spill import spill_due_jobs

    return spill_due_jobs()
