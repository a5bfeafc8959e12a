"""Pure rendering of a job's batch/v1 Job (and a gang's headless Service). A team namespace with its quota, limits
and NetworkPolicies is rendered by `cluster/namespaces.py`, the names and labels shared by both are in
`cluster/labels.py`. No I/O and no Django models: plain data in, plain dicts out.

Placement (PRODUCT.md):
- strict: required node affinity to the home pool's labels, and the home pool's tolerations only;
- soft: required affinity to home ∪ spill pools (one node-selector term per pool, OR'ed), preferred affinity of
  weight 100 to the home pool, tolerations of every one of those pools;
- spill-after N minutes is rendered as strict until the portal moves it, then as soft.
The standard affinity is always written; the seed-000 annotations are added for clusters whose scheduler reads
them.

Admission is Kueue's: every Job is created suspended, labelled with its team's LocalQueue and a
WorkloadPriorityClass; Kueue unsuspends it when the team's quota (its ClusterQueue in the cohort) has room, and
injects the assigned flavor's node labels. A strict job's required affinity matches only its home pool's flavor,
so Kueue can only assign that one; a soft job's matches home ∪ spill pools.
"""

from dataclasses import dataclass, field

from .labels import (
    EBCLOUD_ALLOW_SOFT,
    EBCLOUD_NODE_POOL,
    GPU_RESOURCE,
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUE_LABEL,
    LABEL_ANTI_AFFINITY,
    LABEL_GANG,
    LABEL_JOB_ID,
    LABEL_MANAGED_BY,
    LABEL_POOL,
    LABEL_TEAM,
    LOCAL_QUEUE_NAME,
    MANAGED_BY,
    PRIORITY_CLASSES,
    RENDEZVOUS_PORT,
    RENDEZVOUS_TOKEN_ENV,
    USAGE_FINALIZER,
)
from .team_data import add_team_data


@dataclass(frozen=True)
class PoolTarget:
    """What scheduling needs to know of a pool: its slug, node labels and taints."""

    slug: str
    node_selector: dict[str, str]
    taints: tuple[dict, ...] = ()


@dataclass(frozen=True)
class JobManifestSpec:
    name: str
    namespace: str
    job_id: int
    team_slug: str
    image: str
    gpus: int
    cpu_millicores: int
    memory_mib: int
    home_pool: PoolTarget
    soft: bool = False
    spill_pools: tuple[PoolTarget, ...] = ()
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    priority: int = 50
    max_run_seconds: int = 24 * 3600
    termination_grace_seconds: int = 30  # the pods' terminationGracePeriodSeconds (time to checkpoint when stopped)
    backoff_limit: int = 0
    ttl_seconds_after_finished: int = 24 * 3600
    anti_affinity_group: str = ""
    pod_annotations: dict[str, str] = field(default_factory=dict)
    ebcloud_annotations: bool = False
    suspend: bool = True  # Kueue unsuspends it on admission
    local_queue: str = LOCAL_QUEUE_NAME
    # Team data (cluster/team_data.py): volumes by claim name, shared memory, secrets by name (never values).
    volumes: tuple = ()  # of team_data.VolumeMount
    shm_gib: int = 0
    image_pull_secrets: tuple[str, ...] = ()
    secret_env: tuple = ()  # of team_data.SecretEnv
    nodes: int = 1  # pods of `gpus` GPUs each, one per node: above 1, an Indexed Job (see `gang_job`)
    rendezvous_port: int = RENDEZVOUS_PORT
    rendezvous_token: str = ""  # a gang's per-job secret (jobs.manifests.rendezvous_token), as RENDEZVOUS_TOKEN_ENV


def cpu_quantity(millicores: int) -> str:
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def memory_quantity(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def priority_class_name(priority: int) -> str:
    """The PriorityClass of a portal priority (the closest one at or below it)."""
    eligible = [value for value in PRIORITY_CLASSES if value <= priority]
    return PRIORITY_CLASSES[max(eligible) if eligible else min(PRIORITY_CLASSES)]


def node_selector_term(pool: PoolTarget) -> dict:
    return {
        "matchExpressions": [
            {"key": key, "operator": "In", "values": [value]} for key, value in sorted(pool.node_selector.items())
        ]
    }


def tolerations_for(pools: list[PoolTarget]) -> list[dict]:
    seen: set[tuple] = set()
    tolerations = []
    for pool in pools:
        for taint in pool.taints:
            effect = taint.get("effect", "NoSchedule")
            key = (taint["key"], taint.get("value", ""), effect)
            if key in seen:
                continue
            seen.add(key)
            toleration = {"key": taint["key"], "operator": "Equal", "value": taint.get("value", ""), "effect": effect}
            if not toleration["value"]:
                toleration = {"key": taint["key"], "operator": "Exists", "effect": effect}
            tolerations.append(toleration)
    return tolerations


def affinity_for(spec: JobManifestSpec) -> dict:
    if not spec.soft:
        affinity = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [node_selector_term(spec.home_pool)]
                }
            }
        }
    else:
        pools = [spec.home_pool, *spec.spill_pools]
        affinity = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [node_selector_term(pool) for pool in pools]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "preference": node_selector_term(spec.home_pool)}
                ],
            }
        }
    if spec.anti_affinity_group:
        affinity["podAntiAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": {LABEL_ANTI_AFFINITY: spec.anti_affinity_group}},
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        }
    if spec.nodes > 1:  # a gang's pods on different nodes, also after spill-after patches these directives
        affinity.setdefault("podAntiAffinity", {})["requiredDuringSchedulingIgnoredDuringExecution"] = [
            one_pod_per_node(spec)
        ]
    return affinity


def scheduling_directives(spec: JobManifestSpec) -> dict:
    """The parts of the pod template that placement decides (what spill-after patches on a suspended Job)."""
    pools = [spec.home_pool, *spec.spill_pools] if spec.soft else [spec.home_pool]
    return {"affinity": affinity_for(spec), "tolerations": tolerations_for(pools)}


def ebcloud_annotations(spec: JobManifestSpec) -> dict[str, str]:
    pool_value = spec.home_pool.node_selector.get(EBCLOUD_NODE_POOL, spec.home_pool.slug)
    return {EBCLOUD_NODE_POOL: pool_value, EBCLOUD_ALLOW_SOFT: "true" if spec.soft else "false"}


def job_labels(spec: JobManifestSpec) -> dict[str, str]:
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_TEAM: spec.team_slug,
        LABEL_POOL: spec.home_pool.slug,
        LABEL_JOB_ID: str(spec.job_id),
    }


def render_job(spec: JobManifestSpec) -> dict:
    """The batch/v1 Job for `spec` (requests equal limits, so the pod is Guaranteed for its GPUs)."""
    labels = job_labels(spec)
    pod_labels = dict(labels)
    if spec.anti_affinity_group:
        pod_labels[LABEL_ANTI_AFFINITY] = spec.anti_affinity_group
    annotations = ebcloud_annotations(spec) if spec.ebcloud_annotations else {}
    resources = {
        GPU_RESOURCE: str(spec.gpus),
        "cpu": cpu_quantity(spec.cpu_millicores),
        "memory": memory_quantity(spec.memory_mib),
    }
    container = {
        "name": "main",
        "image": spec.image,
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    if spec.command:
        container["command"] = list(spec.command)
    if spec.args:
        container["args"] = list(spec.args)
    if spec.env:
        container["env"] = [{"name": key, "value": str(value)} for key, value in sorted(spec.env.items())]
    pod_spec = {
        "restartPolicy": "Never",
        "priorityClassName": priority_class_name(spec.priority),
        "terminationGracePeriodSeconds": spec.termination_grace_seconds,
        "containers": [container],
        **scheduling_directives(spec),
        # Jobs never talk to the apiserver, and get the container runtime's default syscall filter.
        "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
    }
    add_team_data(
        pod_spec,
        container,
        volumes=spec.volumes,
        shm_gib=spec.shm_gib,
        image_pull_secrets=spec.image_pull_secrets,
        secret_env=spec.secret_env,
    )
    job_labels_with_queue = {
        **labels,
        KUEUE_QUEUE_LABEL: spec.local_queue,
        KUEUE_PRIORITY_LABEL: priority_class_name(spec.priority),
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": spec.name,
            "namespace": spec.namespace,
            "labels": job_labels_with_queue,
            "annotations": dict(annotations),
        },
        "spec": {
            "suspend": spec.suspend,
            "backoffLimit": spec.backoff_limit,
            "activeDeadlineSeconds": spec.max_run_seconds,
            "ttlSecondsAfterFinished": spec.ttl_seconds_after_finished,
            "template": {
                # The portal's own annotations always win over a user's (jobs.specs also refuses reserved keys).
                "metadata": {
                    "labels": pod_labels,
                    "annotations": {**spec.pod_annotations, **annotations},
                    "finalizers": [USAGE_FINALIZER],
                },
                "spec": pod_spec,
            },
        },
    }
    return gang_job(spec, job) if spec.nodes > 1 else job


# --- multi-node jobs (gangs) ------------------------------------------------------------------------------------
# A job of N nodes × G GPUs is an Indexed Job with parallelism = completions = N: Kueue admits its one pod set of N
# pods whole or not at all, and the Job controller gives each pod its completion index (0..N-1), which is its node
# rank. A headless Service named like the Job (selecting the job's pods) gives pod i the DNS name
# `<job>-<i>.<job>.<namespace>.svc`; pod 0 is the rendezvous master. A required pod anti-affinity on the hostname
# keeps the job's pods on different nodes. The environment is what torchrun and most launchers read:
# MASTER_ADDR / MASTER_PORT (pod 0 and the rendezvous port), NNODES = N, NODE_RANK = the completion index,
# NPROC_PER_NODE = G, WORLD_SIZE = N × G (worker processes in all, one per GPU); the PET_* copies are torchrun's own
# environment names for its options, so `torchrun train.py` needs no arguments. They win over a user's values.
# The pods carry LABEL_GANG: in the team namespace only the pods of the same job reach their rendezvous port (the
# NetworkPolicies below). RESERVOIR_RENDEZVOUS_TOKEN is a secret of this job alone, for launchers that can check
# one (torchrun's TCPStore cannot: it accepts any connection, so for it the NetworkPolicy is the whole guard).
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"


def gang_service_name(spec: JobManifestSpec) -> str:
    return spec.name


def master_address(spec: JobManifestSpec) -> str:
    """Pod 0's DNS name through the job's headless Service."""
    return f"{spec.name}-0.{gang_service_name(spec)}.{spec.namespace}.svc"


def rendezvous_env(spec: JobManifestSpec) -> list[dict]:
    """The launcher environment of a gang's pods (NODE_RANK from the pod's completion index)."""
    plain = {
        "MASTER_ADDR": master_address(spec),
        "MASTER_PORT": str(spec.rendezvous_port),
        "NNODES": str(spec.nodes),
        "NPROC_PER_NODE": str(spec.gpus),
        "WORLD_SIZE": str(spec.nodes * spec.gpus),
    }
    plain.update({f"PET_{name}": plain[name] for name in ("MASTER_ADDR", "MASTER_PORT", "NNODES", "NPROC_PER_NODE")})
    if spec.rendezvous_token:
        plain[RENDEZVOUS_TOKEN_ENV] = spec.rendezvous_token
    index = {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}}
    env = [{"name": name, "value": value} for name, value in sorted(plain.items())]
    env += [{"name": "NODE_RANK", "valueFrom": index}, {"name": "PET_NODE_RANK", "valueFrom": index}]
    return env


def one_pod_per_node(spec: JobManifestSpec) -> dict:
    """Required anti-affinity: no two pods of this job on one node."""
    return {
        "labelSelector": {"matchLabels": {LABEL_JOB_ID: str(spec.job_id)}},
        "topologyKey": HOSTNAME_TOPOLOGY,
    }


def gang_job(spec: JobManifestSpec, job: dict) -> dict:
    """`job` (rendered for one pod) made the Indexed Job of an N-node gang (see above)."""
    job_spec = job["spec"]
    job_spec.update({"completionMode": "Indexed", "parallelism": spec.nodes, "completions": spec.nodes})
    pod_spec = job_spec["template"]["spec"]
    job_spec["template"]["metadata"]["labels"][LABEL_GANG] = "true"
    pod_spec["subdomain"] = gang_service_name(spec)  # one pod per node: `affinity_for`
    container = pod_spec["containers"][0]
    ours = rendezvous_env(spec)
    taken = {entry["name"] for entry in ours}
    container["env"] = [entry for entry in container.get("env", []) if entry["name"] not in taken] + ours
    container["ports"] = [{"name": "rendezvous", "containerPort": spec.rendezvous_port, "protocol": "TCP"}]
    return job


def render_gang_service(spec: JobManifestSpec, *, owner_uid: str | None = None) -> dict:
    """The headless Service that names a gang's pods. Owned by the Job (`owner_uid`, known once the Job exists), so
    the garbage collector deletes it with the Job; `publishNotReadyAddresses` lets pods find each other before
    they are ready."""
    metadata = {"name": gang_service_name(spec), "namespace": spec.namespace, "labels": job_labels(spec)}
    if owner_uid:
        metadata["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": spec.name, "uid": owner_uid, "blockOwnerDeletion": False}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "clusterIP": "None",
            "selector": {LABEL_JOB_ID: str(spec.job_id), LABEL_MANAGED_BY: MANAGED_BY},
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": spec.rendezvous_port, "protocol": "TCP"}],
        },
    }
