"""Admission by the real Kueue on the real local cluster: quotas hold under a burst, placement keeps its meaning
(strict never spills, soft spills, spill-after moves), preemption respects quotas (a higher priority preempts
within its team; no other team preempts a job inside its own team's reservation), and a gang that cannot start
whole is not admitted at all.

The portal's projection (pools.projection, reconcile.kueue) makes each team's ClusterQueue from its quota and
reservation; the sync (threads of this process) mirrors Workloads and pods into job states. The demo pool
reserved-a800 has 32 contracted GPUs of which the demo teams reserve 24: 8 are unreserved, and that is what a team
without a reservation borrows.
"""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from cluster import client
from cluster.kueue import KUEUE_GROUP, KUEUE_VERSION
from cluster.labels import GPU_RESOURCE, LOCAL_QUEUE_NAME
from cluster.manifests import PoolTarget, node_selector_term
from jobs import services
from jobs.choices import JobState, Placement, Priority
from jobs.models import Job, Workload
from jobs.reasons import kueue_reason
from jobs.specs import JobSpec
from jobs.spill import spill_due_jobs
from pools import services as pool_services
from pools.models import Pool
from portal.choices import Role
from tests.clusterkit import (
    KWOK_DELAY,
    create_job_for_kueue,
    integration_team,
    job_state,
    lend_none,
    set_quota,
    wait_for,
    wait_state,
)
from tests.factories import MembershipFactory, UserFactory

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def submit(team, pool_slug, *, gpus, runs_for="10m", name=None, user=None, **kwargs):
    spec = JobSpec(
        name=name or f"job-{gpus}g",
        image="registry.example.com/research/train:1.0",
        gpus=gpus,
        command=["python", "train.py"],
        pod_annotations={KWOK_DELAY: runs_for},
        **kwargs,
    )
    pool = Pool.objects.get(slug=pool_slug)
    return services.submit_job(team=team, pool=pool, user=user or team.researcher, spec=spec)


def workloads(namespace: str) -> list[dict]:
    api = client.custom_objects()
    return api.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads")["items"]


def admitted_gpus(items: list[dict]) -> int:
    """GPUs of the workloads Kueue holds quota for right now (reserved or admitted, and not finished: a finished
    Workload keeps its admission in its status but gives its quota back)."""
    total = 0
    for item in items:
        conditions = {c["type"]: c["status"] for c in (item.get("status") or {}).get("conditions") or []}
        if conditions.get("QuotaReserved") != "True" or conditions.get("Finished") == "True":
            continue
        for pod_set in item["spec"]["podSets"]:
            container = pod_set["template"]["spec"]["containers"][0]
            total += int(container["resources"]["requests"].get(GPU_RESOURCE, 0)) * int(pod_set["count"])
    return total


@pytest.fixture
def second_team(portal_cluster):
    """Another fresh team with its own namespace, deleted afterwards (like clusterkit's cluster_team)."""
    yield from integration_team("Other integration team")


def test_fifty_concurrent_submitters_never_get_more_than_the_quota_admitted(cluster_sync, cluster_team):
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    users = [UserFactory(username=f"{cluster_team.slug}-r{i}") for i in range(50)]
    for user in users:
        MembershipFactory(team=cluster_team, user=user, role=Role.RESEARCHER)
    barrier = threading.Barrier(len(users))
    errors: list[BaseException] = []
    peak = {"gpus": 0, "samples": 0}
    done = threading.Event()

    def sample():
        while not done.is_set():
            try:
                current = admitted_gpus(workloads(cluster_team.namespace))
            except Exception:  # noqa: BLE001 - a failed sample is skipped, the next one counts
                current = 0
            peak["gpus"] = max(peak["gpus"], current)
            peak["samples"] += 1
            time.sleep(0.1)

    def submit_one(index: int, user):
        try:
            barrier.wait(timeout=30)
            submit(cluster_team, "reserved-a800", gpus=1, runs_for="3s", name=f"burst-{index}", user=user)
        except BaseException as error:  # noqa: BLE001 - collected and asserted below
            errors.append(error)
        finally:
            connection.close()

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    threads = [threading.Thread(target=submit_one, args=(i, user)) for i, user in enumerate(users)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    try:
        wait_for(
            lambda: Job.objects.filter(team=cluster_team, state=JobState.SUCCEEDED).count() == 50,
            timeout=240,
            interval=1,
            what="all 50 jobs to run and succeed",
        )
    finally:
        done.set()
        sampler.join(timeout=10)
    assert peak["samples"] > 20
    assert 1 <= peak["gpus"] <= 8
    # Every job was queued first and admitted by Kueue, never by the portal.
    assert all(
        Job.objects.get(pk=job_id).events.filter(to_state=JobState.QUEUED).exists()
        for job_id in Job.objects.filter(team=cluster_team).values_list("pk", flat=True)
    )


def test_a_strict_job_never_gets_a_spill_flavor_and_a_soft_one_does(cluster_sync, cluster_team):
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    set_quota(cluster_team, Pool.objects.get(slug="elastic"), 8)
    filler = wait_state(submit(cluster_team, "reserved-a800", gpus=8, name="filler"), JobState.RUNNING)
    assert filler.admitted_pool.slug == "reserved-a800"

    soft = submit(cluster_team, "reserved-a800", gpus=2, name="soft", placement=Placement.SOFT)
    soft = wait_state(soft, JobState.RUNNING)
    assert soft.admitted_pool.slug == "elastic"
    assert soft.pods.get().pool.slug == "elastic"

    strict = submit(cluster_team, "reserved-a800", gpus=2, name="strict")
    wait_for(
        lambda: "Waiting for its team's quota" in Job.objects.get(pk=strict.pk).pending_reason,
        what="Kueue's reason on the strict job",
    )
    time.sleep(3)  # the elastic flavor still has room: Kueue must not take it for a strict job
    strict = Job.objects.get(pk=strict.pk)
    assert strict.state == JobState.QUEUED
    assert strict.admitted_pool is None
    assert "Reserved A800" in strict.pending_reason  # the pool's name, not the flavor's
    said = Workload.objects.get(job=strict).message
    in_words = kueue_reason(said, dict(Pool.objects.values_list("slug", "name")))
    assert "The cluster says" not in in_words and "flavor" not in in_words and in_words.endswith(".")
    assert not any("elastic" in w.flavors for w in Workload.objects.filter(job=strict))
    assert services.queue_position(strict) == 1


def test_strict_order_holds_later_jobs_back_and_best_effort_lets_them_pass(cluster_sync, cluster_team):
    from pools.teams import save_team
    from portal.choices import QueueingStrategy

    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    set_quota(cluster_team, Pool.objects.get(slug="elastic"), 8)
    wait_state(submit(cluster_team, "reserved-a800", gpus=6, name="filler"), JobState.RUNNING)
    big = submit(cluster_team, "reserved-a800", gpus=4, name="big")  # does not fit: 2 GPUs of quota left
    # Queue order is the order Kueue sees the Workloads: the Job of `big` must exist before `small` is submitted
    # (two submit tasks can otherwise reach the apiserver in either order on a busy machine).
    wait_for(lambda: Workload.objects.filter(job=big).exists(), what="the big job's Workload")
    time.sleep(1.1)  # and a later creation second: Kueue orders by creationTimestamp, which has whole seconds
    small = submit(cluster_team, "elastic", gpus=1, name="small")  # would fit, in another pool
    time.sleep(6)
    # Strict order (the default): the head of the team's queue holds back the jobs behind it, even elsewhere.
    assert job_state(small.pk) == JobState.QUEUED
    assert services.queue_position(big) == 1 and services.queue_position(small) == 2

    cluster_team.queueing_strategy = QueueingStrategy.BEST_EFFORT_FIFO
    save_team(team=cluster_team)
    wait_state(small, JobState.RUNNING)
    assert job_state(big.pk) == JobState.QUEUED


def test_a_spill_after_job_moves_after_its_minutes_without_admission(cluster_sync, cluster_team):
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    set_quota(cluster_team, Pool.objects.get(slug="elastic"), 8)
    wait_state(submit(cluster_team, "reserved-a800", gpus=8, name="filler"), JobState.RUNNING)
    job = submit(
        cluster_team, "reserved-a800", gpus=2, name="mixed", placement=Placement.SPILL_AFTER, spill_after_minutes=5
    )
    wait_for(lambda: Workload.objects.filter(job=job).exists(), what="the job's Workload")
    assert spill_due_jobs() == []  # not yet: five minutes have not passed
    Job.objects.filter(pk=job.pk).update(cluster_created_at=timezone.now() - timedelta(minutes=6))
    assert spill_due_jobs() == [job.pk]
    job = wait_state(job, JobState.RUNNING)
    assert job.spilled
    assert job.admitted_pool.slug == "elastic"
    assert job.events.filter(message__contains="moved to soft placement").exists()


def reserve(team, pool_slug: str, gpus: int):
    now = timezone.now()
    return pool_services.create_reservation(
        team=team,
        pool=Pool.objects.get(slug=pool_slug),
        gpus=gpus,
        starts_at=now - timedelta(minutes=1),
        ends_at=now + timedelta(days=30),
    )


def test_a_higher_priority_job_preempts_a_lower_one_of_the_same_team(cluster_sync, cluster_team):
    """Within a team, priority decides (Kueue preempts in the team's own ClusterQueue); another team's jobs are
    never a target (see the next test)."""
    reserve(cluster_team, "reserved-a800", 8)
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    cluster_team.allow_high_priority = True  # an admin lets its researchers use high priority
    cluster_team.save()
    low = wait_state(submit(cluster_team, "reserved-a800", gpus=8, name="low", priority=Priority.LOW), JobState.RUNNING)
    high = submit(cluster_team, "reserved-a800", gpus=8, name="high", priority=Priority.HIGH)
    wait_state(high, JobState.RUNNING, timeout=90)
    low = wait_state(low, JobState.QUEUED)
    assert low.preemptions == 1
    requeued = low.events.filter(to_state=JobState.QUEUED).last()
    assert f"Preempted for job #{high.pk} of the same team" in requeued.message


def only_current_teams_cluster_queues() -> bool:
    """No team ClusterQueue is left in the cluster but those of teams that exist now. The queue of an earlier test's
    team, deleted with it, may still be going (Kueue keeps it while its Workloads do) and lend its GPUs meanwhile."""
    from portal.models import Team

    wanted = {f"team-{slug}" for slug in Team.objects.values_list("slug", flat=True)}
    queues = client.custom_objects().list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues")["items"]
    names = {queue["metadata"]["name"] for queue in queues}
    return {name for name in names if name.startswith("team-")} <= wanted


def test_another_team_never_preempts_a_job_inside_its_own_reservation(cluster_sync, cluster_team, second_team):
    pool = Pool.objects.get(slug="reserved-a800")
    lend_none(pool)  # the intruder could otherwise borrow the demo teams' idle GPUs, and would not need to preempt
    wait_for(only_current_teams_cluster_queues, timeout=90, what="earlier tests' team ClusterQueues to be gone")
    reserve(cluster_team, "reserved-a800", 8)
    set_quota(cluster_team, pool, 8)
    set_quota(second_team, pool, 8)
    second_team.allow_high_priority = True
    second_team.save()
    owner = wait_state(
        submit(cluster_team, "reserved-a800", gpus=8, name="owner", priority=Priority.LOW), JobState.RUNNING
    )
    intruder = submit(second_team, "reserved-a800", gpus=8, name="intruder", priority=Priority.HIGH)
    wait_for(lambda: Workload.objects.filter(job=intruder).exists(), what="the intruder's Workload")
    time.sleep(8)  # Kueue has had several scheduling cycles to try a preemption
    owner = Job.objects.get(pk=owner.pk)
    assert owner.state == JobState.RUNNING
    assert owner.preemptions == 0
    intruder = Job.objects.get(pk=intruder.pk)
    assert intruder.state == JobState.QUEUED
    assert intruder.pending_reason


def test_a_gang_whose_team_has_quota_for_two_of_three_pods_is_not_admitted_at_all(cluster_sync, cluster_team):
    pool = Pool.objects.get(slug="reserved-a800")
    set_quota(cluster_team, pool, 2)
    wait_for(lambda: _local_queue_exists(cluster_team.namespace), what="the team's LocalQueue")
    selector = node_selector_term(PoolTarget(slug=pool.slug, node_selector=pool.node_selector))
    container = {
        "name": "main",
        "image": "registry.example.com/research/train:1.0",
        "resources": {"requests": {GPU_RESOURCE: "1", "cpu": "1", "memory": "1Gi"}, "limits": {GPU_RESOURCE: "1"}},
    }
    gang = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "gang-of-three", "labels": {"kueue.x-k8s.io/queue-name": LOCAL_QUEUE_NAME}},
        "spec": {
            "suspend": True,
            "parallelism": 3,
            "completions": 3,
            "completionMode": "Indexed",
            "template": {
                "metadata": {"annotations": {KWOK_DELAY: "10m"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [container],
                    "tolerations": [{"key": "workload", "operator": "Equal", "value": "reserved"}],
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [selector]}
                        }
                    },
                },
            },
        },
    }
    create_job_for_kueue(cluster_team.namespace, gang)

    def waiting_message():
        for item in workloads(cluster_team.namespace):
            for condition in (item.get("status") or {}).get("conditions") or []:
                if condition["type"] == "QuotaReserved" and condition["status"] == "False":
                    return condition.get("message", "")
        return ""

    message = wait_for(waiting_message, what="Kueue's verdict on the gang")
    assert "maximum capacity (2)" in message
    assert kueue_reason(message, {"reserved-a800": "Reserved A800"}) == (
        "It needs 3 GPUs in Reserved A800, more than the team may ever use there (2)."
    )
    time.sleep(5)
    assert admitted_gpus(workloads(cluster_team.namespace)) == 0
    pods = client.core().list_namespaced_pod(cluster_team.namespace, label_selector="job-name=gang-of-three")
    assert pods.items == []
    assert client.batch().read_namespaced_job("gang-of-three", cluster_team.namespace).spec.suspend is True


def _local_queue_exists(namespace: str) -> bool:
    api = client.custom_objects()
    try:
        api.get_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace, "localqueues", LOCAL_QUEUE_NAME)
    except Exception:  # noqa: BLE001 - not there yet
        return False
    return True
