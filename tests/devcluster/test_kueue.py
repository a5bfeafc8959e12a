"""Kueue on the local control plane is the real admission engine: it suspends a Job that names a LocalQueue,
admits it against a ClusterQueue's quota onto a ResourceFlavor of a demo pool, holds the next one back with its
own reason, lives through a restart, and its webhooks come and go with it."""

from __future__ import annotations

import base64
import json
import subprocess
import time
import urllib.request
import uuid
from typing import Any

import pytest
import yaml
from kubernetes import client

from devcluster import build, kueue, launcher, pytest_plugin, topology
from devcluster.processes import free_port

pytestmark = pytest.mark.cluster

GPU = "nvidia.com/gpu"
DELAY_ANNOTATION = "pod-complete.stage.kwok.x-k8s.io/delay"
# The demo topology's reserved pool: nodes labelled node-role=reserved, tainted workload=reserved:NoSchedule.
POOL = topology.load().pool("reserved")
WEBHOOK_API = ("admissionregistration.k8s.io", "v1")


def wait_for(condition, *, timeout: float = 60, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)


@pytest.fixture
def local_cluster(kube_cluster) -> launcher.Cluster:
    if kube_cluster.cluster is None:
        pytest.fail("this test stops and restarts Kueue of a local devcluster; KUBECONFIG points at another cluster")
    return kube_cluster.cluster


@pytest.fixture
def apis(kube_cluster):
    api_client = kube_cluster.api_client()
    yield {
        "core": client.CoreV1Api(api_client),
        "batch": client.BatchV1Api(api_client),
        "custom": client.CustomObjectsApi(api_client),
        "admission": client.AdmissionregistrationV1Api(api_client),
    }
    api_client.close()


@pytest.fixture
def gpu_queue(apis, kube_namespace):
    """A ResourceFlavor of the reserved pool, a ClusterQueue with 2 GPUs of it (for this namespace only) and a
    LocalQueue in the namespace; names are unique, the cluster-scoped objects are deleted afterwards."""
    custom = apis["custom"]
    suffix = uuid.uuid4().hex[:6]
    flavor, cluster_queue, local_queue = f"t-reserved-{suffix}", f"t-cq-{suffix}", "team-queue"
    custom.create_cluster_custom_object(
        kueue.GROUP,
        kueue.VERSION,
        "resourceflavors",
        {
            "apiVersion": f"{kueue.GROUP}/{kueue.VERSION}",
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": {
                "nodeLabels": {"node-role": POOL.labels["node-role"]},
                "tolerations": [
                    {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in POOL.taints
                ],
            },
        },
    )
    custom.create_cluster_custom_object(
        kueue.GROUP,
        kueue.VERSION,
        "clusterqueues",
        {
            "apiVersion": f"{kueue.GROUP}/{kueue.VERSION}",
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": kube_namespace}},
                "resourceGroups": [
                    {
                        "coveredResources": [GPU, "cpu", "memory"],
                        "flavors": [
                            {
                                "name": flavor,
                                "resources": [
                                    {"name": GPU, "nominalQuota": 2},
                                    {"name": "cpu", "nominalQuota": 64},
                                    {"name": "memory", "nominalQuota": "512Gi"},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    )
    custom.create_namespaced_custom_object(
        kueue.GROUP,
        kueue.VERSION,
        kube_namespace,
        "localqueues",
        {
            "apiVersion": f"{kueue.GROUP}/{kueue.VERSION}",
            "kind": "LocalQueue",
            "metadata": {"name": local_queue},
            "spec": {"clusterQueue": cluster_queue},
        },
    )

    def active():
        found = custom.get_cluster_custom_object(kueue.GROUP, kueue.VERSION, "clusterqueues", cluster_queue)
        conditions = found.get("status", {}).get("conditions") or []
        return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)

    wait_for(active, what=f"ClusterQueue {cluster_queue} Active")
    yield {"flavor": flavor, "cluster_queue": cluster_queue, "local_queue": local_queue}
    # Kueue's finalizers let them go once the namespace's workloads are gone.
    for plural, name in (("clusterqueues", cluster_queue), ("resourceflavors", flavor)):
        try:
            custom.delete_cluster_custom_object(kueue.GROUP, kueue.VERSION, plural, name)
        except client.ApiException as error:
            if error.status != 404:
                raise


def gpu_job(name: str, *, gpus: int, queue: str | None) -> dict[str, Any]:
    """A Job with no placement of its own: Kueue adds the flavor's node labels and tolerations on admission."""
    labels = {kueue.QUEUE_LABEL: queue} if queue else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {DELAY_ANNOTATION: "10m"}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.invalid/reservoir/train:1",
                            "resources": {"limits": {GPU: str(gpus), "cpu": "1", "memory": "1Gi"}},
                        }
                    ],
                },
            },
        },
    }


def workload_of(apis, namespace: str, job: client.V1Job) -> dict[str, Any] | None:
    listed = apis["custom"].list_namespaced_custom_object(kueue.GROUP, kueue.VERSION, namespace, "workloads")
    for workload in listed["items"]:
        if any(owner["uid"] == job.metadata.uid for owner in workload["metadata"].get("ownerReferences") or []):
            return workload
    return None


def condition(workload: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    if workload is None:
        return None
    return next((c for c in workload.get("status", {}).get("conditions") or [] if c["type"] == kind), None)


def wait_admitted(apis, namespace: str, job: client.V1Job) -> dict[str, Any]:
    def admitted():
        workload = workload_of(apis, namespace, job)
        if workload is None:
            # Kueue v0.17.0 drops for good a Job whose namespace its cache has not seen yet (a fresh test namespace):
            # any change to the Job makes it look again, as the portal's submit task does (reconcile/jobs.py).
            nudge = {"metadata": {"annotations": {"reservoir.dev/nudged-at": str(time.time())}}}
            apis["batch"].patch_namespaced_job(job.metadata.name, namespace, nudge)
        found = condition(workload, "Admitted")
        return workload if found and found["status"] == "True" else None

    return wait_for(admitted, what=f"the Workload of Job {job.metadata.name} Admitted")


def webhook_configurations(apis) -> dict[str, client.V1ObjectMeta]:
    """The metadata of Kueue's two webhook configurations that exist, by name."""
    admission = apis["admission"]
    found = {}
    for read, (_, name) in zip(
        (admission.read_mutating_webhook_configuration, admission.read_validating_webhook_configuration),
        kueue.WEBHOOK_CONFIGURATIONS.values(),
        strict=True,
    ):
        try:
            found[name] = read(name)
        except client.ApiException as error:
            if error.status != 404:
                raise
    return found


def test_kueue_is_healthy_after_up_with_its_webhooks_and_configuration(local_cluster, apis):
    status = {component.name: component for component in local_cluster.status().components}
    component = status[kueue.NAME]
    assert component.running and component.healthy, component.detail
    settings = local_cluster.kueue.settings()
    assert component.port == settings["webhook_port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{settings['health_port']}/readyz", timeout=5) as answer:
        assert answer.read().decode().strip() == "ok"

    registered = webhook_configurations(apis)
    assert set(registered) == {name for _, name in kueue.WEBHOOK_CONFIGURATIONS.values()}
    mutating = registered["kueue-mutating-webhook-configuration"]
    job_webhook = next(w for w in mutating.webhooks if w.name == "mjob.kb.io")
    assert job_webhook.client_config.url == f"https://127.0.0.1:{component.port}/mutate-batch-v1-job"
    assert base64.b64decode(job_webhook.client_config.ca_bundle) == local_cluster.pki.ca_cert.read_bytes()
    assert job_webhook.failure_policy == "Fail"
    groups = {
        group for config in registered.values() for w in config.webhooks for r in w.rules for group in r.api_groups
    }
    assert groups == {"batch", kueue.GROUP}

    config = yaml.safe_load(local_cluster.kueue.config_path.read_text())
    assert config["waitForPodsReady"]["timeout"] == "5m"
    assert config["waitForPodsReady"]["blockAdmission"] is False
    assert config["manageJobsWithoutQueueName"] is False
    assert config["integrations"]["frameworks"] == ["batch/job"]
    extensions = client.ApiextensionsV1Api(apis["core"].api_client)
    for name in kueue.REQUIRED_CRDS:
        crd = extensions.read_custom_resource_definition(name)
        assert any(c.type == "Established" and c.status == "True" for c in crd.status.conditions)


def test_a_queued_job_is_admitted_onto_its_pools_flavor_and_the_next_waits_for_quota(apis, kube_namespace, gpu_queue):
    batch, core = apis["batch"], apis["core"]

    first = batch.create_namespaced_job(kube_namespace, gpu_job("first", gpus=2, queue=gpu_queue["local_queue"]))
    assert first.spec.suspend is True  # suspended by Kueue's webhook at creation
    workload = wait_admitted(apis, kube_namespace, first)
    assert condition(workload, "QuotaReserved")["status"] == "True"
    assignment = workload["status"]["admission"]["podSetAssignments"][0]
    assert assignment["flavors"][GPU] == gpu_queue["flavor"]
    assert workload["status"]["admission"]["clusterQueue"] == gpu_queue["cluster_queue"]

    def scheduled():
        pods = core.list_namespaced_pod(kube_namespace, label_selector="job-name=first").items
        return pods[0] if len(pods) == 1 and pods[0].spec.node_name else None

    pod = wait_for(scheduled, what="the admitted Job's pod scheduled")
    assert pod.spec.node_name in POOL.node_names
    assert pod.spec.node_selector == {"node-role": "reserved"}
    # waitForPodsReady is on: Kueue saw all pods of the admitted Job ready.
    wait_for(
        lambda: (
            (found := condition(workload_of(apis, kube_namespace, first), "PodsReady")) and found["status"] == "True"
        ),
        what="the Workload's PodsReady condition",
    )

    second = batch.create_namespaced_job(kube_namespace, gpu_job("second", gpus=2, queue=gpu_queue["local_queue"]))

    def held_back():
        found = condition(workload_of(apis, kube_namespace, second), "QuotaReserved")
        return found if found and found["status"] == "False" else None

    reserved = wait_for(held_back, what="the second Workload to be refused quota")
    assert f"insufficient unused quota for {GPU} in flavor {gpu_queue['flavor']}, 2 more needed" in reserved["message"]
    assert condition(workload_of(apis, kube_namespace, second), "Admitted") is None
    assert batch.read_namespaced_job(second.metadata.name, kube_namespace).spec.suspend is True
    assert core.list_namespaced_pod(kube_namespace, label_selector="job-name=second").items == []


def test_a_job_without_the_queue_label_is_left_alone(apis, kube_namespace):
    job = apis["batch"].create_namespaced_job(kube_namespace, gpu_job("unqueued", gpus=1, queue=None))
    assert not job.spec.suspend
    wait_for(
        lambda: apis["core"].list_namespaced_pod(kube_namespace, label_selector="job-name=unqueued").items,
        what="the unqueued Job's pod",
    )
    assert workload_of(apis, kube_namespace, job) is None


def test_after_a_kueue_restart_jobs_are_admitted_again(local_cluster, apis, kube_namespace, gpu_queue):
    before = {name: meta.metadata.uid for name, meta in webhook_configurations(apis).items()}
    old_pid = local_cluster.kueue.record().pid

    local_cluster.restart_component(kueue.NAME)

    record = local_cluster.kueue.record()
    assert record.pid != old_pid
    component = next(c for c in local_cluster.status().components if c.name == kueue.NAME)
    assert component.healthy, component.detail
    # The webhooks stayed registered through the restart (never deleted and re-created).
    assert {name: meta.metadata.uid for name, meta in webhook_configurations(apis).items()} == before

    job = apis["batch"].create_namespaced_job(kube_namespace, gpu_job("after", gpus=1, queue=gpu_queue["local_queue"]))
    assert job.spec.suspend is True
    wait_admitted(apis, kube_namespace, job)


def test_up_starts_kueue_on_a_running_control_plane_without_it(local_cluster, apis, kube_namespace):
    apiserver_pid = next(r.pid for r in local_cluster.records() if r.name == "kube-apiserver")

    local_cluster.stop_kueue()  # leaves what a cluster started before Kueue was added looks like

    assert webhook_configurations(apis) == {}
    assert local_cluster.kueue.record() is None
    status = local_cluster.status()
    assert not status.healthy
    assert next(c for c in status.components if c.name == kueue.NAME).detail == "not started"
    # Without Kueue's webhooks, Job creates are not blocked.
    apis["batch"].create_namespaced_job(kube_namespace, gpu_job("meanwhile", gpus=1, queue=None))

    assert local_cluster.up() is False  # the control plane was already running

    assert next(r.pid for r in local_cluster.records() if r.name == "kube-apiserver") == apiserver_pid
    assert local_cluster.status().healthy
    assert set(webhook_configurations(apis)) == {name for _, name in kueue.WEBHOOK_CONFIGURATIONS.values()}


def test_the_session_fixture_refuses_a_kubeconfig_cluster_without_kueues_api(kube_cluster, monkeypatch):
    path = str(kube_cluster.kubeconfig_path)
    assert pytest_plugin._kueue_problem_at(path) is None
    monkeypatch.setattr(kueue, "REQUIRED_CRDS", (*kueue.REQUIRED_CRDS, "nosuchqueues.kueue.x-k8s.io"))
    monkeypatch.setenv("KUBECONFIG", path)
    with pytest.raises(RuntimeError, match=r"Kueue is not usable .*nosuchqueues\.kueue\.x-k8s\.io: HTTP 404"):
        pytest_plugin._start_cluster()


def _etcd_count(port: int, prefix: str) -> int:
    """Keys under ``prefix`` in the etcd on ``port`` (etcd's JSON gateway)."""
    encode = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v3/kv/range",
        data=json.dumps({"key": encode(prefix), "range_end": encode(end), "count_only": True}).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return int(json.loads(answer.read()).get("count", 0))


def test_down_deletes_the_webhooks_before_it_stops_kueue(tmp_path):
    """On a cluster of its own: the webhook configurations are gone from etcd after `down`, and they were deleted
    before Kueue was stopped."""
    messages: list[str] = []
    cluster = launcher.Cluster(tmp_path / "state", progress=messages.append)
    small = topology.Topology(pools=(topology.load().pool("elastic"),), source="one elastic node")
    prefixes = [f"/registry/{resource}/{name}" for resource, name in kueue.WEBHOOK_CONFIGURATIONS.values()]
    try:
        cluster.up(small)
        etcd_port = next(r.port for r in cluster.records() if r.name == "etcd")
        assert [_etcd_count(etcd_port, prefix) for prefix in prefixes] == [1, 1]
        messages.clear()
    finally:
        stopped = cluster.down()
    assert kueue.NAME in stopped
    deleted = next(i for i, m in enumerate(messages) if m.startswith("deleted kueue-mutating-webhook-configuration"))
    stopped_kueue = next(i for i, m in enumerate(messages) if m.startswith("stopped kueue "))
    assert deleted < stopped_kueue

    # What down left in etcd's data directory, read by an etcd started alone on it.
    port, peer = free_port(), free_port()
    etcd = subprocess.Popen(
        [
            str(build.binary("etcd")),
            "--name=devcluster",
            f"--data-dir={cluster.state_dir / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{port}",
            f"--advertise-client-urls=http://127.0.0.1:{port}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            "--log-level=error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def answers():
            try:
                return [_etcd_count(port, prefix) for prefix in prefixes]
            except OSError:
                return None

        assert wait_for(answers, timeout=30, what="etcd on the stopped cluster's data") == [0, 0]
        assert _etcd_count(port, "/registry/namespaces/kueue-system") == 1  # the check can see what is there
    finally:
        etcd.terminate()
        etcd.wait(timeout=10)
