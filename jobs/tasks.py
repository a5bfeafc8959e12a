"""Job tasks (queue: cluster). Thin: take ids, re-check state on entry, and let the services decide.

Both cluster tasks use the one retry policy of `portal.retry.ClusterTask`: a transient cluster failure retries the
task with backoff and jitter; when the submission gives up, the job is Failed with the reason. `jobs.submit_job`
is safe to run twice or to be cut short by a dying worker: the Kubernetes Job's name derives from the portal job's
id, and AlreadyExists counts as done. It reads the job under its row lock and checks again after creating the Job,
so a cancel racing it never leaves a Job running for a cancelled job."""

import logging

from celery import shared_task
from django.db import transaction
from django.utils.translation import gettext_noop

from cluster import resources
from cluster.errors import ClusterError, describe
from cluster.namespaces import rendezvous_policy_name
from portal.retry import ClusterTask

from . import observations
from .models import Job, Words

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


class SubmitTask(ClusterTask):
    def gave_up(self, error: BaseException, job_id: int, *args, **kwargs) -> None:
        reason = str(error) if isinstance(error, ClusterError) else describe(error)
        message = Words(gettext_noop("could not create the Job in the cluster: %(reason)s"), {"reason": reason})
        observations.fail_job(job_id=job_id, message=message)


def _ensure_gang_service(job: Job) -> None:
    """A multi-node job's headless Service, owned by its Job (the garbage collector deletes it with the Job). Made
    after the Job, whose uid it names; a retry finds it there. Nothing when the Job is gone again (cancelled)."""
    if not job.is_gang:
        return
    from .manifests import render_service

    uid = resources.job_uid(job.team.namespace, job.job_name)
    if uid is not None:
        resources.create_service(render_service(job, owner_uid=uid))


def _ensure_rendezvous_policy(job: Job) -> None:
    """A multi-node job's NetworkPolicy (its rendezvous port open to its own pods), before its pods can exist. The
    namespace reconcile puts it back if edited and deletes it once the job is over (pools/namespaces.py)."""
    from .manifests import render_network_policy

    policy = render_network_policy(job)
    if policy is not None:
        resources.apply_network_policy(policy)


@shared_task(base=SubmitTask, name="jobs.submit_job", bind=True)
def submit_job_to_cluster(self, job_id: int) -> str:
    job = _unsent(job_id)
    if job is None:
        return "nothing to do"
    from .manifests import render

    attempt = self.request.retries + 1
    try:
        _ensure_namespace(job)
        _ensure_rendezvous_policy(job)
        created = resources.create_job(render(job))
        _ensure_gang_service(job)
    except ClusterError as error:
        if error.transient and attempt <= self.max_retries:
            observations.note_submit_problem(
                job_id=job_id,
                message=Words(
                    gettext_noop("%(error)s — retrying (attempt %(attempt)d of %(attempts)d)"),
                    {"error": str(error), "attempt": attempt, "attempts": self.max_retries + 1},
                ),
                attempt=attempt,
            )
        raise
    with transaction.atomic():
        # Re-checked under the lock: a cancel that committed while the Job was being created found nothing to delete.
        wanted = Job.objects.expected_in_cluster().select_for_update().filter(pk=job_id).exists()
        if wanted:
            observations.mark_created_in_cluster(job_id=job_id, created=created)
    if not wanted:
        resources.delete_job(job.team.namespace, job.job_name)
        return "final meanwhile: deleted"
    return "created" if created else "already there"


@shared_task(base=ClusterTask, name="jobs.delete_job", bind=True)
def delete_job_from_cluster(self, job_id: int) -> str:
    job = Job.objects.select_related("team").filter(pk=job_id).first()
    if job is None:
        return "nothing to do"
    gone = not resources.delete_job(job.team.namespace, job.job_name)
    if job.is_gang:
        # Owned by the Job, so the garbage collector would delete it too; deleted here so that it goes now.
        resources.delete_service(job.team.namespace, job.job_name)
        resources.delete_network_policy(job.team.namespace, rendezvous_policy_name(job.job_name))
    return "already gone" if gone else "deleted"


@shared_task(name="jobs.spill_stuck_jobs", acks_late=True)
def spill_stuck_jobs() -> list[int]:
    from .spill import spill_due_jobs

    return spill_due_jobs()


@shared_task(name="jobs.converge", acks_late=True)
def converge() -> dict:
    """Periodic: bring the cluster in line with the database (jobs/convergence.py)."""
    from .convergence import converge as run

    return run()
