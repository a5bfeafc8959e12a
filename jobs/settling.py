"""Kueue's verdicts mirrored back: the Workload rows the cluster sync keeps (`record_workload_events`), and the
state each job's newest Workload and its pods imply (`settle_jobs`), so the order in which the watches deliver
Workload and pod events does not matter.

The sync settles jobs at every step of their Workloads and pods: at 1,000 jobs starting at once that is thousands of
settlings within a minute, on the watch's one thread. A batch of pod events settles all its jobs together: one
locking read of the jobs, one of their newest Workloads and one of their live pods, whatever the batch's size, and
then a write only for what changed (issue 30). A batch of Workload events does the same once its rows are written,
but for a job whose Workloads change twice in it, settled in between (`record_workload_events`).
"""

from collections import defaultdict

from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext_noop

from cluster.facts import PREEMPTOR_UID, WorkloadFacts
from pools.models import Pool

from .choices import ACTIVE_STATES, TRANSITIONS, JobState
from .models import TRANSITION_FIELDS, Job, Pod, Words, Workload
from .services import _record

# The Workload row's fields that come from the cluster (what `_workload_fields` fills).
WORKLOAD_FIELDS = (
    "namespace",
    "name",
    "job_id",
    "cluster_queue",
    "priority",
    "quota_reserved",
    "admitted",
    "finished",
    "flavors",
    "message",
    "evicted_reason",
    "evicted_message",
    "requeue_count",
    "created_at",
    "admitted_at",
)


def _workload_fields(facts: WorkloadFacts, job_id: int) -> dict:
    return {
        "namespace": facts.namespace,
        "name": facts.name,
        "job_id": job_id,
        "cluster_queue": facts.cluster_queue,
        "priority": facts.priority,
        "quota_reserved": facts.quota_reserved,
        "admitted": facts.admitted,
        "finished": facts.finished,
        "flavors": list(facts.flavors),
        "message": facts.message,
        "evicted_reason": facts.evicted_reason,
        "evicted_message": facts.evicted_message,
        "requeue_count": facts.requeue_count,
        "created_at": facts.created_at or timezone.now(),
        "admitted_at": facts.admitted_at,
    }


def _upsert_workload(uid: str, fields: dict) -> None:
    """One statement (INSERT ... ON CONFLICT (uid) DO UPDATE): update_or_create took four round trips (a savepoint, a
    locking read, the write, the release), and the sync writes a row for every step of every Workload."""
    Workload.objects.bulk_create(
        [Workload(uid=uid, **fields)],
        update_conflicts=True,
        unique_fields=["uid"],
        update_fields=[name.removesuffix("_id") for name in WORKLOAD_FIELDS] + ["seen_at"],
    )


def stored_workloads(*, uids: list[str]) -> dict[str, dict]:
    """The kept fields of the stored Workload rows of `uids`, by uid."""
    rows = Workload.objects.filter(uid__in=uids).values("uid", *WORKLOAD_FIELDS).order_by()
    return {row.pop("uid"): row for row in rows}


def _as_stored(before: dict | None, fields: dict) -> bool:
    """True when a Workload's stored row (`before`, None: no row) already holds every kept field of `fields`."""
    return before is not None and all(before[key] == value for key, value in fields.items())


def record_workload(*, facts: WorkloadFacts, job_id: int) -> bool:
    """`record_workload_events` for one event of a Workload of portal job `job_id`, in a transaction of its own
    (none when called in one): True when the job's state or reason changed."""
    with transaction.atomic(savepoint=False):
        return job_id in record_workload_events(events=[("MODIFIED", facts)], owners={facts.uid: job_id})


def record_workload_events(*, events: list[tuple[str, WorkloadFacts]], owners: dict[str, int]) -> set[int]:
    """A batch of Workload events, in the order the watch gave them, within the caller's transaction (`owners`: uid ->
    portal job id of the portal's Workloads; others are ignored). The ids of the jobs whose state or reason changed.

    Kueue rewrites a Workload's status many times over its life for what the portal does not keep (PodsReady,
    timestamps of unchanged conditions): when every kept field of an event is as stored, nothing is written and its
    job is not settled again. The rows and the settling commit together, so a failure in between leaves the rows as
    they were and the events read again settle the jobs.

    The batch's stored rows are read once and its jobs locked first (`lock_jobs`). The jobs are then settled
    together — one `settle_jobs` for the batch, not one per event (issue 30: settling each event was a quarter of
    the sync's CPU during a burst) — except that a job whose Workloads change again within the batch is settled
    before that next change is written: each step of its timeline (admitted, evicted, admitted again) is still
    recorded as its own."""
    stored = stored_workloads(uids=[facts.uid for _kind, facts in events])
    gone = {stored[facts.uid]["job_id"] for kind, facts in events if kind == "DELETED" and facts.uid in stored}
    lock_jobs(job_ids=set(owners.values()) | gone)
    unsettled: set[int] = set()
    changed: set[int] = set()

    def settle_unsettled() -> None:
        if unsettled:
            changed.update(settle_jobs(job_ids=unsettled))
            unsettled.clear()

    for kind, facts in events:
        if kind == "DELETED":
            row = stored.pop(facts.uid, None)
            if row is None:
                continue
            if row["job_id"] in unsettled:
                settle_unsettled()
            Workload.objects.filter(uid=facts.uid).delete()
            unsettled.add(row["job_id"])
        elif facts.uid in owners:
            job_id = owners[facts.uid]
            fields = _workload_fields(facts, job_id)
            before = stored.get(facts.uid)
            if _as_stored(before, fields):
                continue
            if job_id in unsettled or (before is not None and before["job_id"] in unsettled):
                settle_unsettled()
            _upsert_workload(facts.uid, fields)
            stored[facts.uid] = fields
            unsettled.add(job_id)
    settle_unsettled()
    return changed


def record_workloads(*, workloads: list[tuple[int, WorkloadFacts]]) -> None:
    """After a full list of Kueue's Workloads (`workloads`: (portal job id, facts) of the portal's ones): rows of
    Workloads that are gone are deleted, the listed ones upserted (written only when changed), and every job
    whose Workloads changed is settled."""
    listed = {facts.uid: (job_id, facts) for job_id, facts in workloads}
    stored = {row["uid"]: row for row in Workload.objects.values("uid", *WORKLOAD_FIELDS)}
    touched: set[int] = set()
    for uid, row in stored.items():
        if uid not in listed:
            touched.add(row["job_id"])
    Workload.objects.filter(uid__in=[uid for uid in stored if uid not in listed]).delete()
    for uid, (job_id, facts) in listed.items():
        fields = _workload_fields(facts, job_id)
        before = stored.get(uid)
        if _as_stored(before, fields):
            continue
        _upsert_workload(uid, fields)
        touched.add(job_id)
    settle_jobs(job_ids=touched)


def _eviction_message(workload: Workload, job: Job) -> Words:
    """Why an admitted job went back to the queue, and for whom, in plain words."""
    preemptor = None
    if workload.evicted_reason == "Preempted":
        match = PREEMPTOR_UID.search(workload.evicted_message)
        if match:
            preemptor = (
                Workload.objects.filter(uid=match.group(1))
                .select_related("job__team")
                .values_list("job_id", "job__team_id", "job__team__name")
            ).first()
    return Words(
        "reasons.eviction_reason",
        {
            "reason": workload.evicted_reason,
            "message": workload.evicted_message,
            "preemptor_job_id": preemptor[0] if preemptor else None,
            "preemptor_same_team": bool(preemptor) and preemptor[1] == job.team_id,
            "preemptor_team": preemptor[2] if preemptor else "",
        },
    )


# A live pod's columns the state is read from, in this order.
POD_COLUMNS = ("phase", "scheduled", "node_name", "pending_reason", "bound_at", "created_at")


def _live_pods(job_ids: list[int]) -> dict[int, list[tuple]]:
    """The Pending and Running pods of `job_ids` that are not being deleted, newest first, by job (`POD_COLUMNS`). A
    stopping pod (preempted, in its grace period) is not the job's: Kueue gives its quota back at once and may admit
    the job again before it has stopped (docs/kueue.md); the job then waits for its new pod, and a gang's stopping pods
    do not count among those that run."""
    pods: dict[int, list[tuple]] = defaultdict(list)
    rows = (
        Pod.objects.filter(job_id__in=job_ids, phase__in=["Pending", "Running"], deleting=False)
        .order_by("job_id", "-created_at")
        .values_list("job_id", *POD_COLUMNS)
    )
    for job_id, *pod in rows:
        pods[job_id].append(tuple(pod))
    return pods


def observed_state(
    job: Job, workload: Workload, *, pods: list[tuple] | None = None, pool_names: dict[str, str] | None = None
) -> tuple[str, str, Words | str, object]:
    """(state, node, reason, since) that the job's newest Workload and its live pods imply; the reason as `Words`
    (str() words it in the active language) or "". `pods` (`POD_COLUMNS`, newest first) and `pool_names` (slug →
    name) when the caller read them already, for a batch."""
    if not workload.admitted:
        if pool_names is None:
            pool_names = dict(Pool.objects.values_list("slug", "name"))
        return (
            JobState.QUEUED,
            "",
            Words("reasons.kueue_reason", {"message": workload.message, "pool_names": pool_names}),
            None,
        )
    if pods is None:
        pods = _live_pods([job.pk]).get(job.pk, [])
    running = [pod for pod in pods if pod[0] == "Running"]
    if job.is_gang and pods and len(running) + _pods_done(job) < job.nodes:
        return gang_waiting(job, running, pods)
    if running:
        return JobState.RUNNING, running[0][2], "", running[0][4]
    placed = [pod for pod in pods if pod[1]]
    if placed:
        return (
            JobState.PENDING,
            placed[0][2],
            Words(gettext_noop("starting on %(node)s"), {"node": placed[0][2]}),
            placed[0][4],
        )
    if pods:
        return JobState.PENDING, "", Words("reasons.plain_reason", {"message": pods[0][3]}), pods[0][5]
    return JobState.ADMITTED, "", "", workload.admitted_at


def _pods_done(job: Job) -> int:
    """Pods of the job that completed (a gang's pods that finished first still count as started)."""
    return Pod.objects.filter(job=job, phase="Succeeded").count()


def gang_waiting(job: Job, running: list, pods: list) -> tuple[str, str, Words, object]:
    """An admitted multi-node job is Running only once all its pods run (a half-started gang is not): until then
    Pending, saying how many run and why the others wait (Kueue's waitForPodsReady requeues it after its timeout)."""
    waiting = [pod for pod in pods if pod[0] == "Pending"]
    said = next((pod[3] for pod in waiting if pod[3]), "")
    node = running[0][2] if running else ""
    since = waiting[0][5] if waiting else (running[0][4] if running else None)
    return (
        JobState.PENDING,
        node,
        Words("reasons.gang_reason", {"running": len(running), "nodes": job.nodes, "message": said}),
        since,
    )


def lock_jobs(*, job_ids) -> None:
    """Lock `job_ids` as `settle_jobs` does, all at once in the order of their ids: a transaction that will settle
    several jobs one at a time (a batch of Workload events, in the order the watch gave them) takes its locks here
    first, so that it and a batch of pod events, settling together, never wait for each other in a circle."""
    list(Job.objects.select_for_update(no_key=True).filter(pk__in=job_ids).order_by("pk").values_list("pk"))


def settle_job(*, job_id: int) -> bool:
    """`settle_jobs` for one job: True when something changed."""
    return bool(settle_jobs(job_ids=[job_id]))


# Within a caller's transaction (the sync's batch of events) no savepoint: a failure rolls the whole batch back and
# the watch applies it again; called alone, it is its own transaction.
@transaction.atomic(savepoint=False)
def settle_jobs(*, job_ids) -> set[int]:
    """Bring the unfinished ones of `job_ids` to the state their newest Workload and their pods imply, recording each
    step; the ids of those that changed.

    Not admitted → Queued with Kueue's reason in plain words (from Admitted/Pending/Running: evicted, with why and
    for whom); admitted → Running if a pod runs, Pending while pods wait for or start on a node, else Admitted.
    Final states come from the Job's own conditions (`observations.observe`), never from here. The pool each was
    admitted in is read with the job (its slug and name): a Workload's flavor is looked up only when it names another
    pool.

    Locks: the jobs' rows FOR NO KEY UPDATE, in the order of their ids, as `lock_jobs` takes them. Settling changes
    no key, and that lock leaves alone the KEY SHARE locks the same batch took on its jobs a moment before by writing
    rows that refer to them (its pods, their GPU time, Workloads)."""
    jobs = list(
        Job.objects.select_for_update(of=("self",), no_key=True)
        .annotate(admitted_pool_slug=F("admitted_pool__slug"), admitted_pool_name=F("admitted_pool__name"))
        .filter(pk__in=job_ids, state__in=ACTIVE_STATES)
        .order_by("pk")
    )
    if not jobs:
        return set()
    newest = {
        workload.job_id: workload
        for workload in Workload.objects.filter(job_id__in=[job.pk for job in jobs], finished=False)
        .order_by("job_id", "-created_at", "-id")
        .distinct("job_id")
    }
    admitted = [job_id for job_id, workload in newest.items() if workload.admitted]
    pods = _live_pods(admitted) if admitted else {}
    # Pools by slug, read once when a reason names them or a job was admitted in a pool it was not in before.
    pools = None
    moved = any(
        workload.admitted and workload.flavors and workload.flavors[0] != job.admitted_pool_slug
        for job in jobs
        if (workload := newest.get(job.pk)) is not None
    )
    if moved or len(admitted) < len(newest):
        pools = {slug: (pk, name) for slug, pk, name in Pool.objects.order_by().values_list("slug", "pk", "name")}
    pool_names = {slug: name for slug, (_pk, name) in pools.items()} if pools is not None else None
    changed = set()
    for job in jobs:
        workload = newest.get(job.pk)
        if workload is None:
            continue
        observed = observed_state(job, workload, pods=pods.get(job.pk, []), pool_names=pool_names)
        if _settle(job, workload, *observed, pools=pools or {}):
            changed.add(job.pk)
    return changed


def _settle(
    job: Job, workload: Workload, state: str, node_name: str, reason: Words | str, since, *, pools: dict
) -> bool:
    """Write what `observed_state` says of the locked `job`: a transition (with its event), or the fields that
    changed. True when something did. `pools`: slug -> (id, name), holding the flavor's pool when it is another
    than the one the job was admitted in."""
    fields = set()
    flavor_pool, pool_name = None, None
    if workload.admitted and workload.flavors:
        if workload.flavors[0] == job.admitted_pool_slug:
            flavor_pool, pool_name = job.admitted_pool_id, job.admitted_pool_name
        else:
            flavor_pool, pool_name = pools.get(workload.flavors[0], (None, None))
    if job.admitted_pool_id != flavor_pool:
        job.admitted_pool_id = flavor_pool
        fields.add("admitted_pool")
    if node_name and job.node_name != node_name:
        job.node_name = node_name
        fields.add("node_name")
    if job.pending_reason != str(reason):
        job.pending_reason = str(reason)
        fields.add("pending_reason")
    if state != job.state and state in TRANSITIONS[job.state]:
        # Cluster times have second precision: never record a step before the one it follows.
        at = max(since or timezone.now(), job.state_changed_at, job.created_at)
        if state == JobState.QUEUED:
            message = _eviction_message(workload, job)
            if workload.evicted_reason == "Preempted":
                job.preemptions += 1
                fields.add("preemptions")
        elif state == JobState.ADMITTED:
            message = Words(gettext_noop("admitted by Kueue in %(pool)s"), {"pool": pool_name or "?"})
        elif state == JobState.RUNNING:
            message = Words(gettext_noop("running on %(node)s"), {"node": node_name})
            if job.running_seen_at is None:
                job.running_seen_at = timezone.now()
                fields.add("running_seen_at")
        else:
            message = reason
        # Only the columns that changed: the whole row's UPDATE was a tenth of the sync's CPU in a burst (issue 30).
        _record(job, job.transition_to(state, message=message, at=at), update_fields=fields | set(TRANSITION_FIELDS))
        return True
    if fields:
        job.save(update_fields=fields)
    return bool(fields)
