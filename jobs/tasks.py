"""Job tasks (queue: cluster). Thin: take ids, re-check state on entry, and let the services decide.

Both tasks use the one retry policy of `portal.celery.ClusterTask`: a transient cluster failure retries the task
with backoff and jitter; when the submission gives up, the job is Failed with the reason. `jobs.submit_job` is
safe to run twice or to be cut short by a dying worker: the Kubernetes Job's name derives from the portal job's id,
and AlreadyExists counts as done."""

import logging

from celery import shared_task

from cluster import resources
from cluster.errors import ClusterError, describe
from portal.celery import ClusterTask

from . import services
from .choices import ACTIVE_STATES
from .models import Job

log = logging.getLogger(__name__)


def _ensure_namespace(job: Job) -> None:
    from pools.models import TeamNamespace
    from pools.namespaces import reconcile

    state = TeamNamespace.objects.filter(team=job.team).first()
    if state is None or not state.is_applied or state.applied_at is None:
        reconcile(job.team)


class SubmitTask(ClusterTask):
    def gave_up(self, error: BaseException, job_id: int, *args, **kwargs) -> None:
        reason = str(error) if isinstance(error, ClusterError) else describe(error)
        services.fail_job(job_id=job_id, message=f"could not create the Job in the cluster: {reason}")


@shared_task(base=SubmitTask, name="jobs.submit_job", bind=True)
def submit_job_to_cluster(self, job_id: int) -> str:
    job = Job.objects.select_related("team", "pool").filter(pk=job_id).first()
    if job is None or job.state not in ACTIVE_STATES or job.cluster_created_at is not None:
        return "nothing to do"
    from .manifests import render

    attempt = self.request.retries + 1
    try:
        _ensure_namespace(job)
        created = resources.create_job(render(job))
    except ClusterError as error:
        if error.transient and attempt <= self.max_retries:
            services.note_submit_problem(
                job_id=job_id,
                message=f"{error} — retrying (attempt {attempt} of {self.max_retries + 1})",
                attempt=attempt,
            )
        raise
    services.mark_created_in_cluster(job_id=job_id, created=created)
    return "created" if created else "already there"


@shared_task(base=ClusterTask, name="jobs.delete_job", bind=True)
def delete_job_from_cluster(self, job_id: int) -> str:
    job = Job.objects.select_related("team").filter(pk=job_id).first()
    if job is None:
        return "nothing to do"
    gone = not resources.delete_job(job.team.namespace, job.job_name)
    return "already gone" if gone else "deleted"


@shared_task(name="jobs.spill_stuck_jobs", acks_late=True)
def spill_stuck_jobs() -> list[int]:
    from .spill import spill_due_jobs

    return spill_due_jobs()
