"""A pool node that carries the pool's taint key with another value (a node moved from the inference pool to the
training pool keeps `workload=inference:NoSchedule`, or the pool's taint value was changed) lacks the pool's taint: the
pool's jobs tolerate only `workload=training`, so they never schedule there. Operators were told otherwise: with
`apply_taints`, `reconcile.taints.reconcile_taints` called the node applied and cleared its `missing_taints`, while
`cluster.resources.add_node_taints` had written nothing (a node carries one taint per key and effect).

Now such a node is reported as conflicting, the missing taint naming the node's own one. No cluster: only the
Kubernetes client's answers are faked (`client.core()` / `client.api_client()`)."""

import copy

import pytest

from cluster import client, resources
from cluster.facts import NodeFacts
from pools.models import Node
from reconcile import taints
from tests.factories import NodeFactory, PoolFactory


class FakeNode:
    def __init__(self, name, taints):
        self.obj = {"metadata": {"name": name, "resourceVersion": "7"}, "spec": {"taints": taints}}


class FakeCore:
    """The apiserver's answers for one node: read_node returns it, patch_node writes its taints."""

    def __init__(self, node):
        self.node = node
        self.patches = []

    def read_node(self, name):
        return copy.deepcopy(self.node.obj)

    def patch_node(self, name, body):
        self.patches.append(body)
        self.node.obj["spec"]["taints"] = body["spec"]["taints"]
        return copy.deepcopy(self.node.obj)


class FakeApiClient:
    def sanitize_for_serialization(self, obj):
        return obj


def reconcile_one_node(monkeypatch, node_taints: list[dict]) -> tuple[dict, FakeNode, FakeCore]:
    """The training pool (taint workload=training:NoSchedule, apply_taints) and its node gpu-7 with `node_taints`."""
    pool = PoolFactory(
        slug="training",
        node_selector={"node-role": "training"},
        taints=[{"key": "workload", "value": "training", "effect": "NoSchedule"}],
        apply_taints=True,
    )
    NodeFactory(name="gpu-7", pool=pool, labels={"node-role": "training"})
    node = FakeNode("gpu-7", copy.deepcopy(node_taints))
    core = FakeCore(node)
    monkeypatch.setattr(client, "core", lambda: core)
    monkeypatch.setattr(client, "api_client", lambda: FakeApiClient())
    facts = NodeFacts(
        name="gpu-7",
        labels={"node-role": "training"},
        taints=tuple(node_taints),
        gpu_capacity=8,
        gpu_allocatable=8,
        ready=True,
        unschedulable=False,
    )
    monkeypatch.setattr(resources, "list_nodes", lambda: [facts])
    return taints.reconcile_taints(), node, core


@pytest.mark.django_db
def test_a_node_with_the_pools_taint_key_but_another_value_is_not_called_tainted(monkeypatch):
    stale = [{"key": "workload", "value": "inference", "effect": "NoSchedule"}]  # from the node's former pool
    result, node, core = reconcile_one_node(monkeypatch, stale)

    missing = Node.objects.get(name="gpu-7").missing_taints
    assert result == {"reported": [], "applied": [], "conflicting": ["gpu-7"]}, (
        f"reconcile said {result}, node taints are {node.obj['spec']['taints']}, missing_taints={missing}"
    )
    assert missing == [{"key": "workload", "value": "training", "effect": "NoSchedule", "conflicting": stale[0]}]
    assert node.obj["spec"]["taints"] == stale and not core.patches  # the portal never takes a taint off


@pytest.mark.django_db
def test_a_node_without_the_key_is_tainted_and_called_applied(monkeypatch):
    """Positive control: a node with another key only gets the pool's taint beside it, and is applied."""
    other = [{"key": "maintenance", "value": "", "effect": "NoExecute"}]
    result, node, core = reconcile_one_node(monkeypatch, other)

    assert result["applied"] == ["gpu-7"] and not result["reported"] and not result.get("conflicting")
    assert node.obj["spec"]["taints"] == [*other, {"key": "workload", "value": "training", "effect": "NoSchedule"}]
    assert Node.objects.get(name="gpu-7").missing_taints == []
