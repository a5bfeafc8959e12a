"""Pure rendering of a team namespace: the Namespace, its ResourceQuota and LimitRange (seed 003), its
NetworkPolicies, and the PriorityClasses its pods use. No I/O and no Django models: plain data in, plain dicts out."""

from dataclasses import dataclass

from .labels import (
    GPU_RESOURCE,
    LABEL_GANG,
    LABEL_JOB_ID,
    LABEL_MANAGED_BY,
    LABEL_TEAM,
    LIMIT_RANGE_NAME,
    MANAGED_BY,
    PRIORITY_VALUES,
    RENDEZVOUS_PORT,
    RESOURCE_QUOTA_NAME,
)
from .manifests import cpu_quantity, memory_quantity


@dataclass(frozen=True)
class NamespaceSpec:
    """A team namespace and the limits seed 003 puts on it. GPU total is the sum of the team's pool quotas; the
    ResourceQuota adds room for the GPUs of the team's pods that are stopping (`stopping_gpus`, see
    `render_resource_quota`)."""

    namespace: str
    team_slug: str
    gpus: int
    requests_cpu_millicores: int
    requests_memory_mib: int
    max_pods: int
    container_max_gpus: int
    container_max_cpu_millicores: int
    container_max_memory_mib: int
    container_min_cpu_millicores: int
    container_min_memory_mib: int
    container_default_cpu_millicores: int
    container_default_memory_mib: int
    container_default_request_cpu_millicores: int
    container_default_request_memory_mib: int
    max_volumes: int = 10
    max_volume_storage_gib: int = 10 * 1024
    # Storage classes team claims may use, each capped at the team's total; and the classes of the cluster they may
    # not use, capped at nothing (so claims made around the portal keep to the same classes).
    storage_classes: tuple[str, ...] = ()
    closed_storage_classes: tuple[str, ...] = ()
    stopping_gpus: int = 0


def _owned_metadata(name: str, spec: NamespaceSpec, namespace: str | None = None) -> dict:
    metadata = {"name": name, "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_TEAM: spec.team_slug}}
    if namespace:
        metadata["namespace"] = namespace
    return metadata


# Pod Security Admission: the baseline profile is enforced in team namespaces (no privileged pods, host
# namespaces or paths, added capabilities, unconfined AppArmor or seccomp); restricted is warned and audited.
POD_SECURITY_LABELS = {
    "pod-security.kubernetes.io/enforce": "baseline",
    "pod-security.kubernetes.io/enforce-version": "latest",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/warn-version": "latest",
    "pod-security.kubernetes.io/audit": "restricted",
    "pod-security.kubernetes.io/audit-version": "latest",
}


def render_namespace(spec: NamespaceSpec) -> dict:
    metadata = _owned_metadata(spec.namespace, spec)
    metadata["labels"].update(POD_SECURITY_LABELS)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def storage_class_key(storage_class: str, resource: str) -> str:
    """A ResourceQuota key of one storage class, e.g. `fast.storageclass.storage.k8s.io/requests.storage`."""
    return f"{storage_class}.storageclass.storage.k8s.io/{resource}"


def render_resource_quota(spec: NamespaceSpec) -> dict:
    """Seed 003's ResourceQuota, with the team's storage caps. Extended resources take only the `requests.` form in
    a quota (GPUs are never overcommitted, so requests equal limits).

    The GPU cap is the team's quota plus the GPUs of its pods that are stopping: Kubernetes counts a pod being
    deleted until it has stopped (its grace period, a checkpoint), while Kueue gives its quota to the next job as
    soon as the deletion begins (a preemption, a cancel, a deadline). Without the room, the pods of the job Kueue
    admitted in its place would be refused until it has stopped, and the Job controller would retry them with a
    backoff that doubles up to a minute. Pods that are not stopping still never hold more than the quota."""
    storage = f"{spec.max_volume_storage_gib}Gi"
    hard = {
        f"requests.{GPU_RESOURCE}": str(spec.gpus + spec.stopping_gpus),
        "requests.cpu": cpu_quantity(spec.requests_cpu_millicores),
        "requests.memory": memory_quantity(spec.requests_memory_mib),
        "pods": str(spec.max_pods),
        "requests.storage": storage,
        "persistentvolumeclaims": str(spec.max_volumes),
    }
    for name in sorted(spec.storage_classes):
        hard[storage_class_key(name, "requests.storage")] = storage
    for name in sorted(spec.closed_storage_classes):
        hard[storage_class_key(name, "requests.storage")] = "0"
        hard[storage_class_key(name, "persistentvolumeclaims")] = "0"
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _owned_metadata(RESOURCE_QUOTA_NAME, spec, spec.namespace),
        "spec": {"hard": hard},
    }


def render_limit_range(spec: NamespaceSpec) -> dict:
    """Seed 003's LimitRange: per-container max (GPUs, cpu, memory), min, default limit and default request."""
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": _owned_metadata(LIMIT_RANGE_NAME, spec, spec.namespace),
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "max": {
                        GPU_RESOURCE: str(spec.container_max_gpus),
                        "cpu": cpu_quantity(spec.container_max_cpu_millicores),
                        "memory": memory_quantity(spec.container_max_memory_mib),
                    },
                    "min": {
                        "cpu": cpu_quantity(spec.container_min_cpu_millicores),
                        "memory": memory_quantity(spec.container_min_memory_mib),
                    },
                    # Without an explicit default, Kubernetes defaults a container's limit to the max: every
                    # container that names no GPUs would be given container_max_gpus of them.
                    "default": {
                        GPU_RESOURCE: "0",
                        "cpu": cpu_quantity(spec.container_default_cpu_millicores),
                        "memory": memory_quantity(spec.container_default_memory_mib),
                    },
                    "defaultRequest": {
                        GPU_RESOURCE: "0",
                        "cpu": cpu_quantity(spec.container_default_request_cpu_millicores),
                        "memory": memory_quantity(spec.container_default_request_memory_mib),
                    },
                }
            ]
        },
    }


# --- network isolation of a team namespace ------------------------------------------------------------------------
# NetworkPolicies are additive: a pod selected by any policy of a direction accepts only what one of them allows. So:
# - `reservoir-isolation` selects every pod of the namespace that is not a gang's and lets in traffic from the
#   namespace itself and from the namespaces the platform names (e.g. a metrics scraper's);
# - `reservoir-gang-isolation` selects the pods of gangs (LABEL_GANG) and lets in the same peers on every port but
#   the rendezvous port;
# - `rsv-<id>-rendezvous`, one per gang, lets the pods of that job (its LABEL_JOB_ID) reach its pods' rendezvous port.
# Other teams' pods reach nothing in the namespace. Egress stays open unless the platform closes it: then the pods
# reach their own namespace, the cluster's DNS and the CIDRs the platform lists. A missing per-job policy leaves the
# rendezvous port closed, never open.
NETWORK_POLICY_NAME = "reservoir-isolation"
GANG_NETWORK_POLICY_NAME = "reservoir-gang-isolation"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the apiserver on every namespace
MAX_PORT = 65535


@dataclass(frozen=True)
class NetworkSpec:
    """A team namespace's network isolation (platform settings)."""

    namespace: str
    team_slug: str
    ingress_namespaces: tuple[str, ...] = ()  # namespaces whose pods may also reach the team's (e.g. monitoring)
    egress_open: bool = True
    egress_cidrs: tuple[str, ...] = ()  # where pods may connect when egress is not open (besides namespace and DNS)
    rendezvous_port: int = RENDEZVOUS_PORT


def rendezvous_policy_name(job_name: str) -> str:
    return f"{job_name}-rendezvous"


def _network_metadata(name: str, namespace: str, team_slug: str) -> dict:
    return {
        "name": name,
        "namespace": namespace,
        "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_TEAM: team_slug},
    }


def _ingress_peers(spec: NetworkSpec) -> list[dict]:
    peers = [{"podSelector": {}}]  # every pod of the policy's own namespace
    if spec.ingress_namespaces:
        peers.append(
            {
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": sorted(spec.ingress_namespaces)}
                    ]
                }
            }
        )
    return peers


def _all_ports_but(port: int) -> list[dict]:
    ranges = [(1, port - 1), (port + 1, MAX_PORT)]
    tcp = [{"protocol": "TCP", "port": low, "endPort": high} for low, high in ranges if low <= high]
    return [*tcp, {"protocol": "UDP"}, {"protocol": "SCTP"}]


def _egress(spec: NetworkSpec) -> list[dict]:
    dns = {
        "to": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: "kube-system"}}}],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    rules = [{"to": [{"podSelector": {}}]}, dns]
    if spec.egress_cidrs:
        rules.append({"to": [{"ipBlock": {"cidr": cidr}} for cidr in sorted(spec.egress_cidrs)]})
    return rules


def render_network_policies(spec: NetworkSpec) -> list[dict]:
    """The namespace's two standing NetworkPolicies (see above)."""
    policy_types = ["Ingress"] if spec.egress_open else ["Ingress", "Egress"]
    egress = {} if spec.egress_open else {"egress": _egress(spec)}
    peers = _ingress_peers(spec)
    return [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _network_metadata(NETWORK_POLICY_NAME, spec.namespace, spec.team_slug),
            "spec": {
                "podSelector": {"matchExpressions": [{"key": LABEL_GANG, "operator": "DoesNotExist"}]},
                "policyTypes": policy_types,
                "ingress": [{"from": peers}],
                **egress,
            },
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _network_metadata(GANG_NETWORK_POLICY_NAME, spec.namespace, spec.team_slug),
            "spec": {
                "podSelector": {"matchExpressions": [{"key": LABEL_GANG, "operator": "Exists"}]},
                "policyTypes": policy_types,
                "ingress": [{"from": peers, "ports": _all_ports_but(spec.rendezvous_port)}],
                **egress,
            },
        },
    ]


def render_rendezvous_policy(
    *, namespace: str, team_slug: str, job_id: int, job_name: str, port: int = RENDEZVOUS_PORT
) -> dict:
    """The policy that opens a gang's rendezvous port to the pods of the same job, and only to them."""
    own = {LABEL_JOB_ID: str(job_id), LABEL_MANAGED_BY: MANAGED_BY}
    metadata = _network_metadata(rendezvous_policy_name(job_name), namespace, team_slug)
    metadata["labels"][LABEL_JOB_ID] = str(job_id)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata,
        "spec": {
            "podSelector": {"matchLabels": {**own, LABEL_GANG: "true"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": own}}], "ports": [{"protocol": "TCP", "port": port}]}
            ],
        },
    }


def render_priority_classes() -> list[dict]:
    """The pods' PriorityClasses. `preemptionPolicy: Never`: the kube-scheduler never evicts one pod for another;
    only Kueue, which knows the teams' quotas, preempts (a Workload of a WorkloadPriorityClass of the same name and
    value). Both fields are immutable in the cluster: see `cluster.resources.ensure_priority_classes`."""
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
            "value": value,
            "preemptionPolicy": "Never",
            "globalDefault": False,
            "description": f"Reservoir jobs of {name.split('-')[1]} priority",
        }
        for name, value in PRIORITY_VALUES.items()
    ]


def parse_role_bindings(entries) -> list[tuple[str, str, str]]:
    """`RESERVOIR_TEAM_ROLE_BINDINGS` entries, "<clusterrole>=<namespace>/<serviceaccount>", as (cluster role,
    namespace, service account) triples; an entry in another form raises ValueError naming it."""
    bindings = []
    for entry in entries:
        role, _, subject = entry.strip().partition("=")
        namespace, _, account = subject.partition("/")
        if not (role and namespace and account):
            raise ValueError(f"a team role binding is <clusterrole>=<namespace>/<serviceaccount>, not {entry!r}")
        bindings.append((role, namespace, account))
    return bindings


def render_role_bindings(namespace: str, team_slug: str, bindings: list[tuple[str, str, str]]) -> list[dict]:
    """One RoleBinding per (cluster role, namespace, service account): the portal's process gets that ClusterRole's
    rights inside the team namespace only (the Helm chart's <release>-team-* roles). Named after the role."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {
                "name": role,
                "namespace": namespace,
                "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_TEAM: team_slug},
            },
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account_namespace}],
        }
        for role, account_namespace, account in bindings
    ]
