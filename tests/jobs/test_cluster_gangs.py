"""Multi-node jobs (gangs) on the real local cluster with Kueue: N pods of G GPUs, one per node, admitted whole or
not at all, with a headless Service and the rendezvous environment; given back and requeued when they cannot all
start within Kueue's waitForPodsReady timeout; cancelled whole; metered per pod.

The demo pool reserved-a800 has four 8-GPU nodes and 32 contracted GPUs, 24 of them reserved by the demo teams.
The tests that need its whole capacity end those reservations first (`whole_reserved_pool`): the pool's unreserved
ClusterQueue then holds all 32 GPUs, and the test team borrows them. Nodes are taken either by the team's own
one-node jobs (which hold quota, so Kueue sees them) or by pods outside Kueue (which it does not see, as an inference
Deployment would not be).
"""

import time

import pytest
from django.utils import timezone
from kubernetes import client as k8s

from billing.models import UsageInterval
from cluster import client
from cluster.kueue import KUEUE_GROUP, KUEUE_VERSION
from cluster.labels import LABEL_JOB_ID
from cluster.manifests import COMPLETION_INDEX_ANNOTATION
from jobs import selectors, services
from jobs.choices import JobState
from jobs.models import Job, Pod
from jobs.specs import JobSpec
from pools.models import Pool, Reservation
from tests.clusterkit import KWOK_DELAY, job_state, set_quota, wait_for, wait_state

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

POOL = "reserved-a800"


def submit(team, *, gpus, nodes=1, runs_for="10m", name=None):
    spec = JobSpec(
        name=name or f"gang-{nodes}x{gpus}",
        image="registry.example.com/research/train:1.0",
        gpus=gpus,
        nodes=nodes,
        command=["torchrun", "train.py"],
        pod_annotations={KWOK_DELAY: runs_for},
    )
    return services.submit_job(team=team, pool=Pool.objects.get(slug=POOL), user=team.researcher, spec=spec)


def gang_pods(job):
    return client.core().list_namespaced_pod(job.team.namespace, label_selector=f"{LABEL_JOB_ID}={job.pk}").items


def workloads_of(job) -> list[dict]:
    items = client.custom_objects().list_namespaced_custom_object(
        KUEUE_GROUP, KUEUE_VERSION, job.team.namespace, "workloads"
    )["items"]
    return [item for item in items if item["metadata"]["labels"].get(LABEL_JOB_ID) == str(job.pk)] or [
        item
        for item in items
        if any(owner["name"] == job.job_name for owner in item["metadata"].get("ownerReferences") or [])
    ]


def holds_quota(workload: dict) -> bool:
    conditions = {c["type"]: c["status"] for c in (workload.get("status") or {}).get("conditions") or []}
    return conditions.get("QuotaReserved") == "True" and conditions.get("Finished") != "True"


@pytest.fixture
def whole_reserved_pool(portal_cluster, cluster_team):
    """reserved-a800 with no reservation (its 32 GPUs unreserved) and a team quota of 32 GPUs there."""
    pool = Pool.objects.get(slug=POOL)
    Reservation.objects.filter(pool=pool).delete()
    set_quota(cluster_team, pool, 32)  # reconciles Kueue's projection (Celery runs eagerly in tests)
    return pool


def outside_pods(namespace: str, count: int) -> list[str]:
    """`count` 8-GPU pods outside Kueue (no queue label) that take whole reserved nodes; returns their nodes."""
    core = client.core()
    for index in range(count):
        core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": f"outside-{index}", "annotations": {KWOK_DELAY: "30m"}},
                "spec": {
                    "nodeSelector": {"node-role": "reserved"},
                    "tolerations": [{"key": "workload", "operator": "Equal", "value": "reserved"}],
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.example.com/inference/serve:1",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        }
                    ],
                },
            },
        )
    pods = wait_for(
        lambda: (
            [p for p in core.list_namespaced_pod(namespace).items if p.status.phase == "Running"]
            if sum(p.status.phase == "Running" for p in core.list_namespaced_pod(namespace).items) == count
            else None
        ),
        what="the outside pods to run",
    )
    return [pod.spec.node_name for pod in pods]


def test_a_three_node_job_runs_one_pod_per_node_with_the_rendezvous_environment_and_is_metered_per_pod(
    cluster_sync, cluster_team, whole_reserved_pool
):
    filler = wait_state(submit(cluster_team, gpus=8, name="filler"), JobState.RUNNING)  # 3 free nodes are left
    gang = submit(cluster_team, gpus=8, nodes=3, runs_for="25s")
    gang = wait_state(gang, JobState.RUNNING)
    name, namespace = gang.job_name, cluster_team.namespace

    # Kueue admitted the whole Job as one Workload: one pod set of 3 pods of 8 GPUs.
    (workload,) = workloads_of(gang)
    (pod_set,) = workload["spec"]["podSets"]
    assert pod_set["count"] == 3
    assert pod_set["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "8"

    pods = sorted(gang_pods(gang), key=lambda pod: int(pod.metadata.annotations[COMPLETION_INDEX_ANNOTATION]))
    assert [pod.metadata.annotations[COMPLETION_INDEX_ANNOTATION] for pod in pods] == ["0", "1", "2"]
    nodes = [pod.spec.node_name for pod in pods]
    assert len(set(nodes)) == 3, nodes  # one pod per node
    assert filler.node_name not in nodes
    for index, pod in enumerate(pods):
        assert pod.spec.hostname == f"{name}-{index}" and pod.spec.subdomain == name
        env = {e.name: e for e in pod.spec.containers[0].env}
        assert env["MASTER_ADDR"].value == f"{name}-0.{name}.{namespace}.svc"
        assert env["MASTER_PORT"].value == "29500"
        assert (env["NNODES"].value, env["NPROC_PER_NODE"].value, env["WORLD_SIZE"].value) == ("3", "8", "24")
        rank = env["NODE_RANK"].value_from.field_ref.field_path
        assert rank == f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"

    # The headless Service names the pods (pod i is <job>-<i>.<job>), and belongs to the Job.
    service = client.core().read_namespaced_service(name, namespace)
    assert service.spec.cluster_ip == "None"
    job_uid = client.batch().read_namespaced_job(name, namespace).metadata.uid
    assert [(o.kind, o.uid) for o in service.metadata.owner_references] == [("Job", job_uid)]

    def endpoint_hostnames():
        slices = k8s.DiscoveryV1Api(client.api_client()).list_namespaced_endpoint_slice(
            namespace, label_selector=f"kubernetes.io/service-name={name}"
        )
        hostnames = sorted(e.hostname or "" for s in slices.items for e in (s.endpoints or []))
        return hostnames if len(hostnames) == 3 else None

    assert wait_for(endpoint_hostnames, what="the Service's endpoints") == [f"{name}-{i}" for i in range(3)]

    # The sync recorded each pod's index and node; the job page and the API show them.
    wait_for(
        lambda: sorted(Pod.objects.filter(job=gang).values_list("completion_index", flat=True)) == [0, 1, 2],
        what="the pods' indexes recorded",
    )
    assert sorted(Pod.objects.filter(job=gang).values_list("node_name", flat=True)) == sorted(nodes)
    view = selectors.pods_of(gang)
    assert (view.running, view.nodes) == (3, 3)

    # Metering: each pod's GPU time, from its own bind to its own finish, 8 GPUs on its own node.
    gang = wait_state(gang, JobState.SUCCEEDED, timeout=120)
    intervals = wait_for(
        lambda: (
            list(UsageInterval.objects.filter(job=gang, ended_at__isnull=False))
            if UsageInterval.objects.filter(job=gang, ended_at__isnull=False).count() == 3
            else None
        ),
        what="three closed usage intervals",
    )
    assert sorted(i.node_name for i in intervals) == sorted(nodes)
    assert all(i.gpus == 8 for i in intervals)
    seconds = {i.pod_uid: (i.ended_at - i.started_at).total_seconds() for i in intervals}
    assert all(20 <= each <= 60 for each in seconds.values()), seconds  # each pod ran its 25 s
    for pod in gang_pods(gang):
        interval = next(i for i in intervals if i.pod_uid == pod.metadata.uid)
        scheduled = next(c for c in pod.status.conditions if c.type == "PodScheduled")
        finished = max(s.state.terminated.finished_at for s in pod.status.container_statuses)
        assert interval.started_at == scheduled.last_transition_time
        assert interval.ended_at == finished
    assert UsageInterval.objects.filter(job=gang).count() == 3  # no fourth, no double count
    gpu_seconds = sum(8 * each for each in seconds.values())
    assert gpu_seconds == sum(8 * (i.ended_at - i.started_at).total_seconds() for i in intervals)


def test_a_gang_with_only_two_free_nodes_starts_no_pod_and_waits_with_the_reason(
    cluster_sync, cluster_team, whole_reserved_pool
):
    for index in range(2):  # two of the four nodes taken by the team's own jobs: 16 of its 32 GPUs held
        wait_state(submit(cluster_team, gpus=8, name=f"filler-{index}"), JobState.RUNNING)
    gang = submit(cluster_team, gpus=8, nodes=3)
    wait_for(lambda: Job.objects.get(pk=gang.pk).pending_reason, what="Kueue's reason for the gang")
    time.sleep(5)
    gang = Job.objects.get(pk=gang.pk)
    assert gang.state == JobState.QUEUED
    said = gang.workloads.filter(finished=False).latest("created_at").message
    assert "insufficient unused quota for nvidia.com/gpu" in said and "8 more needed" in said, said
    assert gang.pending_reason and "8" in gang.pending_reason  # Kueue's reason in plain words
    assert gang_pods(gang) == []  # none of its pods exists: all or nothing
    assert client.batch().read_namespaced_job(gang.job_name, cluster_team.namespace).spec.suspend is True
    assert not any(holds_quota(w) for w in workloads_of(gang))

    # The pending view explains it: 3 nodes with 8 free GPUs are needed, 2 have them.
    overview = selectors.pending_overview(cluster_team.researcher)
    row = next(row for row in overview.page if row.job_id == gang.pk)
    assert row.kind == "queued" and row.gpus == 24
    assert "needs 3 nodes with 8 free GPUs; 2 have" in row.hint
    # So does the API's occupancy for that shape.
    from django.test import Client

    api = Client()
    api.force_login(cluster_team.researcher)
    answer = api.get(f"/api/v1/pools/{POOL}/occupancy/", {"nodes": 3, "gpus": 8}).json()
    assert answer["gang"] == {"nodes": 3, "gpus": 8, "nodes_with_room": 2, "fits": False}
    assert answer["nodes_with_free"]["8"] == 2


@pytest.fixture
def short_pods_ready_timeout(kube_cluster):
    """Kueue restarted with a 20 s waitForPodsReady timeout for one test, then put back to its default."""
    from devcluster import kueue

    assert kube_cluster.cluster is not None, "needs the local test cluster (its Kueue is restarted)"
    kube_cluster.cluster.up(kueue_pods_ready_timeout="20s")
    yield "20s"
    kube_cluster.cluster.up(kueue_pods_ready_timeout=kueue.DEFAULT_PODS_READY_TIMEOUT)


def test_a_gang_whose_third_pod_cannot_start_in_time_gives_its_quota_back_and_is_requeued(
    short_pods_ready_timeout, cluster_sync, cluster_team, whole_reserved_pool, kube_namespace
):
    taken = outside_pods(kube_namespace, 2)  # Kueue does not see these: it admits the gang on quota
    gang = submit(cluster_team, gpus=8, nodes=3)
    gang = wait_state(gang, JobState.PENDING)
    wait_for(lambda: sum(p.status.phase == "Running" for p in gang_pods(gang)) == 2, what="two of three pods running")
    assert not {p.spec.node_name for p in gang_pods(gang) if p.spec.node_name} & set(taken)
    pending = wait_for(
        lambda: (job := Job.objects.get(pk=gang.pk)).pending_reason.startswith("2 of the job's 3 pods run") and job,
        what="the sync to see two of the three pods running",
    )
    assert pending.state == JobState.PENDING  # never Running with 2 of 3 pods
    admitted_at = timezone.now()

    # After the timeout Kueue evicts it: its pods go, its quota is free, and it waits in the queue again.
    gang = wait_state(gang, JobState.QUEUED, timeout=120)
    assert (timezone.now() - admitted_at).total_seconds() >= 15
    wait_for(lambda: not gang_pods(gang), timeout=60, what="the gang's pods deleted")
    (workload,) = workloads_of(gang)
    assert not holds_quota(workload)
    evicted = next(c for c in workload["status"]["conditions"] if c["type"] == "Evicted")
    assert evicted["reason"] == "PodsReadyTimeout"
    event = gang.events.filter(to_state=JobState.QUEUED).last()
    assert "did not all start in time" in event.message
    assert Job.objects.filter(team=cluster_team).gpus_in_use() == {}
    # Meanwhile (Kueue's requeue backoff, 60 s from the eviction) it holds nothing.
    time.sleep(10)
    assert job_state(gang.pk) == JobState.QUEUED
    assert not any(holds_quota(w) for w in workloads_of(gang))
    assert gang_pods(gang) == []


def test_cancel_stops_every_pod_of_a_gang_and_removes_its_service(cluster_sync, cluster_team):
    set_quota(cluster_team, Pool.objects.get(slug=POOL), 6)  # 3 × 2 GPUs, borrowed from the unreserved 8
    gang = wait_state(submit(cluster_team, gpus=2, nodes=3), JobState.RUNNING)
    assert len({p.spec.node_name for p in gang_pods(gang)}) == 3  # 2-GPU pods, yet one per node
    client.core().read_namespaced_service(gang.job_name, cluster_team.namespace)

    services.cancel_job(job=gang, user=cluster_team.researcher)

    def service_gone():
        try:
            client.core().read_namespaced_service(gang.job_name, cluster_team.namespace)
        except Exception as error:  # noqa: BLE001 - 404 is what we wait for
            return getattr(error, "status", None) == 404
        return False

    wait_for(service_gone, what="the Service deleted")
    wait_for(lambda: not gang_pods(gang), timeout=60, what="all pods of the gang deleted")
    assert job_state(gang.pk) == JobState.CANCELLED
    wait_for(
        lambda: UsageInterval.objects.filter(job=gang, ended_at__isnull=False).count() == 3,
        what="the three intervals closed",
    )
