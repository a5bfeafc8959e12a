"""pdb_lint decides whether a workload's pods land on a pool's nodes, and missed ordinary ways of targeting a pool:
a nodeSelector or required node affinity naming the pool's label plus a well-known node label every node carries
(kubernetes.io/arch, kubernetes.io/os), and a toleration of the pool's taint written with `operator: Exists` (no
value, or no key at all). Users saw the PDB that blocks the pool's scale-down go unreported ("none blocks
scale-down"). Keys the pool does not set are now left aside and tolerations follow Kubernetes' rule; a workload whose
selector contradicts the pool's labels, or whose toleration is for another effect, is still not on the pool (the
controls)."""

import pytest

from monitoring.pdb_lint import lint

POOLS = [
    {
        "slug": "inference",
        "node_selector": {"node-role": "inference"},
        "taints": [{"key": "workload", "value": "inference", "effect": "NoSchedule"}],
    }
]
PDB = {
    "kind": "PodDisruptionBudget",
    "metadata": {"name": "llm-pdb", "namespace": "ai-prod"},
    "spec": {"selector": {"matchLabels": {"app": "llm"}}, "minAvailable": 2},
}
HPA = {
    "kind": "HorizontalPodAutoscaler",
    "metadata": {"name": "llm-hpa", "namespace": "ai-prod"},
    "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "llm"}, "minReplicas": 2},
}


def deployment(pod_spec):
    return {
        "kind": "Deployment",
        "metadata": {"name": "llm", "namespace": "ai-prod"},
        "spec": {"replicas": 2, "template": {"metadata": {"labels": {"app": "llm"}}, "spec": pod_spec}},
    }


@pytest.mark.parametrize(
    "pod_spec",
    [
        pytest.param(
            {"nodeSelector": {"node-role": "inference", "kubernetes.io/arch": "amd64"}},
            id="node-selector-with-a-well-known-label",
        ),
        pytest.param(
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "node-role", "operator": "In", "values": ["inference"]},
                                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
            id="required-affinity-with-a-well-known-label",
        ),
        pytest.param(
            {"tolerations": [{"key": "workload", "operator": "Exists", "effect": "NoSchedule"}]},
            id="toleration-operator-exists",
        ),
        pytest.param({"tolerations": [{"operator": "Exists"}]}, id="toleration-of-every-taint"),
        pytest.param(
            {"tolerations": [{"key": "workload", "value": "inference", "effect": "NoSchedule"}]},
            id="toleration-equal-the-control",
        ),
    ],
)
def test_a_blocking_pdb_of_a_workload_on_the_pool_is_reported(pod_spec):
    findings = lint(pdbs=[PDB], hpas=[HPA], workloads=[deployment(pod_spec)], pools=POOLS)
    assert [f.pool for f in findings] == ["inference"], findings


@pytest.mark.parametrize(
    "pod_spec",
    [
        pytest.param({"nodeSelector": {"node-role": "training", "kubernetes.io/arch": "amd64"}}, id="another-pool"),
        pytest.param({"nodeSelector": {"kubernetes.io/arch": "amd64"}}, id="only-a-well-known-label"),
        pytest.param(
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "node-role", "operator": "NotIn", "values": ["inference"]}
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
            id="affinity-away-from-the-pool",
        ),
        pytest.param(
            {"tolerations": [{"key": "workload", "operator": "Exists", "effect": "NoExecute"}]}, id="another-effect"
        ),
        pytest.param(
            {"tolerations": [{"key": "workload", "value": "training", "effect": "NoSchedule"}]}, id="another-value"
        ),
    ],
)
def test_a_workload_off_the_pool_is_not_reported(pod_spec):
    assert lint(pdbs=[PDB], hpas=[HPA], workloads=[deployment(pod_spec)], pools=POOLS) == []
