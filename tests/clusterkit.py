"""Helpers for tests that run the portal against the real local cluster: the portal pointed at it, a sync
running in threads of the test process, a team with its namespace cleaned up afterwards, bounded waits."""

import io
import threading
import time
import uuid

import pytest
from django.core.management import call_command
from django.db import connection

from cluster import client, resources
from cluster.manifests import USAGE_FINALIZER
from jobs.management.commands.sync_cluster import build_watches
from jobs.models import Job
from jobs.sync import ClusterSync
from pools import services as pool_services
from portal.choices import Role
from portal.models import Team
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


def job_state(job_id: int) -> str:
    return Job.objects.get(pk=job_id).state


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
    """The portal's cluster client pointed at the test cluster, and the demo pools that match its nodes."""
    settings.KUBECONFIG = str(kube_cluster.kubeconfig_path)
    settings.KUBE_CALL_ATTEMPTS = 3
    client.reset()
    call_command("seed_demo", stdout=io.StringIO())
    yield kube_cluster
    client.reset()


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
    """Delete a team namespace and wait until its pods are gone (so their GPUs are free for the next test). Pods of
    portal Jobs keep the portal's usage finalizer until a sync records their end; without a sync running, it is
    taken off here."""
    core = client.core()
    try:
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        core.delete_namespace(namespace, propagation_policy="Background")
    except Exception:  # noqa: BLE001 - never created: nothing to clean
        return

    def gone() -> bool:
        pods = core.list_namespaced_pod(namespace).items
        for pod in pods:
            if USAGE_FINALIZER in (pod.metadata.finalizers or []):
                resources.release_pod(namespace, pod.metadata.name)
        return not pods

    wait_for(gone, timeout=60, what=f"pods of {namespace} to be deleted")


@pytest.fixture
def cluster_team(portal_cluster):
    """A fresh team (own namespace) with a researcher; its namespace and pods are deleted afterwards."""
    yield from integration_team()


def project_now() -> None:
    """Make Kueue's objects what the portal says now (the projection's own reconcile, run here and waited for): a
    change's reconcile runs after its commit and may still be on its way when a test submits its next job."""
    from pools import kueue

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
