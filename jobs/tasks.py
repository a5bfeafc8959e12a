"""Job tasks (queue: cluster). Thin: take ids, re-check state on entry, and let the services decide.

`jobs.submit_job` is safe to run twice or to be cut short by a dying worker: the Kubernetes Job's name derives
from the portal job's id, and AlreadyExists counts as done."""

import logging

from celery import shared_task
from django.conf import settings
from django.db import transaction

from cluster import resources
from cluster.errors import ClusterError, backoff_seconds

from . import services
from .choices import JobState
from .models import Job

log = logging.getLogger(__name__)


def _ensure_namespace(job: Job) -> None:
    from pools.models import TeamNamespace
    from pools.namespaces import reconcile

    state = TeamNamespace.objects.filter(team=job.team).first()
    if state is None or not state.is_applied or state.applied_at is None:
        reconcile(job.team)


def _unsent(job_id: int) -> Job | None:
    """The job when it should be in the cluster and is not yet, read under its row lock: a cancel that is
    committing is waited for, not missed."""
    with transaction.atomic():
        return (
            Job.objects.expected_in_cluster()
            .select_for_update(of=("self",))
            .select_related("team", "pool")
            .filter(pk=job_id, cluster_created_at__isnull=True)
            .first()
        )


@shared_task(name="jobs.submit_job", bind=True, acks_late=True, max_retries=None)
def submit_job_to_cluster(self, job_id: int) -> str:
    job = _unsent(job_id)
    if job is None:
        return "nothing to do"
    from .manifests import render

    attempt = self.request.retries + 1
    try:
        _ensure_namespace(job)
        if _unsent(job_id) is None:  # cancelled while its namespace was being made
            return "nothing to do"
        created = resources.create_job(render(job))
    except ClusterError as error:
        budget = settings.JOB_SUBMIT_MAX_ATTEMPTS
        if error.transient and attempt < budget:
            delay = backoff_seconds(
                attempt, base=settings.JOB_SUBMIT_BACKOFF_SECONDS, cap=settings.TASK_MAX_COUNTDOWN_SECONDS
            )
            services.note_submit_problem(
                job_id=job_id,
                message=f"{error} — retrying in {delay:.0f}s (attempt {attempt} of {budget})",
                attempt=attempt,
            )
            raise self.retry(countdown=delay, exc=error) from error
        services.fail_job(job_id=job_id, message=f"could not create the Job in the cluster: {error}")
        return "failed"
    with transaction.atomic():
        # Re-checked under the lock: a cancel that committed while the Job was being created found nothing to delete.
        wanted = Job.objects.expected_in_cluster().select_for_update().filter(pk=job_id).exists()
        if wanted:
            services.mark_created_in_cluster(job_id=job_id, created=created)
    if not wanted:
        resources.delete_job(job.team.namespace, job.job_name)
        return "final meanwhile: deleted"
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


@shared_task(name="jobs.spill_stuck_jobs", acks_late=True)
def spill_stuck_jobs() -> list[int]:
    from .spill import spill_due_jobs

    return spill_due_jobs()


@shared_task(name="jobs.converge", acks_late=True)
def converge() -> dict:
    """Periodic: bring the cluster in line with the database (jobs/convergence.py)."""
    from .convergence import converge as run

    return run()
