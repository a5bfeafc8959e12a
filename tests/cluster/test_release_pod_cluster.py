"""Releasing a pod's usage finalizer on the real apiserver (`cluster.resources.release_pod`): only the portal's own
entry goes, whatever other finalizers the pod holds; a pod already gone is no error; the connection is reused."""

import pytest

from cluster import client, resources
from cluster.labels import USAGE_FINALIZER
from pools.models import Pool
from tests.clusterkit import set_quota

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

OTHER_FINALIZER = "reservoir.test/keep"


def test_release_takes_off_only_the_usage_finalizer_and_a_gone_pod_is_false(cluster_team):
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)  # the namespace, as a portal team has it
    core = client.core()
    namespace = cluster_team.namespace
    names = [f"held-{number}" for number in range(3)]
    for name in names:
        core.create_namespaced_pod(
            namespace,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "finalizers": [OTHER_FINALIZER, USAGE_FINALIZER]},
                "spec": {
                    "restartPolicy": "Never",
                    # no node has this label: the pod stays Pending, nobody else touches it
                    "nodeSelector": {"reservoir.test/nowhere": "true"},
                    "containers": [{"name": "main", "image": "registry.example.com/tools/shell:1"}],
                },
            },
        )
    try:
        # several in a row on the same client: each answer read to its end, the pooled connection used again
        assert [resources.release_pod(namespace, name) for name in names] == [True, True, True]
        for name in names:
            assert core.read_namespaced_pod(name, namespace).metadata.finalizers == [OTHER_FINALIZER]
        assert resources.release_pod(namespace, names[0]) is True  # already released: nothing to take off
        assert resources.release_pod(namespace, "never-made") is False
    finally:
        for name in names:
            core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": None}})
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
