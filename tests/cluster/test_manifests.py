"""Unit tests of the pure manifest rendering (placement, resources, labels, namespace limits)."""

from cluster.labels import EBCLOUD_ALLOW_SOFT, EBCLOUD_NODE_POOL
from cluster.manifests import (
    JobManifestSpec,
    PoolTarget,
    cpu_quantity,
    memory_quantity,
    priority_class_name,
    render_job,
)
from cluster.namespaces import NamespaceSpec, render_limit_range, render_namespace, render_resource_quota

TRAINING = PoolTarget(
    slug="training",
    node_selector={"node-role": "training", "gpu-type": "a100"},
    taints=({"key": "workload", "value": "training", "effect": "NoSchedule"},),
)
ELASTIC = PoolTarget(
    slug="elastic",
    node_selector={"node-role": "elastic"},
    taints=(
        {"key": "workload", "value": "elastic", "effect": "NoSchedule"},
        {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"},
    ),
)


def spec(**overrides) -> JobManifestSpec:
    values = dict(
        name="rsv-42",
        namespace="team-llm",
        job_id=42,
        team_slug="llm",
        image="registry.example.com/llm/train:1.0",
        gpus=4,
        cpu_millicores=8000,
        memory_mib=32768,
        home_pool=TRAINING,
        command=("python", "train.py"),
        args=("--epochs", "3"),
        env={"NCCL_DEBUG": "INFO"},
        max_run_seconds=7200,
    )
    values.update(overrides)
    return JobManifestSpec(**values)


def pod_spec(manifest):
    return manifest["spec"]["template"]["spec"]


def test_strict_job_requires_the_home_pool_and_tolerates_only_its_taint():
    manifest = render_job(spec())
    required = pod_spec(manifest)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {"key": "gpu-type", "operator": "In", "values": ["a100"]},
                {"key": "node-role", "operator": "In", "values": ["training"]},
            ]
        }
    ]
    assert "preferredDuringSchedulingIgnoredDuringExecution" not in pod_spec(manifest)["affinity"]["nodeAffinity"]
    assert pod_spec(manifest)["tolerations"] == [
        {"key": "workload", "operator": "Equal", "value": "training", "effect": "NoSchedule"}
    ]


def test_soft_job_may_run_in_home_or_spill_pools_and_prefers_home():
    manifest = render_job(spec(soft=True, spill_pools=(ELASTIC,)))
    affinity = pod_spec(manifest)["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 2  # OR'ed: home or elastic
    assert {"key": "node-role", "operator": "In", "values": ["elastic"]} in terms[1]["matchExpressions"]
    preferred = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred == [{"weight": 100, "preference": terms[0]}]
    keys = {(t["key"], t["value"]) for t in pod_spec(manifest)["tolerations"]}
    assert keys == {("workload", "training"), ("workload", "elastic"), ("cloud.google.com/gke-spot", "true")}


def test_resources_requests_equal_limits():
    container = pod_spec(render_job(spec()))["containers"][0]
    assert container["resources"]["requests"] == {"nvidia.com/gpu": "4", "cpu": "8", "memory": "32Gi"}
    assert container["resources"]["limits"] == container["resources"]["requests"]
    assert container["command"] == ["python", "train.py"]
    assert container["args"] == ["--epochs", "3"]
    assert container["env"] == [{"name": "NCCL_DEBUG", "value": "INFO"}]


def test_labels_name_team_pool_and_job_on_job_and_pod():
    manifest = render_job(spec())
    expected = {
        "app.kubernetes.io/managed-by": "reservoir",
        "reservoir.io/team": "llm",
        "reservoir.io/pool": "training",
        "reservoir.io/job-id": "42",
    }
    # The Job also carries Kueue's labels: the team's LocalQueue and the WorkloadPriorityClass.
    assert manifest["metadata"]["labels"] == {
        **expected,
        "kueue.x-k8s.io/queue-name": "reservoir",
        "kueue.x-k8s.io/priority-class": "reservoir-normal",
    }
    assert manifest["spec"]["template"]["metadata"]["labels"] == expected


def test_job_lifecycle_fields():
    manifest = render_job(spec(priority=100, backoff_limit=2, ttl_seconds_after_finished=600))
    assert manifest["spec"]["activeDeadlineSeconds"] == 7200
    assert manifest["spec"]["backoffLimit"] == 2
    assert manifest["spec"]["ttlSecondsAfterFinished"] == 600
    assert manifest["spec"]["suspend"] is True  # until Kueue admits it
    assert manifest["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "reservoir-high"
    assert pod_spec(manifest)["priorityClassName"] == "reservoir-high"
    assert pod_spec(manifest)["restartPolicy"] == "Never"
    assert pod_spec(manifest)["terminationGracePeriodSeconds"] == 30  # Kubernetes' default unless the job says
    assert pod_spec(render_job(spec(termination_grace_seconds=900)))["terminationGracePeriodSeconds"] == 900
    # Every pod stays in the cluster until the sync has recorded its end (reconcile/sync.py takes this off).
    assert manifest["spec"]["template"]["metadata"]["finalizers"] == ["reservoir.io/usage"]


def test_seed_000_annotations_only_when_the_cluster_reads_them():
    assert manifest_annotations(render_job(spec())) == {}
    strict = render_job(spec(ebcloud_annotations=True))
    assert manifest_annotations(strict) == {EBCLOUD_NODE_POOL: "training", EBCLOUD_ALLOW_SOFT: "false"}
    reserved = PoolTarget(slug="reserved-a800", node_selector={EBCLOUD_NODE_POOL: "reserved"})
    soft = render_job(spec(ebcloud_annotations=True, soft=True, home_pool=reserved, spill_pools=(ELASTIC,)))
    assert manifest_annotations(soft) == {EBCLOUD_NODE_POOL: "reserved", EBCLOUD_ALLOW_SOFT: "true"}
    assert soft["spec"]["template"]["metadata"]["annotations"][EBCLOUD_ALLOW_SOFT] == "true"
    # The standard affinity is written either way.
    assert "nodeAffinity" in pod_spec(soft)["affinity"]


def manifest_annotations(manifest):
    return manifest["metadata"]["annotations"]


def test_anti_affinity_is_optional():
    assert "podAntiAffinity" not in pod_spec(render_job(spec()))["affinity"]
    manifest = render_job(spec(anti_affinity_group="llm-serving"))
    term = pod_spec(manifest)["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert manifest["spec"]["template"]["metadata"]["labels"]["reservoir.io/anti-affinity-group"] == "llm-serving"


def test_pod_annotations_pass_through():
    manifest = render_job(spec(pod_annotations={"pod-complete.stage.kwok.x-k8s.io/delay": "30s"}))
    assert manifest["spec"]["template"]["metadata"]["annotations"] == {"pod-complete.stage.kwok.x-k8s.io/delay": "30s"}


def test_the_portals_own_annotations_win_over_a_users():
    manifest = render_job(
        spec(
            soft=False,
            ebcloud_annotations=True,
            pod_annotations={EBCLOUD_ALLOW_SOFT: "true", EBCLOUD_NODE_POOL: "shared", "example.com/owner": "me"},
        )
    )
    annotations = manifest["spec"]["template"]["metadata"]["annotations"]
    assert annotations[EBCLOUD_ALLOW_SOFT] == "false"
    assert annotations[EBCLOUD_NODE_POOL] == "training"
    assert annotations["example.com/owner"] == "me"


def test_pods_get_no_service_account_token_no_privilege_escalation_and_the_default_seccomp_profile():
    pod = pod_spec(render_job(spec()))
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["containers"][0]["securityContext"] == {"allowPrivilegeEscalation": False}


def test_quantities():
    assert (cpu_quantity(500), cpu_quantity(2000), cpu_quantity(1500)) == ("500m", "2", "1500m")
    assert (memory_quantity(1024), memory_quantity(1536)) == ("1Gi", "1536Mi")
    assert (priority_class_name(0), priority_class_name(50), priority_class_name(75)) == (
        "reservoir-low",
        "reservoir-normal",
        "reservoir-normal",
    )


NAMESPACE = NamespaceSpec(
    namespace="team-llm",
    team_slug="llm",
    gpus=4,
    requests_cpu_millicores=32000,
    requests_memory_mib=131072,
    max_pods=20,
    container_max_gpus=2,
    container_max_cpu_millicores=8000,
    container_max_memory_mib=32768,
    container_min_cpu_millicores=500,
    container_min_memory_mib=1024,
    container_default_cpu_millicores=2000,
    container_default_memory_mib=8192,
    container_default_request_cpu_millicores=1000,
    container_default_request_memory_mib=4096,
)


def test_resource_quota_is_seed_003s():
    quota = render_resource_quota(NAMESPACE)
    assert quota["metadata"]["namespace"] == "team-llm"
    assert quota["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "4",
        "requests.cpu": "32",
        "requests.memory": "128Gi",
        "pods": "20",
        "requests.storage": "10240Gi",
        "persistentvolumeclaims": "10",
    }


def test_limit_range_is_seed_003s():
    limits = render_limit_range(NAMESPACE)["spec"]["limits"][0]
    assert limits["type"] == "Container"
    assert limits["max"] == {"nvidia.com/gpu": "2", "cpu": "8", "memory": "32Gi"}
    assert limits["min"] == {"cpu": "500m", "memory": "1Gi"}
    # GPUs default to 0: otherwise Kubernetes would give every container that names none the max.
    assert limits["default"] == {"nvidia.com/gpu": "0", "cpu": "2", "memory": "8Gi"}
    assert limits["defaultRequest"] == {"nvidia.com/gpu": "0", "cpu": "1", "memory": "4Gi"}


def test_team_namespaces_enforce_the_baseline_pod_security_profile_and_warn_restricted():
    labels = render_namespace(NAMESPACE)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"
    assert labels["pod-security.kubernetes.io/audit"] == "restricted"
    assert labels["reservoir.io/team"] == "llm"
    # The quota and the limit range carry only the portal's own labels.
    assert "pod-security.kubernetes.io/enforce" not in render_resource_quota(NAMESPACE)["metadata"]["labels"]
