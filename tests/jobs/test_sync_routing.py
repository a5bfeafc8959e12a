"""The sync's routing, fed what a watch hands over (raw objects through the watch's parser), against the real
database (no cluster here: the same paths run against the real cluster in tests/jobs/test_cluster_jobs.py and
test_cluster_sync_ownership.py).

What is checked is what billing and the job pages rely on: rows keyed by name or UID (seeing an object twice writes
nothing new), intervals counted once and never reopened, a relist settling what vanished, and a job-id label
honoured only on the job's own Job and pods.
"""

import re
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing.models import StaleDay, UsageInterval
from cluster import resources
from cluster.errors import ClusterError
from cluster.facts import JobFacts, NodeFacts, PodFacts, WorkloadFacts, job_facts, node_facts, workload_facts
from cluster.namespaces import render_resource_quota
from jobs.choices import JobState
from jobs.models import Job, Pod, SyncState, Workload
from pools.models import Node
from pools.projection import namespace_spec
from portal.models import OutboxMessage
from reconcile.sync import ClusterSync
from tests.factories import JobFactory, PoolFactory, TeamFactory

pytestmark = pytest.mark.django_db

BOUND = "2026-03-02T10:00:05Z"
FINISHED = "2026-03-02T11:00:00Z"


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def node(name: str, labels: dict, gpus: int = 8) -> NodeFacts:
    return node_facts(
        {
            "metadata": {"name": name, "labels": labels},
            "status": {
                "capacity": {"nvidia.com/gpu": str(gpus)},
                "allocatable": {"nvidia.com/gpu": str(gpus)},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )


def pod(uid, namespace, *, node_name="", phase="Running", gpus=1, job_id=None, owner=None, finished=None) -> PodFacts:
    labels = {"reservoir.io/job-id": str(job_id)} if job_id is not None else {}
    owners = [{"kind": "Job", "name": owner, "controller": True}] if owner else []
    conditions = []
    if node_name:
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": BOUND})
    else:
        conditions.append({"type": "PodScheduled", "status": "False", "message": "0/4 nodes are available"})
    status = {"phase": phase, "conditions": conditions}
    if finished:
        status["containerStatuses"] = [{"state": {"terminated": {"finishedAt": finished}}}]
    return ClusterSync.parse_pod(
        {
            "metadata": {
                "uid": uid,
                "namespace": namespace,
                "name": f"pod-{uid}",
                "creationTimestamp": "2026-03-02T10:00:00Z",
                "labels": labels,
                "ownerReferences": owners,
            },
            "spec": {"nodeName": node_name, "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": status,
        }
    )


def k8s_job(namespace, name, job_id, *, complete_at=None) -> JobFacts:
    conditions = [{"type": "Complete", "status": "True", "lastTransitionTime": complete_at}] if complete_at else []
    return job_facts(
        {
            "metadata": {"namespace": namespace, "name": name, "labels": {"reservoir.io/job-id": str(job_id)}},
            "status": {"conditions": conditions},
        }
    )


def admitted_workload(uid: str, job, pool, *, at: datetime | None = None) -> Workload:
    """The stored row of a Workload Kueue admitted in `pool`, as the sync writes it."""
    at = at or timezone.now()
    return Workload.objects.create(
        uid=uid,
        namespace=job.team.namespace,
        name=f"job-{job.job_name}-x",
        job=job,
        quota_reserved=True,
        admitted=True,
        flavors=[pool.slug],
        created_at=at,
        admitted_at=at,
    )


@pytest.fixture
def world():
    """Two teams, a pool with one node, and a running job of the first team on it."""
    pool = PoolFactory(slug="train")
    alpha, beta = TeamFactory(slug="alpha"), TeamFactory(slug="beta")
    job = JobFactory(
        team=alpha,
        pool=pool,
        state=JobState.RUNNING,
        node_name="gpu-a",
        cluster_created_at=timezone.now() - timedelta(hours=1),
    )
    # Kueue admitted it in its pool: from here on its pods decide Admitted / Pending / Running.
    admitted_workload("wl-1", job, pool, at=timezone.now() - timedelta(hours=1))
    sync = ClusterSync()
    sync.relist_nodes([node("gpu-a", dict(pool.node_selector)), node("cpu-1", {"role": "system"}, gpus=0)], "10")
    return sync, pool, alpha, beta, job


def rows(model, *fields):
    return sorted(model.objects.values_list(*fields))


def test_nodes_are_recorded_in_their_pool_and_removed_with_the_cluster(world):
    sync, pool, *_ = world
    assert rows(Node, "name", "pool_id", "gpu_capacity") == [("cpu-1", None, 0), ("gpu-a", pool.pk, 8)]
    sync.node_event("DELETED", node("cpu-1", {}))
    sync.node_event("MODIFIED", node("gpu-b", dict(pool.node_selector), gpus=4))
    assert rows(Node, "name", "gpu_capacity") == [("gpu-a", 8), ("gpu-b", 4)]
    assert sync.attribution.pool_id("gpu-b") == pool.pk
    sync.relist_nodes([node("gpu-b", dict(pool.node_selector), gpus=4)], "11")
    assert rows(Node, "name") == [("gpu-b",)]


def test_a_node_heartbeat_that_changes_nothing_kept_writes_nothing_until_the_refresh(
    world, django_assert_num_queries, monkeypatch
):
    sync, pool, *_ = world
    same = node("gpu-a", dict(pool.node_selector))
    with django_assert_num_queries(0):
        sync.node_event("MODIFIED", same)  # a heartbeat: the same facts as the relist recorded
    drained = node("gpu-a", dict(pool.node_selector), gpus=6)
    sync.node_event("MODIFIED", drained)
    assert rows(Node, "name", "gpu_allocatable") == [("cpu-1", 0), ("gpu-a", 6)]
    Node.objects.filter(name="gpu-a").update(last_seen_at=None)
    monkeypatch.setattr(ClusterSync, "NODE_SEEN_REFRESH_SECONDS", 0.0)  # the refresh period has passed
    sync.node_event("MODIFIED", node("gpu-a", dict(pool.node_selector), gpus=6))
    assert Node.objects.get(name="gpu-a").last_seen_at is not None


def test_a_pod_seen_again_and_again_is_one_row_and_one_interval(world):
    sync, pool, alpha, _beta, job = world
    running = pod("p1", alpha.namespace, node_name="gpu-a", job_id=job.pk, owner=job.job_name)
    sync.relist_pods([running], "20")
    sync.pod_event("MODIFIED", running)
    sync.relist_pods([running], "21")
    assert rows(Pod, "uid", "team_id", "pool_id", "job_id") == [("p1", alpha.pk, pool.pk, job.pk)]
    assert rows(UsageInterval, "pod_uid", "team_id", "pool_id", "job_id", "started_at", "ended_at") == [
        ("p1", alpha.pk, pool.pk, job.pk, at(BOUND), None)
    ]


def test_a_closed_interval_is_never_reopened_or_moved(world):
    sync, _pool, alpha, _beta, job = world
    running = pod("p1", alpha.namespace, node_name="gpu-a", job_id=job.pk, owner=job.job_name)
    done = pod(
        "p1",
        alpha.namespace,
        node_name="gpu-a",
        phase="Succeeded",
        job_id=job.pk,
        owner=job.job_name,
        finished=FINISHED,
    )
    sync.pod_event("ADDED", running)
    sync.pod_event("MODIFIED", done)
    sync.pod_event("MODIFIED", running)  # replayed, out of order
    sync.pod_event("DELETED", done)
    sync.relist_pods([running], "30")  # a stale list still showing it running
    assert rows(UsageInterval, "pod_uid", "ended_at") == [("p1", at(FINISHED))]


def test_a_relist_settles_pods_that_vanished_while_nobody_watched(world):
    sync, _pool, alpha, _beta, job = world
    sync.relist_pods(
        [pod("p1", alpha.namespace, node_name="gpu-a"), pod("p2", alpha.namespace, node_name="gpu-a")], "40"
    )
    StaleDay.objects.all().delete()
    before = timezone.now()
    sync.relist_pods([pod("p2", alpha.namespace, node_name="gpu-a")], "41")
    assert rows(Pod, "uid") == [("p2",)]
    gone = UsageInterval.objects.get(pod_uid="p1")
    assert gone.ended_at >= before and UsageInterval.objects.get(pod_uid="p2").ended_at is None
    assert StaleDay.objects.filter(day=gone.ended_at.date()).exists()  # the days it changed are metered again


def test_a_teams_stopping_gpu_pods_get_room_in_its_namespace_quota_until_they_have_stopped(world):
    """Kueue gives a stopped job's quota to the next job as soon as its pods are being deleted; the namespace's
    ResourceQuota counts them until they have stopped: it leaves room for their GPUs meanwhile, asked for when they
    start and when they finish stopping (on the real cluster: tests/jobs/test_cluster_preemption.py)."""
    sync, _pool, alpha, beta, job = world
    running = pod("p1", alpha.namespace, node_name="gpu-a", gpus=4, job_id=job.pk, owner=job.job_name)
    sync.relist_pods([running, pod("p2", beta.namespace, node_name="gpu-a", gpus=2)], "30")
    reconciles = OutboxMessage.objects.filter(task="pools.reconcile_team_namespace")
    asked_before = reconciles.count()

    def room() -> tuple[int, str, int]:
        spec = namespace_spec(alpha)
        hard = render_resource_quota(spec)["spec"]["hard"]["requests.nvidia.com/gpu"]
        return spec.stopping_gpus, hard, reconciles.filter(args=[alpha.pk]).count() - asked_before

    assert room() == (0, "0", 0)  # the team has no quota here: its cap is 0 GPUs
    stopping = replace(running, deleting=True)  # preempted: it checkpoints within its grace period
    sync.pod_event("MODIFIED", stopping)
    assert room() == (4, "4", 1)
    sync.pod_events([("MODIFIED", stopping), ("MODIFIED", replace(stopping, restarts=1))])  # nothing new: not asked
    assert room() == (4, "4", 1)
    sync.pod_event("MODIFIED", replace(stopping, phase="Failed", finished_at=at(FINISHED)))  # it has stopped
    assert room() == (0, "0", 2)
    # A pod deleted while it runs, seen only as gone: room while it was last seen stopping, none once it has gone.
    other = pod("p3", alpha.namespace, node_name="gpu-a", gpus=2)
    sync.pod_event("ADDED", other)
    sync.pod_event("DELETED", replace(other, deleting=True))
    assert room() == (0, "0", 4)
    assert reconciles.count() - asked_before == 4  # beta's pods never stopped: its namespace was never asked


def test_a_job_out_of_time_says_whether_it_ran_or_its_time_ran_out_before_it_started(world):
    """The Job's deadline (the maximum run time) counts from Kueue's admission, also while its pods cannot start."""
    sync, pool, alpha, _beta, ran = world
    Job.objects.filter(pk=ran.pk).update(started_at=timezone.now() - timedelta(hours=1))
    never = JobFactory(team=alpha, pool=pool, state=JobState.ADMITTED, cluster_created_at=timezone.now())
    for job in (ran, never):
        failed = k8s_job(alpha.namespace, job.job_name, job.pk)
        sync.job_event(
            "MODIFIED", replace(failed, outcome="Failed", finished_at=timezone.now(), reason="DeadlineExceeded")
        )
    said = {
        job.pk: (job.state, str(job.events.last().message)) for job in Job.objects.filter(pk__in=[ran.pk, never.pk])
    }
    assert said == {
        ran.pk: (JobState.FAILED, "stopped: it ran longer than its maximum run time"),
        never.pk: (
            JobState.FAILED,
            "stopped: its maximum run time, counted from its admission, ran out before it started",
        ),
    }


def test_a_pod_whose_node_is_in_no_pool_is_recorded_but_not_metered(world):
    sync, _pool, alpha, *_ = world
    sync.pod_event("ADDED", pod("p1", alpha.namespace, node_name="cpu-1"))
    assert rows(Pod, "uid", "pool_id") == [("p1", None)]
    assert not UsageInterval.objects.exists()


def test_pods_faking_a_job_id_are_metered_to_their_own_team_and_change_nothing(world):
    sync, pool, alpha, beta, job = world
    fakes = [
        # Another team's namespace, even naming the right Job as owner.
        pod("f1", beta.namespace, node_name="gpu-a", job_id=job.pk, owner=job.job_name),
        # The job's own namespace, but no Job controls it.
        pod("f2", alpha.namespace, phase="Pending", job_id=job.pk),
        # The job's own namespace, controlled by another Job.
        pod("f3", alpha.namespace, phase="Pending", job_id=job.pk, owner="someone-elses"),
    ]
    sync.relist_pods(fakes[:1], "50")
    for fake in fakes[1:]:
        sync.pod_event("ADDED", fake)
    assert rows(Pod, "uid", "team_id", "pool_id", "job_id") == [
        ("f1", beta.pk, pool.pk, None),
        ("f2", alpha.pk, None, None),
        ("f3", alpha.pk, None, None),
    ]
    assert rows(UsageInterval, "pod_uid", "team_id", "job_id") == [("f1", beta.pk, None)]
    job.refresh_from_db()
    assert (job.state, job.pending_reason, job.node_name) == (JobState.RUNNING, "", "gpu-a")


def test_the_jobs_own_pending_pod_moves_it(world):
    sync, pool, alpha, _beta, job = world
    sync.pod_event("MODIFIED", pod("p1", alpha.namespace, phase="Pending", job_id=job.pk, owner=job.job_name))
    job.refresh_from_db()
    assert (job.state, job.pending_reason) == (JobState.PENDING, "The cluster says: 0/4 nodes are available")
    assert rows(Pod, "uid", "pool_id", "job_id") == [("p1", pool.pk, job.pk)]  # not placed: its job's pool


def test_a_job_faking_a_job_id_neither_finishes_nor_fails_it(world):
    sync, _pool, alpha, beta, job = world
    foreign = [
        k8s_job(beta.namespace, job.job_name, job.pk, complete_at=FINISHED),  # right name, wrong namespace
        k8s_job(alpha.namespace, "lookalike", job.pk, complete_at=FINISHED),  # right namespace, wrong name
    ]
    for obj in foreign:
        sync.job_event("MODIFIED", obj)
        sync.job_event("DELETED", obj)
    sync.relist_jobs([k8s_job(alpha.namespace, job.job_name, job.pk), *foreign], "60")
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    # Its own Job finishing does finish it.
    sync.job_event("MODIFIED", k8s_job(alpha.namespace, job.job_name, job.pk, complete_at=FINISHED))
    assert Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED


def test_a_relist_fails_an_admitted_job_whose_own_job_is_gone_even_if_a_foreign_one_claims_it(world):
    sync, _pool, _alpha, beta, job = world
    sync.relist_jobs([k8s_job(beta.namespace, job.job_name, job.pk)], "70")
    job.refresh_from_db()
    assert job.state == JobState.FAILED and "outside the portal" in job.last_error


def test_an_unfinished_jobs_status_update_costs_no_query(world, django_assert_num_queries):
    sync, _pool, alpha, _beta, job = world
    with django_assert_num_queries(0):
        sync.job_event("MODIFIED", k8s_job(alpha.namespace, job.job_name, job.pk))
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING


def test_a_batch_of_pod_events_settles_its_jobs_in_its_own_transaction_without_looking_their_pool_up(world):
    """Issue 30: at 1,000 jobs starting at once the sync fell tens of seconds behind writing Running; each job it
    settled was a transaction of its own and looked its admitted pool up again."""
    sync, pool, alpha, _beta, job = world
    other = JobFactory(team=alpha, pool=pool, state=JobState.PENDING, admitted_pool=pool)
    admitted_workload("wl-other", other, pool)
    Job.objects.filter(pk=job.pk).update(admitted_pool=pool)
    events = [
        (kind, pod(uid, alpha.namespace, node_name="gpu-a", job_id=each.pk, owner=each.job_name))
        for kind, uid, each in [("MODIFIED", "p-a", job), ("ADDED", "p-b", other)]
    ]
    with CaptureQueriesContext(connection) as queries:
        sync.pod_events(events)
    sql = [q["sql"] for q in queries.captured_queries]
    # One transaction (a savepoint inside the test's own) for the pods, their GPU time and both jobs.
    assert sum(text.startswith("SAVEPOINT") for text in sql) == 1
    assert not [text for text in sql if 'FROM "pools_pool"' in text]
    assert Job.objects.get(pk=other.pk).state == JobState.RUNNING
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING


def test_a_job_admitted_in_another_pool_than_before_says_which(world):
    sync, pool, alpha, _beta, job = world
    elsewhere = PoolFactory(slug="spare", name="Spare pool")
    queued = JobFactory(team=alpha, pool=pool, state=JobState.QUEUED, admitted_pool=pool)
    admitted = replace(kueue_workload("wl-q", alpha.namespace, queued, pods_ready=False), flavors=(elsewhere.slug,))
    sync.workload_event("ADDED", admitted)
    queued.refresh_from_db()
    assert (queued.state, queued.admitted_pool_id) == (JobState.ADMITTED, elsewhere.pk)
    assert str(queued.events.latest("pk").message) == "admitted by Kueue in Spare pool"


def kueue_workload(uid: str, namespace: str, job, *, pods_ready: bool) -> WorkloadFacts:
    conditions = [
        {"type": "QuotaReserved", "status": "True", "lastTransitionTime": BOUND},
        {"type": "Admitted", "status": "True", "lastTransitionTime": BOUND},
        {"type": "PodsReady", "status": "True" if pods_ready else "False", "lastTransitionTime": BOUND},
    ]
    return workload_facts(
        {
            "metadata": {
                "uid": uid,
                "namespace": namespace,
                "name": f"job-{job.job_name}-y",
                "creationTimestamp": BOUND,
                "ownerReferences": [{"kind": "Job", "name": job.job_name}],
            },
            "spec": {"priority": 5000},
            "status": {
                "conditions": conditions,
                "admission": {
                    "clusterQueue": "team-alpha",
                    "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "train"}}],
                },
            },
        }
    )


def test_a_workload_update_that_changes_nothing_kept_writes_nothing(world):
    sync, _pool, alpha, _beta, job = world
    sync.workload_event("MODIFIED", kueue_workload("wl-2", alpha.namespace, job, pods_ready=False))
    assert Workload.objects.get(uid="wl-2").admitted
    with CaptureQueriesContext(connection) as queries:
        # Kueue sets PodsReady, which the portal does not keep.
        sync.workload_event("MODIFIED", kueue_workload("wl-2", alpha.namespace, job, pods_ready=True))
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith(("INSERT", "UPDATE", "DELETE"))]
    assert writes == []
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    # A change the portal keeps is written.
    moved = kueue_workload("wl-2", alpha.namespace, job, pods_ready=True)
    sync.workload_event("MODIFIED", replace(moved, requeue_count=1))
    assert Workload.objects.get(uid="wl-2").requeue_count == 1


def test_saving_a_watchs_version_again_is_one_query(django_assert_num_queries):
    ClusterSync.save_version("pods", "10", listed=True)
    first = SyncState.objects.get(resource="pods")
    with django_assert_num_queries(1):
        ClusterSync.save_version("pods", "11")
    again = SyncState.objects.get(resource="pods")
    assert (again.resource_version, again.listed_at) == ("11", first.listed_at)
    assert again.updated_at > first.updated_at  # the sync-lag gauge reads it
    ClusterSync.save_version("pods", "12", listed=True)
    assert SyncState.objects.get(resource="pods").listed_at > first.listed_at


def test_a_batch_of_events_is_recorded_as_each_pod_was_last_seen(world):
    sync, pool, alpha, _beta, job = world
    mine = dict(job_id=job.pk, owner=job.job_name)
    sync.pod_events(
        [
            ("ADDED", pod("p1", alpha.namespace, node_name="gpu-a", **mine)),
            ("ADDED", pod("p2", alpha.namespace, node_name="gpu-a")),
            ("MODIFIED", pod("p1", alpha.namespace, node_name="gpu-a", phase="Succeeded", finished=FINISHED, **mine)),
            ("ADDED", pod("p3", alpha.namespace, node_name="gpu-a")),
            ("DELETED", pod("p3", alpha.namespace, node_name="gpu-a", phase="Failed", finished=FINISHED)),
        ]
    )
    assert rows(Pod, "uid", "phase", "job_id") == [("p1", "Succeeded", job.pk), ("p2", "Running", None)]
    assert rows(UsageInterval, "pod_uid", "pool_id", "started_at", "ended_at") == [
        ("p1", pool.pk, at(BOUND), at(FINISHED)),
        ("p2", pool.pk, at(BOUND), None),
        ("p3", pool.pk, at(BOUND), at(FINISHED)),  # came and went within the batch: billed to its own end
    ]


def test_a_pod_that_changes_and_goes_in_one_batch_moves_its_job_before_its_row_goes(world):
    sync, _pool, alpha, _beta, job = world
    waiting = pod("p1", alpha.namespace, phase="Pending", job_id=job.pk, owner=job.job_name)
    sync.pod_events([("ADDED", waiting), ("DELETED", waiting)])
    job.refresh_from_db()
    assert (job.state, job.pending_reason) == (JobState.PENDING, "The cluster says: 0/4 nodes are available")
    assert not Pod.objects.exists()


def test_a_batch_costs_the_same_queries_whatever_its_size(world):
    sync, _pool, alpha, *_ = world

    def queries_for(count: int, first: int) -> int:
        batch = [("ADDED", pod(f"b{first + n}", alpha.namespace, node_name="gpu-a")) for n in range(count)]
        with CaptureQueriesContext(connection) as captured:
            sync.pod_events(batch)
        return len(captured)

    small, large = queries_for(5, 0), queries_for(200, 100)
    assert Pod.objects.count() == 205 and UsageInterval.objects.filter(ended_at=None).count() == 205
    assert large == small  # one transaction of bulk writes, not one per event


def test_a_batch_of_workload_events_keeps_every_step_of_the_timeline(world):
    sync, _pool, alpha, _beta, job = world
    admitted = kueue_workload("wl-1", alpha.namespace, job, pods_ready=False)
    evicted = replace(
        admitted,
        quota_reserved=False,
        admitted=False,
        flavors=[],
        evicted_reason="Preempted",
        evicted_message="Preempted to accommodate a workload (UID: wl-9) due to prioritization in the ClusterQueue",
    )
    sync.workload_events([("MODIFIED", evicted), ("MODIFIED", replace(admitted, requeue_count=1))])
    job.refresh_from_db()
    steps = list(job.events.order_by("at", "pk").values_list("from_state", "to_state"))
    # Seen in one batch, the preemption still counts and is on the timeline, before the admission that followed.
    assert steps[-2:] == [(JobState.RUNNING, JobState.QUEUED), (JobState.QUEUED, JobState.ADMITTED)]
    assert (job.state, job.preemptions) == (JobState.ADMITTED, 1)


def test_a_batch_of_workload_events_reads_their_stored_rows_once(world):
    sync, _pool, alpha, _beta, job = world
    seen = kueue_workload("wl-3", alpha.namespace, job, pods_ready=False)
    with CaptureQueriesContext(connection) as queries:
        sync.workload_events([("ADDED", seen), ("MODIFIED", seen), ("MODIFIED", replace(seen, requeue_count=2))])
    by_uid = 'FROM "jobs_workload" WHERE "jobs_workload"."uid"'
    reads = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT") and by_uid in q["sql"]]
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith('INSERT INTO "jobs_workload"')]
    assert (len(reads), len(writes)) == (1, 2)  # the unchanged second sighting writes nothing, as before
    assert Workload.objects.get(uid="wl-3").requeue_count == 2


def selects_to_settle(apply, batch: list, jobs: list, state: str) -> int:
    """The SELECTs `apply(batch)` takes; every one of `jobs` is in `state` after it."""
    with CaptureQueriesContext(connection) as captured:
        apply(batch)
    assert Job.objects.filter(pk__in=[job.pk for job in jobs], state=state).count() == len(jobs)
    return sum(q["sql"].startswith("SELECT") for q in captured.captured_queries)


def test_settling_a_batch_of_pods_jobs_reads_the_same_whatever_its_size(world):
    """Issue 30: one locking read of the jobs, one of their Workloads, one of their pods, for any number of jobs."""
    sync, pool, alpha, *_ = world

    def reads_for(count: int) -> int:
        jobs = [JobFactory(team=alpha, pool=pool, state=JobState.PENDING, admitted_pool=pool) for _n in range(count)]
        for job in jobs:
            admitted_workload(f"wl-{job.pk}", job, pool)
        batch = [
            ("ADDED", pod(f"r{job.pk}", alpha.namespace, node_name="gpu-a", job_id=job.pk, owner=job.job_name))
            for job in jobs
        ]
        return selects_to_settle(sync.pod_events, batch, jobs, JobState.RUNNING)

    assert reads_for(2) == reads_for(7)


def test_settling_a_batch_of_workload_events_reads_the_same_whatever_its_size(world):
    """Issue 30: the jobs of a batch of Workload events are settled together once their rows are written (one
    settling per event was a quarter of the sync's CPU during a burst)."""
    sync, pool, alpha, *_ = world

    def reads_for(count: int) -> int:
        jobs = [JobFactory(team=alpha, pool=pool, state=JobState.QUEUED) for _n in range(count)]
        batch = [("ADDED", kueue_workload(f"wl-n{job.pk}", alpha.namespace, job, pods_ready=False)) for job in jobs]
        return selects_to_settle(sync.workload_events, batch, jobs, JobState.ADMITTED)

    assert reads_for(2) == reads_for(7)


def test_an_ended_pod_keeps_the_finalizer_until_it_is_deleted(world, monkeypatch):
    """Issue 30: taking the finalizer off as a pod ends was one more pod write while the control plane starts the jobs
    that follow; it matters only to a deletion, so the sync releases a pod when it is deleted, after recording it."""
    sync, _pool, alpha, *_ = world
    released = []
    monkeypatch.setattr(resources, "release_pod", lambda namespace, name: released.append(name) or True)
    ended = replace(
        pod("done", alpha.namespace, node_name="gpu-a", phase="Succeeded", finished=FINISHED), held_for_usage=True
    )
    sync.pod_events([("MODIFIED", ended)])
    sync.relist_pods([ended], version="7")
    assert released == []
    assert UsageInterval.objects.get(pod_uid=ended.uid).ended_at == at(FINISHED)
    sync.pod_events([("MODIFIED", replace(ended, deleting=True))])
    assert released == ["pod-done"]


def test_deleted_pods_are_released_several_at_once_and_all_tried_when_one_fails(world, monkeypatch):
    """Issue 30: one release after the other held the pod watch for seconds when hundreds of pods went together.
    The cluster call is replaced here: what is checked is the sync's order of work (together, every one tried, the
    failure raised so that the watch applies the batch again). The real release:
    tests/cluster/test_release_pod_cluster.py."""
    sync, _pool, alpha, *_ = world
    together = threading.Barrier(ClusterSync.RELEASE_THREADS, timeout=10)
    released = []

    def release(namespace, name):
        together.wait()  # only passes when RELEASE_THREADS releases are under way at once
        released.append(name)
        if name == "pod-e2":
            raise ClusterError("the apiserver refused", status=500)
        return True

    monkeypatch.setattr(resources, "release_pod", release)
    ended = [
        ("MODIFIED", replace(pod(f"e{n}", alpha.namespace, node_name="gpu-a", phase="Succeeded", finished=FINISHED),
                             held_for_usage=True, deleting=True))
        for n in range(ClusterSync.RELEASE_THREADS * 2)
    ]  # fmt: skip
    with pytest.raises(ClusterError):
        sync.pod_events(ended)
    assert sorted(released) == sorted(f"pod-e{n}" for n in range(ClusterSync.RELEASE_THREADS * 2))


def test_a_batch_of_workload_events_locks_its_jobs_at_once_in_id_order_before_writing(world):
    """A batch of pod events locks its jobs in id order (`settle_jobs`); a batch of Workload events settles its jobs
    one event at a time, so it takes all their locks first, in the same order: the two watches' transactions never
    wait for each other in a circle (a deadlock PostgreSQL would break by failing one)."""
    sync, pool, alpha, _beta, job = world
    older = JobFactory(team=alpha, pool=pool, state=JobState.QUEUED)
    assert older.pk > job.pk
    events = [
        ("ADDED", kueue_workload("wl-late", alpha.namespace, older, pods_ready=False)),
        ("MODIFIED", kueue_workload("wl-1", alpha.namespace, job, pods_ready=False)),
    ]
    with CaptureQueriesContext(connection) as queries:
        sync.workload_events(events)
    statements = [q["sql"] for q in queries.captured_queries]
    first_lock = next(i for i, sql in enumerate(statements) if "FOR NO KEY UPDATE" in sql)
    first_write = next(i for i, sql in enumerate(statements) if sql.startswith(("INSERT", "UPDATE")))
    assert first_lock < first_write
    locked = re.search(r'"jobs_job"\."id" IN \(([\d, ]+)\) ORDER BY 1 ASC FOR NO KEY UPDATE', statements[first_lock])
    assert locked and {int(pk) for pk in locked.group(1).split(",")} == {job.pk, older.pk}
    assert Job.objects.get(pk=older.pk).state == JobState.ADMITTED
