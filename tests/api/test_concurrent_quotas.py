"""Two admins change the same team's quota at once through the API: the cluster's ResourceQuota always ends up
equal to what the database says, and `namespace.applied` is only true when it is (real control plane)."""

import threading
import time

import pytest
from django.db import connection
from rest_framework.test import APIClient

from cluster import client
from pools.models import Pool, Quota, TeamNamespace
from reconcile import namespaces
from tests.clusterkit import set_quota
from tests.factories import UserFactory

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def cluster_gpus(team) -> int:
    quota = client.core().read_namespaced_resource_quota("reservoir-quota", team.namespace)
    return int(quota.spec.hard["requests.nvidia.com/gpu"])


def database_gpus(team) -> int:
    return sum(Quota.objects.filter(team=team).values_list("max_gpus", flat=True))


def admin_client(username: str) -> APIClient:
    api = APIClient()
    api.force_login(UserFactory(username=username, is_platform_admin=True))
    return api


def patch_in_thread(api, quota_id, gpus, results, start=None):
    def run():
        try:
            if start is not None:
                start.wait(timeout=30)
            response = api.patch(f"/api/v1/quotas/{quota_id}/", {"max_gpus": gpus}, format="json")
            results[gpus] = (response.status_code, response.json())
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_two_admins_at_once_leave_the_cluster_equal_to_the_database(portal_cluster, cluster_team):
    pool = Pool.objects.get(slug="training")
    quota = set_quota(cluster_team, pool, 4)
    first, second = admin_client("ada-1"), admin_client("ada-2")
    for round_number in range(5):
        start, results = threading.Barrier(2), {}
        values = (10 + round_number, 20 + round_number)
        threads = [
            patch_in_thread(api, quota.pk, gpus, results, start)
            for api, gpus in zip((first, second), values, strict=True)
        ]
        for thread in threads:
            thread.join(timeout=120)
        assert {status for status, _body in results.values()} == {200}
        final = database_gpus(cluster_team)
        assert final in values
        assert cluster_gpus(cluster_team) == final
        assert TeamNamespace.objects.get(team=cluster_team).is_applied
        answer = first.get(f"/api/v1/quotas/{quota.pk}/").json()
        assert answer["max_gpus"] == final and answer["namespace"]["applied"] is True


def test_an_older_rendering_is_never_written_after_a_newer_one(portal_cluster, cluster_team, monkeypatch):
    """The worst interleaving, forced: admin A's reconcile has rendered its spec (6 GPUs) but not written it when
    admin B's change (9 GPUs) commits and B's reconcile tries to run. Whatever order the writes then take, the
    cluster must end with B's 9 and the namespace must not claim to be applied with A's 6."""
    pool = Pool.objects.get(slug="training")
    quota = set_quota(cluster_team, pool, 2)
    rendered_by_a, b_finished = threading.Event(), threading.Event()
    calls = {"count": 0}
    real_desired_spec = namespaces.desired_spec

    def desired_spec(team, **kwargs):
        spec = real_desired_spec(team, **kwargs)
        calls["count"] += 1
        if calls["count"] == 1:  # A's reconcile: hold the rendered spec until B's change is committed
            rendered_by_a.set()
            deadline = time.monotonic() + 30
            while Quota.objects.get(pk=quota.pk).max_gpus != 9 and time.monotonic() < deadline:
                time.sleep(0.05)
            b_finished.wait(timeout=3)  # B's reconcile, if nothing keeps it waiting, finishes first
        return spec

    monkeypatch.setattr(namespaces, "desired_spec", desired_spec)
    results = {}
    thread_a = patch_in_thread(admin_client("ada-a"), quota.pk, 6, results)
    assert rendered_by_a.wait(timeout=60)

    def b_then_signal():
        try:
            response = admin_client("ada-b").patch(f"/api/v1/quotas/{quota.pk}/", {"max_gpus": 9}, format="json")
            results[9] = (response.status_code, response.json())
        finally:
            b_finished.set()
            connection.close()

    thread_b = threading.Thread(target=b_then_signal)
    thread_b.start()
    thread_a.join(timeout=120)
    thread_b.join(timeout=120)

    assert results[6][0] == 200 and results[9][0] == 200
    assert database_gpus(cluster_team) == 9
    assert cluster_gpus(cluster_team) == 9
    assert TeamNamespace.objects.get(team=cluster_team).is_applied
