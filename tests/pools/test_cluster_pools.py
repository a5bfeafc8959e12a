"""Team namespaces and pool isolation against the real cluster."""

import uuid

import pytest
from kubernetes.client.exceptions import ApiException

from cluster import client, resources
from cluster.manifests import cpu_quantity
from pools.models import Node, Pool, TeamNamespace
from portal.models import AuditEntry
from reconcile import namespaces, taints
from tests.clusterkit import set_quota, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def test_quota_changes_reach_the_namespace_and_hand_edits_are_put_back(portal_cluster, cluster_team):
    # set_quota reconciles after commit (eagerly in tests): namespace, ResourceQuota and LimitRange exist.
    set_quota(cluster_team, Pool.objects.get(slug="training"), 6)
    set_quota(cluster_team, Pool.objects.get(slug="elastic"), 2)
    core = client.core()
    quota = core.read_namespaced_resource_quota("reservoir-quota", cluster_team.namespace)
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "8"
    limits = core.read_namespaced_limit_range("reservoir-limits", cluster_team.namespace)
    assert limits.spec.limits[0].max["nvidia.com/gpu"] == "8"
    state = TeamNamespace.objects.get(team=cluster_team)
    assert state.is_applied and state.applied_at is not None
    # Reconciling again changes nothing (what the server defaults is not mistaken for drift).
    assert namespaces.reconcile(cluster_team) == {
        "Namespace": "unchanged",
        "ResourceQuota": "unchanged",
        "LimitRange": "unchanged",
        "NetworkPolicy/reservoir-isolation": "unchanged",
        "NetworkPolicy/reservoir-gang-isolation": "unchanged",
    }
    # Someone raises the quota by hand with kubectl: the next reconcile puts it back and says so. A patch (no
    # resourceVersion): the quota controller writes the quota's status meanwhile, and a replace of what was read
    # before that would answer 409.
    core.patch_namespaced_resource_quota(
        "reservoir-quota", cluster_team.namespace, {"spec": {"hard": {"requests.nvidia.com/gpu": "99"}}}
    )
    assert namespaces.reconcile(cluster_team)["ResourceQuota"] == "corrected"
    quota = core.read_namespaced_resource_quota("reservoir-quota", cluster_team.namespace)
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "8"
    entry = AuditEntry.objects.get(action="namespace.resourcequota_put_back", object_id=str(cluster_team.pk))
    assert entry.before["hard"]["requests.nvidia.com/gpu"] == "99"


def test_the_namespace_quota_caps_work_submitted_around_the_portal(portal_cluster, cluster_team):
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 2)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "around-the-portal"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "3"}}}]},
    }
    with pytest.raises(ApiException) as error:
        client.core().create_namespaced_pod(cluster_team.namespace, pod)
    assert error.value.status == 403
    assert "exceeded quota" in error.value.body


def test_namespace_limits_the_portal_accepts_are_a_limit_range_the_api_server_accepts(portal_cluster, cluster_team):
    """The edges of what NamespaceLimits.clean lets through (every bound equal; each default at its max; each min at
    its default request), created as the team's LimitRange by the real API server's validation."""
    from pools import services as pool_services

    set_quota(cluster_team, Pool.objects.get(slug="training"), 2)
    cases = [
        {"container_max_cpu_millicores": 2000, "container_max_memory_mib": 8192},
        {"container_min_cpu_millicores": 1000, "container_min_memory_mib": 4096},
        {
            f"container_{part}_{unit}": value
            for part in ("min", "max", "default", "default_request")
            for unit, value in (("cpu_millicores", 3000), ("memory_mib", 6144))
        },
    ]
    for values in cases:  # each on top of the one before
        limits = pool_services.set_namespace_limits(team=cluster_team, **values)
        namespaces.reconcile(cluster_team)  # (the change's own reconcile ran after its commit: this one checks it)
        state = TeamNamespace.objects.get(team=cluster_team)
        assert state.is_applied and state.last_error == "", values
        item = client.core().read_namespaced_limit_range("reservoir-limits", cluster_team.namespace).spec.limits[0]
        wanted = (limits.container_min_cpu_millicores, limits.container_max_cpu_millicores)
        assert (item.min["cpu"], item.max["cpu"]) == tuple(cpu_quantity(millicores) for millicores in wanted), values


def test_a_namespace_the_portal_did_not_make_is_not_taken_over(portal_cluster):
    """A namespace named as a new team's would be, made by someone else: the portal does not label, cap, isolate or
    bill it; it says so on the team's namespace state, and takes it once an admin labels it as the portal's."""
    from portal.models import Team
    from tests.clusterkit import delete_team_namespace

    core = client.core()
    team = Team(slug=f"it-{uuid.uuid4().hex[:6]}", name="Foreign")
    core.create_namespace({"metadata": {"name": team.namespace, "labels": {"owner": "data-platform"}}})
    try:
        team.save()
        with pytest.raises(resources.ClusterError) as error:
            namespaces.reconcile(team)
        assert "not made by the portal" in str(error.value)
        labels = core.read_namespace(team.namespace).metadata.labels
        assert "app.kubernetes.io/managed-by" not in labels and labels["owner"] == "data-platform"
        assert client.networking().list_namespaced_network_policy(team.namespace).items == []
        assert core.list_namespaced_resource_quota(team.namespace).items == []
        state = TeamNamespace.objects.get(team=team)
        assert "not made by the portal" in state.last_error and not state.is_applied

        core.patch_namespace(team.namespace, {"metadata": {"labels": {"app.kubernetes.io/managed-by": "reservoir"}}})
        outcome = namespaces.reconcile(team)
        assert outcome["Namespace"] == "corrected" and outcome["ResourceQuota"] == "created"
        assert TeamNamespace.objects.get(team=team).is_applied
    finally:
        delete_team_namespace(team.namespace)


@pytest.fixture
def extra_nodes(portal_cluster):
    core = client.core()
    suffix = uuid.uuid4().hex[:5]
    names = {"untainted": f"iso-inference-{suffix}", "stray": f"iso-stray-{suffix}"}
    core.create_node(
        {
            "metadata": {
                "name": names["untainted"],
                "labels": {"node-role": "inference", "gpu-type": "t4", "workload-tier": "online"},
            }
        }
    )
    core.create_node({"metadata": {"name": names["stray"], "labels": {"node-role": "cpu"}}, "spec": {"taints": []}})
    yield names
    for name in names.values():
        core.delete_node(name)


def taints_not_of_kubernetes(node_name: str) -> list[tuple]:
    """A node's taints but those Kubernetes itself puts on and takes off (`node.kubernetes.io/not-ready` until KWOK
    says the new node is ready: on a loaded machine a test can read it before then)."""
    taints = client.core().read_node(node_name).spec.taints or []
    return [(t.key, t.value, t.effect) for t in taints if not t.key.startswith("node.kubernetes.io/")]


def test_nodes_missing_their_pools_taint_are_reported_then_tainted(cluster_sync, extra_nodes):
    wait_for(lambda: Node.objects.filter(name=extra_nodes["untainted"]).exists(), what="the node row")
    result = taints.reconcile_taints()
    assert extra_nodes["untainted"] in result["reported"]
    assert extra_nodes["stray"] not in result["reported"] + result["applied"]
    assert Node.objects.get(name=extra_nodes["untainted"]).missing_taints == [
        {"key": "workload", "value": "inference", "effect": "NoSchedule"}
    ]
    assert not taints_not_of_kubernetes(extra_nodes["untainted"])

    Pool.objects.filter(slug="inference").update(apply_taints=True)
    result = taints.reconcile_taints()
    assert result["applied"] == [extra_nodes["untainted"]]
    assert taints_not_of_kubernetes(extra_nodes["untainted"]) == [("workload", "inference", "NoSchedule")]
    assert not taints_not_of_kubernetes(extra_nodes["stray"])  # outside every pool: never touched
    assert Node.objects.get(name=extra_nodes["untainted"]).missing_taints == []


def test_applying_a_pools_taint_keeps_a_taint_put_on_after_the_nodes_were_listed(
    cluster_sync, extra_nodes, monkeypatch
):
    name = extra_nodes["untainted"]
    listed = [node for node in resources.list_nodes() if node.name == name]  # before the admin's taint
    maintenance = {"key": "example.com/maintenance", "value": "disk", "effect": "NoSchedule"}
    node = client.core().read_node(name)
    client.core().patch_node(name, {"spec": {"taints": [*(node.spec.taints or []), maintenance]}})
    monkeypatch.setattr(resources, "list_nodes", lambda: listed)  # the reconciler's listing is now stale
    Pool.objects.filter(slug="inference").update(apply_taints=True)

    assert taints.reconcile_taints()["applied"] == [name]
    assert sorted(taints_not_of_kubernetes(name)) == [
        ("example.com/maintenance", "disk", "NoSchedule"),
        ("workload", "inference", "NoSchedule"),
    ]
