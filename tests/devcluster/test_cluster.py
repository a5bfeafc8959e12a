"""The local control plane is a real Kubernetes: the scheduler honours affinity, taints and GPU capacity, admission
enforces ResourceQuota and LimitRange, and KWOK plays out the pod lifecycle the portal relies on."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from devcluster import topology

pytestmark = pytest.mark.cluster

DELAY_ANNOTATION = "pod-complete.stage.kwok.x-k8s.io/delay"
FAIL_LABEL = "pod-container-running-failed.stage.kwok.x-k8s.io"
GPU = "nvidia.com/gpu"


@pytest.fixture
def core(kube_cluster):
    api_client = kube_cluster.api_client()
    yield client.CoreV1Api(api_client)
    api_client.close()


@pytest.fixture
def batch(kube_cluster):
    api_client = kube_cluster.api_client()
    yield client.BatchV1Api(api_client)
    api_client.close()


def wait_for(condition: Callable[[], Any], *, timeout: float = 60, what: str) -> Any:
    """Poll ``condition`` until it returns something truthy; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)


def pool_placement(pool: str) -> dict[str, Any]:
    """Required node affinity to a seed-003 pool and the toleration of its taint."""
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "node-role", "operator": "In", "values": [pool]}]}
                    ]
                }
            }
        },
        "tolerations": [{"key": "workload", "operator": "Equal", "value": pool, "effect": "NoSchedule"}],
    }


def pod_spec(gpus: int, *, restart_policy: str = "Never", **extra: Any) -> dict[str, Any]:
    return {
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/reservoir/train:1",
                "resources": {"limits": {GPU: str(gpus), "cpu": "1", "memory": "1Gi"}},
            }
        ],
        **extra,
    }


def job_manifest(
    name: str, *, gpus: int, pool: str, parallelism: int = 1, annotations=None, labels=None
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": annotations or {}, "labels": labels or {}},
                "spec": pod_spec(gpus, **pool_placement(pool)),
            },
        },
    }


def job_pods(core: client.CoreV1Api, namespace: str, job: str) -> list[client.V1Pod]:
    return core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items


def job_condition(batch: client.BatchV1Api, namespace: str, job: str, kind: str) -> client.V1Job | None:
    found = batch.read_namespaced_job_status(job, namespace)
    conditions = found.status.conditions or []
    return found if any(c.type == kind and c.status == "True" for c in conditions) else None


def create_pod(core: client.CoreV1Api, namespace: str, name: str, spec: dict[str, Any], **metadata: Any):
    return core.create_namespaced_pod(namespace, {"metadata": {"name": name, **metadata}, "spec": spec})


def pod_phase(core: client.CoreV1Api, namespace: str, name: str) -> str:
    return core.read_namespaced_pod(name, namespace).status.phase


def test_demo_topology_has_the_seed_pools_ready(core):
    nodes = {node.metadata.name: node for node in core.list_node().items}
    demo = topology.load()
    for pool in demo.pools:
        for name in pool.node_names:
            node = nodes[name]
            assert node.status.allocatable[GPU] == "8"
            assert node.metadata.labels["nvidia.com/gpu.product"] == pool.gpu_model
            for key, value in pool.labels.items():
                assert node.metadata.labels[key] == value
            taints = {(taint.key, taint.value, taint.effect) for taint in node.spec.taints or []}
            assert {(taint.key, taint.value, taint.effect) for taint in pool.taints} <= taints
            ready = [c for c in node.status.conditions if c.type == "Ready"]
            assert ready and ready[0].status == "True"
    elastic = nodes["gpu-node-20"]
    assert {(t.key, t.value) for t in elastic.spec.taints} >= {
        ("workload", "elastic"),
        ("cloud.google.com/gke-spot", "true"),
    }
    assert nodes["reserved-a800-01"].metadata.labels["scheduling.eks.ebcloud.com/node-pool"] == "reserved"


def test_job_with_training_affinity_and_toleration_lands_only_on_training_nodes(core, batch, kube_namespace):
    batch.create_namespaced_job(
        kube_namespace,
        job_manifest("train", gpus=1, pool="training", parallelism=4, annotations={DELAY_ANNOTATION: "10m"}),
    )

    def all_running():
        pods = job_pods(core, kube_namespace, "train")
        return pods if len(pods) == 4 and all(pod.status.phase == "Running" for pod in pods) else None

    pods = wait_for(all_running, what="4 training pods Running")

    training_nodes = {node.metadata.name for node in core.list_node(label_selector="node-role=training").items}
    assert training_nodes == {"gpu-node-10", "gpu-node-11"}
    assert {pod.spec.node_name for pod in pods} <= training_nodes


def test_pod_without_toleration_stays_pending_with_the_untolerated_taint_reason(core, kube_namespace):
    create_pod(core, kube_namespace, "no-toleration", pod_spec(1))

    def unschedulable():
        pod = core.read_namespaced_pod("no-toleration", kube_namespace)
        for condition in pod.status.conditions or []:
            if condition.type == "PodScheduled" and condition.status == "False":
                return pod, condition
        return None

    pod, condition = wait_for(unschedulable, what="the scheduler to give up on the pod")
    assert pod.status.phase == "Pending"
    assert pod.spec.node_name is None
    assert condition.reason == "Unschedulable"
    # Kubernetes 1.36 words it "0/9 nodes are available: 9 node(s) had untolerated taint(s). ..."
    assert "untolerated taint" in condition.message


def test_resource_quota_of_four_gpus_rejects_a_fifth(core, kube_namespace):
    core.create_namespaced_resource_quota(
        kube_namespace,
        {"metadata": {"name": "gpu-quota"}, "spec": {"hard": {f"requests.{GPU}": "4"}}},
    )
    wait_for(
        lambda: (core.read_namespaced_resource_quota("gpu-quota", kube_namespace).status.hard or {}).get(
            f"requests.{GPU}"
        ),
        what="the quota controller to publish the quota",
    )
    for name in ("two-a", "two-b"):
        create_pod(core, kube_namespace, name, pod_spec(2, **pool_placement("training")))

    with pytest.raises(client.ApiException) as rejected:
        create_pod(core, kube_namespace, "one-more", pod_spec(1, **pool_placement("training")))

    assert rejected.value.status == 403
    assert "exceeded quota" in rejected.value.body
    assert f"requests.{GPU}=1" in rejected.value.body


def test_limit_range_of_two_gpus_per_container_rejects_three(core, kube_namespace):
    core.create_namespaced_limit_range(
        kube_namespace,
        {"metadata": {"name": "gpu-limits"}, "spec": {"limits": [{"type": "Container", "max": {GPU: "2"}}]}},
    )

    with pytest.raises(client.ApiException) as rejected:
        create_pod(core, kube_namespace, "three-gpus", pod_spec(3))
    create_pod(core, kube_namespace, "two-gpus", pod_spec(2))

    assert rejected.value.status == 403
    assert f"maximum {GPU} usage per Container is 2, but limit is 3" in rejected.value.body


def test_job_completes_after_its_annotated_duration(core, batch, kube_namespace):
    batch.create_namespaced_job(
        kube_namespace, job_manifest("demo", gpus=1, pool="training", annotations={DELAY_ANNOTATION: "6s"})
    )

    running = wait_for(
        lambda: [p for p in job_pods(core, kube_namespace, "demo") if p.status.phase == "Running"],
        what="the demo job's pod Running",
    )
    assert not job_condition(batch, kube_namespace, "demo", "Complete")
    job = wait_for(lambda: job_condition(batch, kube_namespace, "demo", "Complete"), what="the job to complete")

    pod = core.read_namespaced_pod(running[0].metadata.name, kube_namespace)
    assert pod.status.phase == "Succeeded"
    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 0
    # Timestamps have one-second resolution: 6s of "running" shows as at least 5.
    assert (terminated.finished_at - terminated.started_at).total_seconds() >= 5
    assert (job.status.completion_time - job.status.start_time).total_seconds() >= 5


def test_pod_labelled_for_failure_fails_its_job(core, batch, kube_namespace):
    batch.create_namespaced_job(
        kube_namespace, job_manifest("doomed", gpus=1, pool="training", labels={FAIL_LABEL: "true"})
    )

    wait_for(lambda: job_condition(batch, kube_namespace, "doomed", "Failed"), what="the job to fail")
    pod = job_pods(core, kube_namespace, "doomed")[0]
    assert pod.status.phase == "Failed"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 1


def test_deleted_running_pod_goes_away(core, kube_namespace):
    create_pod(core, kube_namespace, "short-lived", pod_spec(1, **pool_placement("inference")))
    wait_for(lambda: pod_phase(core, kube_namespace, "short-lived") == "Running", what="the pod Running")

    core.delete_namespaced_pod("short-lived", kube_namespace)

    def gone():
        try:
            core.read_namespaced_pod("short-lived", kube_namespace)
        except client.ApiException as error:
            return error.status == 404
        return False

    wait_for(gone, what="the deleted pod to disappear")


@pytest.fixture
def private_gpu_nodes(core, kube_namespace):
    """Three fresh 8-GPU nodes that only this test's pods tolerate, deleted afterwards."""
    key = "reservoir.dev/test-pool"
    pool = topology.Pool(
        name=kube_namespace,
        node_names=tuple(f"{kube_namespace}-{suffix}-{uuid.uuid4().hex[:4]}" for suffix in "abc"),
        gpu_model="NVIDIA-A800-SXM4-80GB",
        labels={key: kube_namespace},
        taints=(topology.Taint(key=key, value=kube_namespace, effect="NoSchedule"),),
        capacity={GPU: "8", "cpu": "96", "memory": "768Gi", "pods": "110"},
        allocatable={GPU: "8", "cpu": "96", "memory": "768Gi", "pods": "110"},
    )
    for name in pool.node_names:
        core.create_node(pool.node_manifest(name))

    def usable():
        nodes = core.list_node(label_selector=f"{key}={kube_namespace}").items
        ready = [
            node
            for node in nodes
            if any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
            and not any(t.key == "node.kubernetes.io/not-ready" for t in node.spec.taints or [])
        ]
        return len(ready) == 3

    wait_for(usable, what="the test nodes Ready and untainted")
    yield pool
    for name in pool.node_names:
        core.delete_node(name)


def test_four_gpu_pod_lands_only_where_four_gpus_are_free(core, kube_namespace, private_gpu_nodes):
    pool = private_gpu_nodes
    toleration = {"key": "reservoir.dev/test-pool", "operator": "Exists", "effect": "NoSchedule"}

    def pinned_to(node: str) -> dict[str, Any]:
        term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
        return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}

    busy = dict(zip(pool.node_names, (7, 5, 4), strict=True))  # free GPUs: 1, 3 and 4
    for node, count in busy.items():
        for index in range(count):
            spec = pod_spec(1, tolerations=[toleration], affinity={"nodeAffinity": pinned_to(node)})
            create_pod(core, kube_namespace, f"one-gpu-{node[-6:]}-{index}", spec)
    wait_for(
        lambda: sum(p.status.phase == "Running" for p in core.list_namespaced_pod(kube_namespace).items) == 16,
        what="16 one-GPU pods Running",
    )
    placed = {}
    for pod in core.list_namespaced_pod(kube_namespace).items:
        placed[pod.spec.node_name] = placed.get(pod.spec.node_name, 0) + 1
    assert placed == busy

    pool_affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "reservoir.dev/test-pool", "operator": "In", "values": [pool.name]}]}
                ]
            }
        }
    }
    create_pod(core, kube_namespace, "four-gpus", pod_spec(4, tolerations=[toleration], affinity=pool_affinity))
    create_pod(core, kube_namespace, "four-more", pod_spec(4, tolerations=[toleration], affinity=pool_affinity))

    four = wait_for(
        lambda: (pod := core.read_namespaced_pod("four-gpus", kube_namespace)).spec.node_name and pod,
        what="the 4-GPU pod to be scheduled",
    )
    assert four.spec.node_name == pool.node_names[2]

    def unschedulable():
        pod = core.read_namespaced_pod("four-more", kube_namespace)
        return next((c for c in pod.status.conditions or [] if c.type == "PodScheduled" and c.status == "False"), None)

    condition = wait_for(unschedulable, what="the second 4-GPU pod to be found unschedulable")
    assert f"Insufficient {GPU}" in condition.message
