"""The PDB lint reads PDBs, HPAs and Deployments from the real cluster (`export_manifests --from-cluster`)."""

import io

import pytest
from django.core.management import call_command

from cluster import client

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def test_from_cluster_flags_a_pdb_that_blocks_scale_down(portal_cluster, kube_namespace):
    from kubernetes import client as k8s

    api = client.api_client()
    labels = {"app": "llm-inference"}
    k8s.AppsV1Api(api).create_namespaced_deployment(
        kube_namespace,
        {
            "metadata": {"name": "llm-inference"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"node-role": "inference"},
                        "tolerations": [
                            {"key": "workload", "operator": "Equal", "value": "inference", "effect": "NoSchedule"}
                        ],
                        "containers": [{"name": "server", "image": "registry.example.com/llm/serve:1"}],
                    },
                },
            },
        },
    )
    k8s.AutoscalingV2Api(api).create_namespaced_horizontal_pod_autoscaler(
        kube_namespace,
        {
            "metadata": {"name": "llm-inference"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm-inference"},
                "minReplicas": 2,
                "maxReplicas": 10,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}},
                    }
                ],
            },
        },
    )
    k8s.PolicyV1Api(api).create_namespaced_pod_disruption_budget(
        kube_namespace,
        {"metadata": {"name": "llm-inference-pdb"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": labels}}},
    )
    out = io.StringIO()
    call_command("export_manifests", "--only", "pdb-lint", "--from-cluster", stdout=out)
    report = out.getvalue()
    assert "llm-inference-pdb" in report
    assert "block scale-down" in report
