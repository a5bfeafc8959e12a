"""cluster/lease.py against the real API server: one holder at a time, a standby takes a dead holder's Lease within
lease + retry seconds (never earlier than a whole lease after the last renewal it saw), a released Lease at once,
and a holder that finds another holder stops."""

import threading
import time

import pytest
from kubernetes import client as kube

from cluster import client
from cluster.lease import LeaderLease

pytestmark = pytest.mark.cluster

LEASE, RETRY = 3, 0.5


@pytest.fixture
def lease_cluster(kube_cluster, kube_namespace, settings):
    settings.KUBECONFIG = str(kube_cluster.kubeconfig_path)
    client.reset()
    yield kube_namespace
    client.reset()


def _lease(namespace, identity):
    return LeaderLease(name="sync", namespace=namespace, identity=identity, lease_seconds=LEASE, retry_seconds=RETRY)


def _holder(namespace):
    return client.coordination().read_namespaced_lease("sync", namespace).spec.holder_identity


def test_one_holder_and_a_standby_takes_over_only_after_the_lease_runs_out(lease_cluster):
    first, second = _lease(lease_cluster, "first"), _lease(lease_cluster, "second")
    assert first.try_acquire_or_renew() is True
    assert second.try_acquire_or_renew() is False
    assert _holder(lease_cluster) == "first"
    # The holder renews; the standby keeps seeing a fresh record and never takes over.
    for _ in range(8):
        time.sleep(RETRY)
        assert first.try_acquire_or_renew() is True
        assert second.try_acquire_or_renew() is False
    # The holder dies (renews no more): the standby waits a whole lease from the last change it saw, then takes it.
    died = time.monotonic()
    stop = threading.Event()
    assert second.acquire(stop) is True
    waited = time.monotonic() - died
    assert LEASE - RETRY <= waited <= LEASE + 2 * RETRY, waited
    lease = client.coordination().read_namespaced_lease("sync", lease_cluster)
    assert lease.spec.holder_identity == "second" and lease.spec.lease_transitions == 1
    # The old holder comes back: it finds another holder and does not write.
    assert first.try_acquire_or_renew() is False
    assert first.taken_by_another()


def test_a_released_lease_is_taken_at_once(lease_cluster):
    first, second = _lease(lease_cluster, "first"), _lease(lease_cluster, "second")
    assert first.try_acquire_or_renew() is True
    assert second.try_acquire_or_renew() is False
    first.release()
    assert _holder(lease_cluster) is None
    assert second.try_acquire_or_renew() is True


def test_a_holder_that_cannot_renew_gives_up_before_the_lease_runs_out(lease_cluster, kube_cluster):
    holder = _lease(lease_cluster, "holder")
    assert holder.try_acquire_or_renew() is True
    stop = threading.Event()
    thread = holder.keep_renewing(stop)
    time.sleep(2 * RETRY)
    assert not holder.lost.is_set()
    # Another process takes the Lease by force (as an admin would): the holder sees it and stops at once. A patch
    # carries no resourceVersion, so the holder's renewals every RETRY seconds cannot make it conflict (a read and a
    # replace could: a renewal between them answers 409).
    api = kube.CoordinationV1Api(kube_cluster.api_client())
    api.patch_namespaced_lease("sync", lease_cluster, {"spec": {"holderIdentity": "usurper"}})
    assert holder.lost.wait(timeout=3 * RETRY + 2)
    assert stop.is_set()
    thread.join(timeout=5)
    assert not thread.is_alive()
