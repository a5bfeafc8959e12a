"""Jobs in the cluster: each portal job's Kubernetes Job (with a gang's Service and rendezvous policy) is created by
`create_in_cluster` and deleted by `delete_from_cluster` (the tasks `jobs.submit_job` and `jobs.delete_job`, in
reconcile/tasks.py), and convergence brings the cluster back in line with PostgreSQL, whatever messages were lost
on the way. The pods and Workloads the Jobs make are mirrored into the database by reconcile/sync.py.

Creating is safe to run twice or to be cut short by a dying worker: the Kubernetes Job's name derives from the portal
job's id, and AlreadyExists counts as done. It reads the job under its row lock and checks again after creating the
Job, so a cancel racing it never leaves a Job running for a cancelled job.

Convergence.

PostgreSQL is the source of truth; task messages are only the fast path. A message can be lost (Redis restarted
without it, a worker killed mid-task, a retry whose countdown lived only in Redis) and a Job can outlive its job
(a cancel whose delete ran before the Job was created, a delete that failed while the apiserver was down). Every
15 s (beat: `jobs.converge`) three sweeps put that right; all are idempotent.

1. Missing Jobs. Every job that should have a Job in the cluster (`Job.objects.expected_in_cluster()`) and has
   none recorded (`cluster_created_at` empty) is sent again through the outbox, once nothing has tried to send it
   for CONVERGENCE_GRACE_SECONDS: no state change, no event (each failed attempt notes one) and no outbox message
   for it in that time. A fresh submission or a retry in progress is left alone; a lost one is picked up within
   the grace plus one period. Jobs with a `last_error` are included: among them those whose submit task ran out of
   retries on a transient failure (an outage), sent again after each chain until the cluster answers. The submit task
   finds a Job that exists by its name, so a resend never makes a second one.
2. Leftover Jobs. One LIST of the Jobs labelled `app.kubernetes.io/managed-by=reservoir` (in pages) is compared
   with the database. The Job of a job that is final in the portal is deleted when the job was cancelled, or when
   the Job has not finished although the portal finished the job more than the grace ago. A Job that finished in
   the cluster is otherwise left to its TTL (its logs stay readable). Only the Job named `rsv-<id>` in the
   namespace of job <id>'s team is the portal's: any other Job carrying that label is not the portal's to delete.
3. Jobs Kueue skipped. A queued job whose Job was made more than the grace ago and of which the sync has recorded no
   Workload is looked for in one LIST of the cluster's Workloads; a Job that owns none is nudged (see "Jobs Kueue
   skipped" below).
"""

import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Max, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext_noop

from cluster import kueue_objects, resources
from cluster.errors import ClusterError
from cluster.facts import JobFacts
from cluster.labels import LOCAL_QUEUE_NAME
from cluster.namespaces import rendezvous_policy_name
from jobs import observations
from jobs.choices import FINAL_STATES, JobState
from jobs.manifests import render, render_network_policy, render_service
from jobs.models import Job, Words
from portal import outbox
from portal.models import OutboxMessage

from . import kueue, namespaces

log = logging.getLogger(__name__)

# PostgreSQL advisory lock key: one convergence at a time, however many workers pick up beat's messages.
LOCK_KEY = 7_340_014

# The task that creates a job's Job in the cluster (reconcile/tasks.py), asked for by name through the outbox.
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


def skipped_jobs(*, now: datetime) -> list[Job]:
    """Sweep 3's candidates: queued jobs whose Job was made more than the grace ago and of which the sync has seen no
    Workload (at most SKIPPED_BATCH, oldest first)."""
    return list(
        Job.objects.filter(state=JobState.QUEUED, cluster_created_at__lt=now - _grace(), workloads__isnull=True)
        .select_related("team")
        .only("pk", "team__slug")
        .order_by("pk")[:SKIPPED_BATCH]
    )


def nudge_skipped(*, now: datetime) -> list[str]:
    """Sweep 3; returns the `namespace/name` of the Jobs nudged. One LIST of the cluster's Workloads, only when the
    database has candidates: a job whose Workload the sync has not recorded yet (the sync away) is left alone."""
    candidates = [(job.team.namespace, job.job_name) for job in skipped_jobs(now=now)]
    nudged = kueue_objects.nudge_jobs_without_workload(candidates, at=now.isoformat())
    if nudged:
        log.warning("convergence: nudged %d Job(s) Kueue had made no Workload for: %s", len(nudged), nudged)
    return nudged


def converge(*, now: datetime | None = None) -> dict:
    """The three sweeps. A cluster that cannot be reached only postpones sweeps 2 and 3 to the next run."""
    with _single_run() as got:
        if not got:
            return {"skipped": "another convergence is running"}
        now = now or timezone.now()
        summary: dict = {"resent": resend_missing(now=now), "deleted": [], "nudged": []}
        try:
            summary["deleted"] = delete_leftovers(now=now)
            summary["nudged"] = nudge_skipped(now=now)
        except ClusterError as error:
            log.warning("convergence: could not compare with the cluster: %s", error)
            summary["cluster_error"] = str(error)
    return summary


# --- create and delete -------------------------------------------------------------------------------------------


def _unsent(job_id: int) -> Job | None:
    """The job when it should be in the cluster and is not yet. A plain read, without the row lock: a cancel that
    commits after it is caught by the re-check under the lock once the Job is made (`create_in_cluster`), which
    deletes the Job again. Locking here too cost every submission a transaction of its own and a WAL flush at its
    commit (issue 30: a fifth of the submit task's time at 1,000 jobs) and protected nothing the re-check does not."""
    return (
        Job.objects.expected_in_cluster()
        .select_related("team", "pool")
        .filter(pk=job_id, cluster_created_at__isnull=True)
        .order_by()
        .first()
    )


# A team's LocalQueue seen in the cluster, old enough that Kueue has its namespace (not `queue_is_fresh`), is taken as
# there for QUEUE_MEMO_SECONDS without asking the API server again: a burst of submissions makes one read of it per team
# and period instead of one per Job (issue 30: the read was half of the submit task's calls). Kept per worker process,
# keyed by team and namespace (a team made again with the same namespace is another team). A queue deleted behind the
# portal's back within that time costs no Job: it is made with the queue's label, Kueue makes its Workload (its
# namespace is old) and admits it when the queue is back, at the next projection reconcile (beat, every 60 s: Kueue
# takes a new queue's waiting Workloads), tests/jobs/test_cluster_jobs.py. (A whole namespace deleted and made again
# within that time: a Job Kueue then skips is nudged by convergence's sweep 3, below.)
QUEUE_MEMO_SECONDS = 10.0
_queues_seen: dict[tuple[int, str], tuple[float, dict]] = {}


def _ensure_local_queue(job: Job, *, clock=time.monotonic) -> dict | None:
    """The team's LocalQueue, in the cluster before its Job is (issue 31: a Job made before its queue, a team created a
    moment before its first job, stayed suspended without a Workload for good). When the queue is missing, the Kueue
    projection is reconciled first. Returns the queue as the cluster has it (None: the projection wants none), or as
    it was seen less than QUEUE_MEMO_SECONDS ago when it was old enough then."""
    key = (job.team_id, job.team.namespace)
    seen = _queues_seen.get(key)
    if seen is not None and clock() - seen[0] < QUEUE_MEMO_SECONDS:
        return seen[1]
    queue = _read_or_make_local_queue(job)
    if queue is not None and not queue_is_fresh(queue, now=timezone.now()):
        _queues_seen[key] = (clock(), queue)
    else:
        _queues_seen.pop(key, None)
    return queue


def _read_or_make_local_queue(job: Job) -> dict | None:
    def read() -> dict | None:
        return kueue_objects.read_kueue_object("LocalQueue", LOCAL_QUEUE_NAME, job.team.namespace)

    queue = read()
    if queue is not None:
        return queue
    try:
        kueue.reconcile()
    except ClusterError as error:
        # Another object of the projection may fail (a foreign object with a name the portal wants): that is the
        # projection's to report, not this job's, once its own queue is there.
        queue = None if error.transient else read()
        if queue is None:
            raise
        return queue
    return read()


# --- Jobs Kueue skipped ------------------------------------------------------------------------------------------
#
# Kueue v0.17.0's Job controller first looks the Job's namespace up in its own informer cache, and when the namespace
# is not there yet it drops the Job and never looks at it again ("Namespace not found; skipping selector check", no
# requeue; the ManagedJobsNamespaceSelectorAlwaysRespected feature, on by default). A Job made a moment after its
# namespace, a new team's first job, could so stay suspended without a Workload for good. Any change to the Job makes
# Kueue look again: the portal touches one annotation (`resources.nudge_job`) while no Workload appears.
# - The submit task, when the team's LocalQueue is younger than FRESH_QUEUE_SECONDS (a queue is never older than its
#   namespace, so an older queue proves an older namespace), waits up to TAKE_WAIT_SECONDS for the Workload and
#   nudges the Job while there is none.
# - Convergence (sweep 3) nudges every queued job's Job of which no Workload was seen for the grace, in case the
#   worker died while waiting or Kueue's cache took longer still.

FRESH_QUEUE_SECONDS = 15
TAKE_WAIT_SECONDS = 20.0
NUDGE_AFTER_SECONDS = 1.0
SKIPPED_BATCH = 200


def queue_is_fresh(queue: dict | None, *, now: datetime) -> bool:
    """Whether the LocalQueue was made less than FRESH_QUEUE_SECONDS ago (or is missing, or says nothing of when).
    Pure."""
    created = parse_datetime(((queue or {}).get("metadata") or {}).get("creationTimestamp") or "")
    return created is None or now - created < timedelta(seconds=FRESH_QUEUE_SECONDS)


def wait_until_kueue_takes(
    namespace: str, name: str, *, wait: float = TAKE_WAIT_SECONDS, sleep=time.sleep, clock=time.monotonic
) -> bool:
    """Wait until Kueue has made the Job's Workload, nudging the Job each time one is still missing after
    NUDGE_AFTER_SECONDS; False when none came within `wait` seconds, the Job is gone or the cluster could not be
    asked (convergence's sweep 3 goes on from there)."""
    started = clock()
    pause = 0.05
    try:
        while not kueue_objects.job_has_workload(namespace, name):
            waited = clock() - started
            if waited + pause > wait:
                log.warning("Kueue made no Workload for the Job %s/%s in %.0f s", namespace, name, waited)
                return False
            if waited >= NUDGE_AFTER_SECONDS and not resources.nudge_job(
                namespace, name, at=timezone.now().isoformat()
            ):
                return False
            sleep(pause)
            pause = min(pause * 2, 4.0)
    except ClusterError as error:
        log.warning("could not see whether Kueue took the Job %s/%s: %s", namespace, name, error)
        return False
    return True


def _ensure_gang_service(job: Job) -> None:
    """A multi-node job's headless Service, owned by its Job (the garbage collector deletes it with the Job). Made
    after the Job, whose uid it names; a retry finds it there. Nothing when the Job is gone again (cancelled)."""
    if not job.is_gang:
        return
    uid = resources.job_uid(job.team.namespace, job.job_name)
    if uid is not None:
        resources.create_service(render_service(job, owner_uid=uid))


def _ensure_rendezvous_policy(job: Job) -> None:
    """A multi-node job's NetworkPolicy (its rendezvous port open to its own pods), before its pods can exist. The
    namespace reconcile puts it back if edited and deletes it once the job is over (reconcile/namespaces.py)."""
    policy = render_network_policy(job)
    if policy is not None:
        resources.apply_network_policy(policy)


def create_in_cluster(job_id: int, *, attempt: int, attempts: int) -> str:
    """Create the job's Job (and what a gang needs) unless it is there or no longer wanted. On a transient failure
    that will be retried (`attempt` < `attempts`), the job gets an event saying so; the error is raised."""
    job = _unsent(job_id)
    if job is None:
        return "nothing to do"
    try:
        namespaces.ensure(job.team)
        queue = _ensure_local_queue(job)
        _ensure_rendezvous_policy(job)
        created = resources.create_job(render(job))
        _ensure_gang_service(job)
    except ClusterError as error:
        if error.transient and attempt < attempts:
            observations.note_submit_problem(
                job_id=job_id,
                message=Words(
                    gettext_noop("%(error)s — retrying (attempt %(attempt)d of %(attempts)d)"),
                    {"error": str(error), "attempt": attempt, "attempts": attempts},
                ),
                attempt=attempt,
            )
        raise
    # Re-checked under the lock: a cancel that committed while the Job was being created found nothing to delete.
    wanted = observations.mark_created_in_cluster(job_id=job_id, created=created)
    if not wanted:
        resources.delete_job(job.team.namespace, job.job_name)
        return "final meanwhile: deleted"
    if created and queue_is_fresh(queue, now=timezone.now()):
        wait_until_kueue_takes(job.team.namespace, job.job_name)
    return "created" if created else "already there"


def delete_from_cluster(job_id: int) -> str:
    job = Job.objects.select_related("team").filter(pk=job_id).first()
    if job is None:
        return "nothing to do"
    gone = not resources.delete_job(job.team.namespace, job.job_name)
    if job.is_gang:
        # Owned by the Job, so the garbage collector would delete it too; deleted here so that it goes now.
        resources.delete_service(job.team.namespace, job.job_name)
        resources.delete_network_policy(job.team.namespace, rendezvous_policy_name(job.job_name))
    return "already gone" if gone else "deleted"
