"""Helpers for tests that run the portal against the real local cluster: the portal pointed at it, a sync
running in threads of the test process, a team with its namespace cleaned up afterwards, bounded waits."""

import io
import threading
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection

from cluster import client, kueue_objects
from cluster.kueue import cluster_queue_name
from cluster.labels import LABEL_JOB_ID, USAGE_FINALIZER
from jobs.models import Job
from pools import services as pool_services
from portal.choices import Role
from portal.models import Team
from reconcile.management.commands.sync_cluster import build_watches
from reconcile.sync import ClusterSync
from tests.factories import MembershipFactory, UserFactory

KWOK_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"


def wait_for(predicate, *, timeout: float = 40.0, interval: float = 0.2, what: str = "condition"):
    """Poll `predicate` until it returns something truthy; fail the test with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def create_job_for_kueue(namespace: str, manifest: dict):
    """Create a Job that names a LocalQueue, as kubectl would, and return it once Kueue has made its Workload. Kueue
    v0.17.0 drops for good a Job whose namespace its cache has not seen yet, and a test's namespace is often a moment
    old: the Job is touched while it has no Workload, as the portal's submit task does (reconcile/jobs.py, "Jobs
    Kueue skipped")."""
    from reconcile.jobs import wait_until_kueue_takes

    job = client.batch().create_namespaced_job(namespace, manifest)
    name = job.metadata.name
    assert wait_until_kueue_takes(namespace, name, wait=60), f"Kueue made no Workload for the Job {namespace}/{name}"
    return job


def job_state(job_id: int) -> str:
    return Job.objects.get(pk=job_id).state


def wait_state(job, state, *, timeout: float = 90.0) -> Job:
    """Wait until the portal says `job` is in `state`; on a timeout, fail with why it is not (`diagnose`)."""
    try:
        wait_for(lambda: job_state(job.pk) == state, timeout=timeout, what=f"job #{job.pk} to be {state}")
    except AssertionError as error:
        raise AssertionError(f"{error}\n{diagnose(job.pk)}") from None
    return Job.objects.get(pk=job.pk)


def diagnose(job_id: int) -> str:
    """What the portal and the cluster say of a job that did not reach the state a test waited for: its portal
    events, its Workloads' conditions (from the cluster), its pods with their scheduling events, its team's
    ClusterQueue, and what earlier tests may have left in the way (ClusterQueues being deleted, namespaces
    terminating, GPU pods in other namespaces)."""
    lines = []
    try:
        job = Job.objects.get(pk=job_id)
    except Job.DoesNotExist:
        return f"job #{job_id} is not in the database"
    lines.append(
        f"job #{job.pk} {job.name!r}: {job.state}; pending reason {job.pending_reason!r}; last error {job.last_error!r}"
    )
    lines += [
        f"  event {e.at:%H:%M:%S.%f} {e.from_state or '-'} -> {e.to_state or '-'}: {e.message}"
        for e in job.events.all()
    ]
    namespace = job.team.namespace
    try:
        selector = f"{LABEL_JOB_ID}={job.pk}"
        for workload in client.custom_objects().list_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", namespace, "workloads"
        )["items"]:
            owners = [o.get("name") for o in workload["metadata"].get("ownerReferences") or []]
            if job.job_name not in owners:
                continue
            lines.append(
                f"  workload {workload['metadata']['name']} (deleting: "
                f"{bool(workload['metadata'].get('deletionTimestamp'))})"
            )
            lines += [
                f"    {c['type']}={c['status']} {c.get('reason', '')}: {c.get('message', '')}"
                for c in workload.get("status", {}).get("conditions", [])
            ]
        core = client.core()
        for pod in core.list_namespaced_pod(namespace, label_selector=selector).items:
            lines.append(f"  pod {pod.metadata.name}: {pod.status.phase} on {pod.spec.node_name}")
            events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod.metadata.name}")
            lines += [f"    {e.reason}: {e.message}" for e in events.items]
        queue = kueue_objects.read_kueue_object("ClusterQueue", cluster_queue_name(job.team.slug))
        if queue is not None:
            lines.append(f"  team ClusterQueue status: {queue.get('status', {})}")
        for obj in kueue_objects.list_kueue_objects("ClusterQueue"):
            if obj["metadata"].get("deletionTimestamp"):
                lines.append(
                    f"  left in the way: ClusterQueue {obj['metadata']['name']} deleting since "
                    f"{obj['metadata']['deletionTimestamp']}, status {obj.get('status', {})}"
                )
        for ns in core.list_namespace().items:
            if ns.status.phase == "Terminating":
                lines.append(
                    f"  left in the way: namespace {ns.metadata.name} terminating: "
                    f"{[c.message for c in ns.status.conditions or [] if c.status == 'True']}"
                )
        for pod in core.list_pod_for_all_namespaces().items:
            if pod.metadata.namespace != namespace and pod.spec.node_name and _gpus(pod):
                lines.append(
                    f"  GPUs held elsewhere: {pod.metadata.namespace}/{pod.metadata.name} "
                    f"{_gpus(pod)} on {pod.spec.node_name} ({pod.status.phase}, deleting: "
                    f"{pod.metadata.deletion_timestamp is not None})"
                )
    except Exception as error:  # noqa: BLE001 - a diagnosis never hides the failure it explains
        lines.append(f"  (the cluster could not be read: {error})")
    kueue_log = Path(settings.KUBECONFIG).parent / "logs" / "kueue.log"
    if kueue_log.is_file():
        said = [line for line in kueue_log.read_text(errors="replace").splitlines() if namespace in line]
        lines.append(f"  Kueue's log on {namespace} ({len(said)} lines, the last 15):")
        lines += [f"    {line[:400]}" for line in said[-15:]]
    return "\n".join(lines)


def _gpus(pod) -> int:
    return sum(int((c.resources.requests or {}).get("nvidia.com/gpu", 0)) for c in pod.spec.containers)


class SyncRunner:
    """`manage.py sync_cluster` in threads of the test process, stoppable and restartable."""

    def __init__(self):
        self.stop_event = None
        self.watches = []
        self.threads = []

    def start(self, *, resume: bool = True) -> None:
        from cluster.watch import run_forever

        sync = ClusterSync()
        self.stop_event = threading.Event()
        self.watches = build_watches(sync, self.stop_event)
        versions = {w.name: sync.load_version(w.name) for w in self.watches} if resume else {}
        if not versions.get("nodes"):
            self.watches[0].relist()
            versions["nodes"] = sync.load_version("nodes")
        self.threads = run_forever(self.watches, versions=versions, on_exit=lambda: connection.close())

    def stop(self) -> None:
        for watch in self.watches:
            watch.close()
        for thread in self.threads:
            thread.join(timeout=15)
        self.threads = []


@pytest.fixture
def portal_cluster(kube_cluster, settings):
    """The portal's cluster client pointed at the test cluster, and the demo pools that match its nodes. Waits first
    until nothing an earlier test made still holds GPUs or quota (`wait_until_clean`)."""
    global _test_cluster
    _test_cluster = kube_cluster
    wait_until_clean()
    settings.KUBECONFIG = str(kube_cluster.kubeconfig_path)
    settings.KUBE_CALL_ATTEMPTS = 3
    client.reset()
    call_command("seed_demo", stdout=io.StringIO())
    yield kube_cluster
    client.reset()


# The session's cluster, for cleaning up with a client of its own: a test may point the portal's client elsewhere
# (an unreachable apiserver, say), and its namespace must still be deleted.
_test_cluster = None


def _own_apis():
    from kubernetes import client as kube

    api_client = _test_cluster.api_client()
    return api_client, kube.CoreV1Api(api_client), kube.BatchV1Api(api_client), kube.CustomObjectsApi(api_client)


def _holds_quota(workload: dict) -> bool:
    """A Workload that Kueue still counts against its ClusterQueue: quota reserved and not finished."""
    conditions = {c["type"]: c["status"] for c in (workload.get("status") or {}).get("conditions") or []}
    return conditions.get("QuotaReserved") == "True" and conditions.get("Finished") != "True"


def leftovers() -> list[str]:
    """What of earlier tests still holds GPUs or quota in the cluster: pods bound to a node that request GPUs, and
    Workloads holding quota. (Namespaces still terminating and ClusterQueues still deleting hold neither.)"""
    api_client, core, _batch, custom = _own_apis()
    try:
        found = [
            f"pod {pod.metadata.namespace}/{pod.metadata.name} ({_gpus(pod)} GPUs on {pod.spec.node_name}, "
            f"{pod.status.phase}, finalizers {pod.metadata.finalizers})"
            for pod in core.list_pod_for_all_namespaces().items
            if pod.spec.node_name and _gpus(pod)
        ]
        found += [
            f"workload {w['metadata']['namespace']}/{w['metadata']['name']} holding quota in "
            f"{(w.get('status') or {}).get('admission', {}).get('clusterQueue')}"
            for w in custom.list_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "workloads")["items"]
            if _holds_quota(w)
        ]
    finally:
        api_client.close()
    return found


def wait_until_clean(timeout: float = 90.0) -> None:
    """Every cluster test starts from a cluster where nothing of the tests before it holds GPUs or quota: wait
    for that (an earlier test's teardown normally leaves it so), and fail naming what is left after `timeout`."""
    deadline = time.monotonic() + timeout
    while found := leftovers():
        if time.monotonic() > deadline:
            raise AssertionError("an earlier test left these in the cluster:\n  " + "\n  ".join(found))
        time.sleep(0.5)


@pytest.fixture
def cluster_sync(portal_cluster):
    runner = SyncRunner()
    runner.start(resume=False)
    yield runner
    runner.stop()


def integration_team(name: str = "Integration"):
    """A fresh team with its own namespace and a researcher (`team.researcher`); yields it, then deletes its
    namespace and pods and waits until the pods are gone (so their GPUs are free for the next test)."""
    team = Team.objects.create(slug=f"it-{uuid.uuid4().hex[:6]}", name=name)
    user = UserFactory(username=f"{team.slug}-researcher")
    MembershipFactory(team=team, user=user, role=Role.RESEARCHER)
    team.researcher = user
    yield team
    delete_team_namespace(team.namespace)


def delete_team_namespace(namespace: str) -> None:
    """Delete a team namespace, with a client of the test cluster's own, and wait until nothing in it holds GPUs or
    quota: its Jobs (so Kueue lets their Workloads go), its pods (pods of portal Jobs keep the portal's usage
    finalizer until a sync records their end; without a sync running, it is taken off here) and the namespace
    itself. The namespace may finish terminating later: it holds nothing by then."""
    from kubernetes.client.exceptions import ApiException

    api_client, core, batch, custom = _own_apis()
    try:
        try:
            core.read_namespace(namespace)
        except ApiException as error:
            if error.status == 404:
                return  # never created: nothing to clean
            raise
        batch.delete_collection_namespaced_job(namespace, propagation_policy="Background")
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        core.delete_namespace(namespace, propagation_policy="Background")

        def released() -> bool:
            pods = core.list_namespaced_pod(namespace).items
            for pod in pods:
                if USAGE_FINALIZER in (pod.metadata.finalizers or []):
                    try:  # as the portal's own release does: remove only that entry
                        core.patch_namespaced_pod(
                            pod.metadata.name,
                            namespace,
                            {"metadata": {"$deleteFromPrimitiveList/finalizers": [USAGE_FINALIZER]}},
                        )
                    except ApiException as error:
                        if error.status != 404:
                            raise
            workloads = custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "workloads")
            return not pods and not any(_holds_quota(w) for w in workloads["items"])

        wait_for(released, timeout=60, what=f"pods and admitted workloads of {namespace} to be gone")
    finally:
        api_client.close()


@pytest.fixture
def cluster_team(portal_cluster):
    """A fresh team (own namespace) with a researcher; its namespace and pods are deleted afterwards."""
    yield from integration_team()


def project_now() -> None:
    """Make Kueue's objects what the portal says now (the projection's own reconcile, run here and waited for): a
    change's reconcile runs after its commit and may still be on its way when a test submits its next job."""
    from reconcile import kueue

    kueue.reconcile()


def set_quota(team, pool, gpus):
    quota = pool_services.set_quota(team=team, pool=pool, max_gpus=gpus)
    project_now()
    return quota


def lend_none(pool) -> None:
    """The pool's reservations lend nothing (the demo's lend their idle GPUs by default): what a borrower may get
    there is the pool's unreserved GPUs only, as before lending."""
    from pools.choices import Lending
    from pools.models import Reservation

    for reservation in Reservation.objects.filter(pool=pool):
        pool_services.set_lending(reservation=reservation, lending=Lending.NONE)
    project_now()
