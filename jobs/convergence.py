"""Convergence: the cluster is brought back in line with PostgreSQL, whatever messages were lost on the way.

PostgreSQL is the source of truth; task messages are only the fast path. A message can be lost (Redis restarted
without it, a worker killed mid-task, a retry whose countdown lived only in Redis) and a Job can outlive its job
(a cancel whose delete ran before the Job was created, a delete that failed while the apiserver was down). Every
15 s (beat: `jobs.converge`) two sweeps put that right; both are idempotent.

1. Missing Jobs. Every job that should have a Job in the cluster (`Job.objects.expected_in_cluster()`) and has
   none recorded (`cluster_created_at` empty) is sent again through the outbox, once nothing has tried to send it
   for CONVERGENCE_GRACE_SECONDS: no state change, no event (each failed attempt notes one) and no outbox message
   for it in that time. A fresh submission or a retry in progress is left alone; a lost one is picked up within
   the grace plus one period. Jobs with a `last_error` are included. The submit task finds a Job that exists by
   its name, so a resend never makes a second one.
2. Leftover Jobs. One LIST of the Jobs labelled `app.kubernetes.io/managed-by=reservoir` (in pages) is compared
   with the database. The Job of a job that is final in the portal is deleted when the job was cancelled, or when
   the Job has not finished although the portal finished the job more than the grace ago. A Job that finished in
   the cluster is otherwise left to its TTL (its logs stay readable). Only the Job named `rsv-<id>` in the
   namespace of job <id>'s team is the portal's: any other Job carrying that label is not the portal's to delete.
"""

import contextlib
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Max, Q
from django.utils import timezone

from cluster import resources
from cluster.errors import ClusterError
from cluster.facts import JobFacts
from portal import outbox
from portal.models import OutboxMessage

from .choices import FINAL_STATES, JobState
from .models import Job

log = logging.getLogger(__name__)

# PostgreSQL advisory lock key: one convergence at a time, however many workers pick up beat's messages.
LOCK_KEY = 7_340_014

# The task that creates a job's Job in the cluster (jobs/tasks.py), asked for by name through the outbox.
SUBMIT_TASK = "jobs.submit_job"


def _grace() -> timedelta:
    return timedelta(seconds=settings.CONVERGENCE_GRACE_SECONDS)


def missing_job_ids(*, now: datetime) -> list[int]:
    """Ids of the jobs to send again: expected in the cluster, not created there, untouched for the grace."""
    cutoff = now - _grace()
    quiet = (
        Job.objects.expected_in_cluster()
        .filter(cluster_created_at__isnull=True, state_changed_at__lt=cutoff)
        .annotate(last_event=Max("events__at"))
        .filter(Q(last_event__isnull=True) | Q(last_event__lt=cutoff))
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    candidates = list(quiet)
    if not candidates:
        return []
    recently_sent = {
        args[0]
        for args in OutboxMessage.objects.filter(task=SUBMIT_TASK, created_at__gte=cutoff).values_list(
            "args", flat=True
        )
        if args
    }
    return [job_id for job_id in candidates if job_id not in recently_sent]


def resend_missing(*, now: datetime) -> list[int]:
    job_ids = missing_job_ids(now=now)
    for job_id in job_ids:
        outbox.send(SUBMIT_TASK, job_id)
    if job_ids:
        log.warning("convergence: %d job(s) had no Job in the cluster; sent again: %s", len(job_ids), job_ids)
    return job_ids


@dataclass(frozen=True)
class FinalJob:
    """What sweep 2 needs to know of a job that is final in the portal."""

    namespace: str
    name: str
    state: str
    finished_at: datetime | None


def leftovers(cluster_jobs: list[JobFacts], final_jobs: dict[int, FinalJob], *, cutoff: datetime) -> list[FinalJob]:
    """The cluster Jobs (of `cluster_jobs`) to delete, given the final portal jobs by id. Pure: no I/O."""
    doomed = []
    for facts in cluster_jobs:
        job = final_jobs.get(facts.job_id)
        if job is None or facts.deleting:
            continue
        if (facts.namespace, facts.name) != (job.namespace, job.name):
            continue  # labelled with a portal job id, but not that job's Job
        finished_long_ago = job.finished_at is not None and job.finished_at < cutoff
        if job.state == JobState.CANCELLED or (finished_long_ago and not facts.outcome):
            doomed.append(job)
    return doomed


def _final_jobs(job_ids: set[int]) -> dict[int, FinalJob]:
    rows = (
        Job.objects.filter(pk__in=job_ids, state__in=FINAL_STATES)
        .select_related("team")
        .only("pk", "state", "finished_at", "team__slug")
    )
    return {job.pk: FinalJob(job.team.namespace, job.job_name, job.state, job.finished_at) for job in rows}


def delete_leftovers(*, now: datetime) -> list[str]:
    """Sweep 2; returns the `namespace/name` of the Jobs deleted."""
    deleted = []
    for page in resources.managed_job_pages():
        ids = {facts.job_id for facts in page if facts.job_id is not None}
        for job in leftovers(page, _final_jobs(ids), cutoff=now - _grace()):
            resources.delete_job(job.namespace, job.name)
            deleted.append(f"{job.namespace}/{job.name}")
            log.warning("convergence: deleted %s/%s: the job is %s in the portal", job.namespace, job.name, job.state)
    return deleted


@contextlib.contextmanager
def _single_run():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY])
        got = cursor.fetchone()[0]
    try:
        yield got
    finally:
        if got:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])


def converge(*, now: datetime | None = None) -> dict:
    """Both sweeps. A cluster that cannot be reached only postpones sweep 2 to the next run."""
    with _single_run() as got:
        if not got:
            return {"skipped": "another convergence is running"}
        now = now or timezone.now()
        summary: dict = {"resent": resend_missing(now=now)}
        try:
            summary["deleted"] = delete_leftovers(now=now)
        except ClusterError as error:
            log.warning("convergence: could not compare with the cluster: %s", error)
            summary["deleted"] = []
            summary["cluster_error"] = str(error)
    return summary
