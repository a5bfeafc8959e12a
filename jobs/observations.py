"""Writes of what the cluster tells the portal about its jobs: a Job created (or not) there, a submission that
failed, the pods and their states, a Job's outcome, jobs gone from the cluster. The submit tasks and the cluster sync
call these; the writes users ask for (submit, cancel, resubmit) and Kueue's verdicts are in `jobs/services.py`."""

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from cluster.facts import JobFacts, PodFacts
from pools.projection import namespace_changed
from portal.models import Team

from .choices import ACTIVE_STATES, TRANSITIONS, JobState
from .models import Job, JobEvent, Pod, Words
from .services import _locked, _record
from .settling import settle_jobs

# --- what the cluster tells us ---------------------------------------------------------------------------------


@transaction.atomic
def mark_created_in_cluster(*, job_id: int, created: bool) -> bool:
    """The submit task made (or found) the job's Job: note it, under the job's row lock. False, writing nothing, when
    the job no longer wants a Job in the cluster (a cancel committed meanwhile): the caller deletes the one it made.
    The check and the write are one locking read, not two (issue 30)."""
    job = Job.objects.expected_in_cluster().select_for_update().filter(pk=job_id).order_by().first()
    if job is None:
        return False
    if job.cluster_created_at is not None:
        return True
    job.cluster_created_at = timezone.now()
    job.last_error = ""
    job.save(update_fields=["cluster_created_at", "last_error"])
    message = (
        Words(gettext_noop("Job created in the cluster"))
        if created
        else Words(gettext_noop("Job already in the cluster (retried submission)"))
    )
    JobEvent.note(job=job, message=message)
    return True


@transaction.atomic
def note_submit_problem(*, job_id: int, message: str | Words, attempt: int) -> None:
    job = _locked(job_id)
    job.last_error = str(message)
    job.submit_attempts = attempt
    job.save(update_fields=["last_error", "submit_attempts"])
    JobEvent.note(job=job, message=message)


@transaction.atomic
def give_up_submission(*, job_id: int, reason: str, verdict: bool, transient: bool) -> str:
    """The submit task stopped trying to create the job's Job (`reconcile.tasks.SubmitTask`): what that means for the
    job, decided under its row lock. Accepted work reaches the cluster without anyone's help (PRODUCT.md), so an outage
    fails no job, and a job the cluster already has is never failed: a create whose answer was lost (timed out) made
    the Job, and Kueue took it, while every later attempt failed before it could be recorded.

    - Made already (recorded), or final: nothing.
    - Not a verdict of the apiserver: the job stays as it is, saying so. A transient failure (the apiserver
      unreachable, timing out, overloaded; a webhook unavailable) or an error of the portal's own (PostgreSQL refusing
      a connection for a moment, a bug). Convergence (reconcile/jobs.py) sends it again once nothing has tried for its
      grace, until the cluster answers; the Job is found by its name if an attempt made it.
    - A verdict (the apiserver refused the Job) on a job Kueue has taken (a Workload seen, or a state past Queued): the
      Job is recorded as made, with the reason noted.
    - A verdict otherwise: the job fails with the reason.
    Returns what was done."""
    job = _locked(job_id)
    if job.is_final or job.cluster_created_at is not None:
        return "nothing to do"
    if not verdict:
        if transient:
            message = Words(
                gettext_noop("the cluster is unreachable (%(reason)s): the job will be sent again once it is back"),
                {"reason": reason},
            )
        else:
            message = Words(
                gettext_noop("the submission stopped (%(reason)s): the job will be sent again in a moment"),
                {"reason": reason},
            )
        job.last_error = str(message)
        job.save(update_fields=["last_error"])
        JobEvent.note(job=job, message=message)
        return "sent again later"
    if job.state != JobState.QUEUED or job.workloads.exists():
        job.cluster_created_at = timezone.now()
        job.last_error = ""
        job.save(update_fields=["cluster_created_at", "last_error"])
        JobEvent.note(
            job=job,
            message=Words(
                gettext_noop("the submission stopped (%(reason)s), but Kueue has the Job already"), {"reason": reason}
            ),
        )
        return "in the cluster"
    fail_job(
        job_id=job_id,
        message=Words(gettext_noop("could not create the Job in the cluster: %(reason)s"), {"reason": reason}),
    )
    return "failed"


@transaction.atomic
def fail_job(*, job_id: int, message: str | Words) -> None:
    job = _locked(job_id)
    if job.is_final:
        return
    job.last_error = str(message)
    _record(job, job.transition_to(JobState.FAILED, message=message))


# === Recorded by the cluster sync ===============================================================================
# The sync (reconcile/sync.py) parses what the watches see into facts (cluster/facts.py) and hands them here: the
# jobs app records its own rows — pods, and the job states they and the Jobs imply. The sync calls only what is
# below this line.


@dataclass(frozen=True)
class Observation:
    """What sync saw of a job in the cluster: the state it implies, and details for the job page."""

    state: str
    at: object = None
    node_name: str = ""
    pending_reason: str = ""
    message: str | Words = ""


def job_outcome_observation(job: JobFacts, *, started: bool = True) -> Observation | None:
    """The final state a finished Job implies (None while it has not finished). The Job's deadline (the maximum run
    time) counts from Kueue's admission: a job that never `started` ran out of it before its pods could run."""
    if job.outcome == "Complete":
        return Observation(state=JobState.SUCCEEDED, at=job.finished_at, message=Words(gettext_noop("completed")))
    if job.outcome == "Failed":
        if job.reason == "DeadlineExceeded" and not started:
            message = Words(
                gettext_noop("stopped: its maximum run time, counted from its admission, ran out before it started")
            )
        elif job.reason == "DeadlineExceeded":
            message = Words(gettext_noop("stopped: it ran longer than its maximum run time"))
        else:
            said = f"{job.reason}: {job.message}".strip(": ")
            message = (
                Words(gettext_noop("The cluster says: %(message)s"), {"message": said})
                if said
                else Words(gettext_noop("failed"))
            )
        return Observation(state=JobState.FAILED, at=job.finished_at, message=message)
    return None


@transaction.atomic
def observe(*, job_id: int, observation: Observation) -> bool:
    """Bring a job to the final state its Job shows, through legal edges; True when something changed.

    A final job never moves again (a cancelled job's pods may still report Running while they are deleted). A job
    still Queued in the portal may finish: a short job can run and complete before the sync has seen its Workload
    admitted."""
    job = _locked(job_id)
    if job.is_final:
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
        _record(job, job.transition_to(observation.state, message=observation.message, at=at))
        changed = True
    elif fields:
        job.save()
    return changed or bool(fields)


def fail_job_deleted_outside(*, job_id: int) -> None:
    """The Job of an admitted portal job disappeared from the cluster without the portal deleting it."""
    job = Job.objects.filter(pk=job_id).only("state").first()
    if job is None or job.state not in ACTIVE_STATES:
        return
    fail_job(job_id=job_id, message=Words(gettext_noop("the Job was deleted from the cluster outside the portal")))


@dataclass(frozen=True)
class PodOwner:
    """Whom a pod is attributed to: its team (by namespace), its pool (its node's, else its portal job's) and its
    portal job (None for a pod that is no portal job's, whatever its labels say)."""

    team_id: int | None
    pool_id: int | None
    job_id: int | None


POD_FIELDS = (
    "team_id",
    "pool_id",
    "job_id",
    "node_name",
    "gpus",
    "phase",
    "scheduled",
    "pending_reason",
    "bound_at",
    "finished_at",
    "completion_index",
    "restarts",
    "deleting",
)
POD_BATCH = 1000


def _pod_row(pod: PodFacts, owner: PodOwner) -> Pod:
    return Pod(
        uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        team_id=owner.team_id,
        pool_id=owner.pool_id,
        job_id=owner.job_id,
        node_name=pod.node_name,
        gpus=pod.gpus,
        phase=pod.phase,
        scheduled=pod.scheduled,
        pending_reason=pod.pending_reason,
        created_at=pod.created_at or timezone.now(),
        bound_at=pod.bound_at,
        finished_at=pod.finished_at,
        completion_index=pod.completion_index,
        restarts=pod.restarts,
        deleting=pod.deleting,
    )


def _stored_pods(uids: list[str] | None) -> dict[str, tuple]:
    """uid -> compared values of stored Pod rows (all rows when `uids` is None)."""
    rows = Pod.objects.all() if uids is None else Pod.objects.filter(uid__in=uids)
    return {row[0]: tuple(row[1:]) for row in rows.values_list("uid", *POD_FIELDS)}


@transaction.atomic(savepoint=False)  # within a caller's transaction: no savepoint per call
def record_pods(*, pods: list[tuple[PodFacts, PodOwner]], complete: bool = False) -> None:
    """Record what the cluster says of `pods`: one row per pod, upserted by UID; only new or changed rows are
    written (a relist mostly finds nothing changed: no write at all). With `complete` (`pods` is every pod there
    is) the rows of pods missing from it are deleted: they went while nobody watched. When a team's GPU pods start
    or finish stopping (`Pod.is_stopping`), its namespace is marked changed: its ResourceQuota leaves room for them."""
    rows = [_pod_row(pod, owner) for pod, owner in pods]
    stored = _stored_pods(None if complete else [row.uid for row in rows])
    changed = [row for row in rows if stored.get(row.uid) != tuple(getattr(row, f) for f in POD_FIELDS)]
    room_changed = {row.team_id for row in changed if row.gpus and row.is_stopping != _was_stopping(stored, row.uid)}
    if changed:
        Pod.objects.bulk_create(
            changed,
            batch_size=POD_BATCH,
            update_conflicts=True,
            unique_fields=["uid"],
            update_fields=[f.removesuffix("_id") for f in POD_FIELDS] + ["seen_at"],
        )
    if complete:
        present = {row.uid for row in rows}
        gone = [uid for uid in stored if uid not in present]
        if gone:
            went = [_stored_row(stored[uid]) for uid in gone]
            room_changed |= {row.team_id for row in went if row.gpus and row.is_stopping}
            Pod.objects.filter(uid__in=gone).delete()
    _make_room_for_stopping(room_changed)


@transaction.atomic
def remove_pods(*, uids: list[str]) -> None:
    """The pods were deleted from the cluster: their rows go (their GPU time stays in billing)."""
    pods = Pod.objects.filter(uid__in=uids)
    _make_room_for_stopping(set(pods.stopping().filter(gpus__gt=0).values_list("team_id", flat=True)))
    pods.delete()


def _stored_row(values: tuple) -> Pod:
    """A stored row's compared values (`_stored_pods`) as an unsaved Pod."""
    return Pod(**dict(zip(POD_FIELDS, values, strict=True)))


def _was_stopping(stored: dict[str, tuple], uid: str) -> bool:
    return uid in stored and _stored_row(stored[uid]).is_stopping


def _make_room_for_stopping(team_ids: set) -> None:
    """The GPUs of these teams' stopping pods changed: their namespace's ResourceQuota leaves room for them
    (`pools.projection.namespace_spec`: Kueue has given their quota to other jobs already), so it is reconciled."""
    for team in Team.objects.filter(pk__in=[pk for pk in team_ids if pk is not None]):
        namespace_changed(team)


def record_pod_states(*, pods: list[tuple[int, PodFacts]]) -> None:
    """Pods of portal jobs changed (`pods`: (portal job id, pod), their rows already recorded): settle the unfinished
    jobs from their Workload and pods together (`settling.settle_jobs`), in the caller's transaction if there is one."""
    job_ids = {job_id for job_id, _pod in pods}
    if job_ids:
        settle_jobs(job_ids=job_ids)


def record_job_state(*, job_id: int, job: JobFacts) -> None:
    """A portal job's Job, as the cluster shows it: a finished Job finishes the portal job."""
    started = job.reason != "DeadlineExceeded" or Job.objects.filter(pk=job_id, started_at__isnull=False).exists()
    observation = job_outcome_observation(job, started=started)
    if observation is not None:
        observe(job_id=job_id, observation=observation)


def settle_missing_jobs(*, present_job_ids: set[int], created_before) -> list[int]:
    """After a full list of the portal's Jobs: unfinished jobs whose Job was created before `created_before` and is
    not in the list were deleted outside the portal; they fail with that reason. Returns their ids."""
    missing = list(
        Job.objects.filter(state__in=ACTIVE_STATES, cluster_created_at__lt=created_before)
        .exclude(pk__in=present_job_ids)
        .values_list("pk", flat=True)
    )
    for job_id in missing:
        fail_job_deleted_outside(job_id=job_id)
    return missing
