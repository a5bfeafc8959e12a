"""Pure rendering of the Kueue objects the portal owns (kueue.x-k8s.io/v1beta2). No I/O and no Django models:
plain dataclasses in, plain dicts out, in the order they must be applied.

The projection (PRODUCT.md, "What the cluster must look like"):
- every pool is a ResourceFlavor named after its slug: `nodeLabels` = the pool's node selector, `tolerations` =
  the pool's taints (Kueue adds both to the pods it admits on that flavor);
- every team is a ClusterQueue `team-<slug>` in the cohort `reservoir`, open only to the team's namespace, with one
  resource group over nvidia.com/gpu, cpu and memory whose flavors are the reserved pools, then the elastic and
  shared pools (by slug within each kind). Per pool, GPUs: `nominalQuota` = the team's active reservation there,
  `borrowingLimit` = its quota there minus that reservation, `lendingLimit` = what its reservations there lend
  (each reservation's lending setting: none, all its GPUs, or all but the protected ones; Kueue lends only what
  the team's own jobs leave unused, and keeps `nominal − lendingLimit` for the team alone);
- every pool also has a ClusterQueue `pool-<slug>-unreserved` in the same cohort that no namespace can submit to:
  it holds the GPUs nobody reserved and lends them all. A team's quota above its reservation is borrowed from it and
  from the lending teams of the pool, so the teams of a pool together never hold more than the pool has;
- every team namespace has a LocalQueue `reservoir` pointing at the team's ClusterQueue;
- WorkloadPriorityClasses reservoir-low / normal / high carry the same values as the pods' PriorityClasses;
- the AdmissionCheck `reservoir-budget` (controllerName `reservoir.io/budget`: the portal is its controller,
  `reconcile.budget`). A team with a budget has it on its ClusterQueue for the flavors that cost by the hour
  (`admissionChecksStrategy` with `onFlavors` = the elastic and shared pools; every pool once its budget is
  reached): a workload Kueue would admit there waits until the portal says Ready, which it does while the month's
  variable spend is below the cap, and for a job inside the reservation.

Every object carries `app.kubernetes.io/managed-by: reservoir`: the reconcile deletes only objects with that label.
Fields the apiserver would default (stopPolicy, preemption.borrowWithinCohort, flavorFungibility, ...) are written
out, so that an object read back from the cluster equals its rendering unless someone edited it.
"""

import copy
from dataclasses import dataclass

from .labels import (
    GPU_RESOURCE,
    LABEL_MANAGED_BY,
    LABEL_POOL,
    LABEL_TEAM,
    LOCAL_QUEUE_NAME,
    MANAGED_BY,
    PRIORITY_VALUES,
)
from .manifests import PoolTarget, cpu_quantity, memory_quantity, tolerations_for

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
KUEUE_API_VERSION = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
COHORT = "reservoir"
# The label the apiserver puts on every namespace (immutable, equal to its name).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
COVERED_RESOURCES = (GPU_RESOURCE, "cpu", "memory")
STRICT_FIFO = "StrictFIFO"
BEST_EFFORT_FIFO = "BestEffortFIFO"
QUEUEING_STRATEGIES = (STRICT_FIFO, BEST_EFFORT_FIFO)
RESERVED_KIND = "reserved"
# Kueue's limits (ClusterQueue: ≤ 64 flavors per resource group; ResourceFlavor: ≤ 8 node labels, ≤ 8 tolerations).
MAX_FLAVORS_PER_GROUP = 64
MAX_FLAVOR_NODE_LABELS = 8
MAX_FLAVOR_TOLERATIONS = 8
# The portal's own AdmissionCheck: the budget's hard stop (reconcile/budget.py is its controller).
BUDGET_CHECK_NAME = "reservoir-budget"
BUDGET_CONTROLLER_NAME = "reservoir.io/budget"

# Kind, plural and whether namespaced, for every kind rendered here (the apply order is the order of KINDS).
KINDS = {
    "ResourceFlavor": ("resourceflavors", False),
    "WorkloadPriorityClass": ("workloadpriorityclasses", False),
    "AdmissionCheck": ("admissionchecks", False),
    "ClusterQueue": ("clusterqueues", False),
    "LocalQueue": ("localqueues", True),
}


@dataclass(frozen=True)
class PoolFlavorSpec:
    """A pool as Kueue sees it. `reserved_gpus` is what the pool's active reservations add up to right now;
    `gpus_per_node` sizes an elastic or shared pool at its autoscaler maximum."""

    slug: str
    kind: str
    node_selector: dict[str, str]
    taints: tuple[dict, ...] = ()
    contracted_gpus: int = 0
    reserved_gpus: int = 0
    max_nodes: int = 0
    gpus_per_node: int = 0

    @property
    def is_reserved(self) -> bool:
        return self.kind == RESERVED_KIND


@dataclass(frozen=True)
class TeamPoolShare:
    """A team's GPUs in one pool: its active reservation there, its quota (GPUs it may use at once) and how many
    of its reserved GPUs it lends to the cohort while its own jobs leave them idle (`lendable`, ≤ `reserved`)."""

    pool: str
    reserved: int = 0
    quota: int = 0
    lendable: int = 0


@dataclass(frozen=True)
class TeamQueueSpec:
    """A team as Kueue sees it. cpu/memory are the team namespace's ResourceQuota (requests) caps."""

    slug: str
    namespace: str
    cpu_millicores: int
    memory_mib: int
    shares: tuple[TeamPoolShare, ...] = ()
    queueing_strategy: str = STRICT_FIFO
    budget_checked: bool = False  # the team has a budget: its hourly-priced flavors wait for the budget's check
    budget_reached: bool = False  # ... and has spent it this month: every flavor waits (overage in a reserved pool too)

    def share(self, pool: str) -> TeamPoolShare:
        for share in self.shares:
            if share.pool == pool:
                return share
        return TeamPoolShare(pool=pool)


def cluster_queue_name(team_slug: str) -> str:
    return f"team-{team_slug}"


def unreserved_queue_name(pool_slug: str) -> str:
    return f"pool-{pool_slug}-unreserved"


def unreserved_gpus(pool: PoolFlavorSpec) -> int:
    """GPUs of the pool that no team reserved: for a reserved pool its contract minus its active reservations;
    for an elastic or shared pool, which takes no reservations, what its autoscaler can reach (max nodes × GPUs
    per node)."""
    if pool.is_reserved:
        return max(pool.contracted_gpus - pool.reserved_gpus, 0)
    return pool.max_nodes * pool.gpus_per_node


def flavor_order(pools: list[PoolFlavorSpec]) -> list[PoolFlavorSpec]:
    """Reserved pools first, then elastic and shared ones; by slug within each."""
    return sorted(pools, key=lambda pool: (not pool.is_reserved, pool.slug))


def _labels(**extra: str) -> dict[str, str]:
    return {LABEL_MANAGED_BY: MANAGED_BY, **extra}


def _quota(name: str, nominal: str, *, borrowing: str, lending: str) -> dict:
    return {"name": name, "nominalQuota": nominal, "borrowingLimit": borrowing, "lendingLimit": lending}


def render_resource_flavor(pool: PoolFlavorSpec) -> dict:
    tolerations = tolerations_for([PoolTarget(slug=pool.slug, node_selector=pool.node_selector, taints=pool.taints)])
    spec: dict = {"nodeLabels": dict(sorted(pool.node_selector.items()))}
    if tolerations:
        spec["tolerations"] = tolerations
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": pool.slug, "labels": _labels(**{LABEL_POOL: pool.slug})},
        "spec": spec,
    }


def render_team_cluster_queue(team: TeamQueueSpec, pools: list[PoolFlavorSpec]) -> dict:
    """The team's ClusterQueue.

    GPUs per pool: nominal = the active reservation there, borrowingLimit = quota − reservation (never below 0),
    lendingLimit = the GPUs its reservations there lend (never above the nominal, which Kueue refuses).

    cpu and memory are not Kueue's to cap: the namespace's ResourceQuota does that, for everything in the
    namespace. But a flavor must list every covered resource, and Kueue admits nothing whose cpu or memory does
    not fit. So in each pool where the team has GPUs (a quota or a reservation), cpu and memory get nominal = the
    namespace's whole requests cap, which a workload can never exceed without the ResourceQuota refusing its
    pods anyway; borrowingLimit and lendingLimit are 0, so cpu and memory never move between teams (they are not
    what the cohort shares). In pools where the team has no GPUs they are 0, like the GPUs.

    Preemption: within the team, a higher priority preempts a lower one (`withinClusterQueue: LowerPriority`) inside
    the team's reservation (its nominal quota); across teams, `reclaimWithinCohort: Any` lets a team take back only
    quota that is lent out of its nominal: a lender whose job fits in its own nominal quota preempts, whatever
    their priority, workloads of the teams that use more than their nominal quota in that pool (Kueue v0.17,
    `classical/hierarchical_preemption.go`: only a ClusterQueue whose usage exceeds its nominal quota holds
    candidates), so a workload inside its own team's nominal quota is never a candidate; and
    `borrowWithinCohort: Never` means a job that has to borrow never preempts: it waits. (`LowerPriority` with a
    threshold below every priority would let a borrowing job preempt its own team's lower ones, but with it Kueue
    v0.17 let later jobs pass a blocked head of a StrictFIFO queue — seen on the local cluster — and strict order
    is the default promise.)

    Flavor fungibility: a job stops at the first flavor its placement allows where it fits, by borrowing
    (`whenCanBorrow: MayStopSearch`: a soft job's home pool first, its quota above the reservation too) or by
    preempting (`whenCanPreempt: MayStopSearch`). So a soft job that fits in its team's reservation once Kueue
    preempts there stays in its home pool: a lender whose reserved GPUs are lent out reclaims them instead of
    spilling to a paid elastic pool while they serve another team (with `TryNextFlavor` it spilled, seen on the
    local cluster), and, within the team, a soft job preempts the team's lower-priority jobs in the reservation as a
    strict one does. It spills only where Kueue finds nothing to preempt (Kueue v0.17 simulates the preemption
    first, `flavorassigner.fitsResourceQuota`: no candidates means try the next flavor), e.g. a reservation full of
    the team's own jobs of the same or a higher priority, or GPUs beyond the reservation that are all in use (a job
    that has to borrow never preempts)."""
    cpu = cpu_quantity(team.cpu_millicores)
    memory = memory_quantity(team.memory_mib)
    flavors = []
    for pool in flavor_order(pools):
        share = team.share(pool.slug)
        has_gpus = share.quota > 0 or share.reserved > 0
        gpus = str(share.reserved)
        borrowing = str(max(share.quota - share.reserved, 0))
        lending = str(min(max(share.lendable, 0), share.reserved))
        flavors.append(
            _flavor_quotas(pool.slug, gpus, borrowing, lending, cpu if has_gpus else "0", memory if has_gpus else "0")
        )
    queue = _cluster_queue(
        name=cluster_queue_name(team.slug),
        labels=_labels(**{LABEL_TEAM: team.slug}),
        namespace_selector={"matchLabels": {NAMESPACE_NAME_LABEL: team.namespace}},
        queueing_strategy=team.queueing_strategy,
        flavors=flavors,
        preemption={
            "reclaimWithinCohort": "Any",
            "borrowWithinCohort": {"policy": "Never"},
            "withinClusterQueue": "LowerPriority",
        },
    )
    checked = budget_flavors(team, pools)
    if checked:  # never an empty onFlavors: that would mean every flavor
        queue["spec"]["admissionChecksStrategy"] = {
            "admissionChecks": [{"name": BUDGET_CHECK_NAME, "onFlavors": checked}]
        }
    return queue


def budget_flavors(team: TeamQueueSpec, pools: list[PoolFlavorSpec]) -> list[str]:
    """The flavors whose workloads wait for the budget's check: none without a budget; the elastic and shared pools
    with one; every pool once the month's budget is reached, so that a job running beyond the reservation in a
    reserved pool (overage) is held too — the controller lets one inside the reservation pass at once."""
    if not team.budget_checked:
        return []
    return [pool.slug for pool in flavor_order(pools) if team.budget_reached or not pool.is_reserved]


def render_unreserved_cluster_queue(pool: PoolFlavorSpec) -> dict:
    """The pool's GPUs nobody reserved, lent to the cohort in full. No namespace may submit to it (a null
    namespaceSelector selects none), so it only ever lends; cpu and memory are the teams' own (see above)."""
    gpus = str(unreserved_gpus(pool))
    return _cluster_queue(
        name=unreserved_queue_name(pool.slug),
        labels=_labels(**{LABEL_POOL: pool.slug}),
        namespace_selector=None,
        queueing_strategy=BEST_EFFORT_FIFO,
        flavors=[_flavor_quotas(pool.slug, gpus, "0", gpus, "0", "0")],
        preemption={
            "reclaimWithinCohort": "Never",
            "borrowWithinCohort": {"policy": "Never"},
            "withinClusterQueue": "Never",
        },
    )


def _flavor_quotas(flavor: str, gpus: str, gpu_borrowing: str, gpu_lending: str, cpu: str, memory: str) -> dict:
    """One flavor of a ClusterQueue: GPUs with their borrowing and lending limits; cpu and memory never move."""
    return {
        "name": flavor,
        "resources": [
            _quota(GPU_RESOURCE, gpus, borrowing=gpu_borrowing, lending=gpu_lending),
            _quota("cpu", cpu, borrowing="0", lending="0"),
            _quota("memory", memory, borrowing="0", lending="0"),
        ],
    }


def _cluster_queue(
    *, name: str, labels: dict, namespace_selector: dict | None, queueing_strategy: str, flavors: list, preemption: dict
) -> dict:
    """A ClusterQueue of the portal's cohort; `namespace_selector=None` lets no namespace submit to it."""
    spec = {"cohortName": COHORT}
    if namespace_selector is not None:
        spec["namespaceSelector"] = namespace_selector
    spec |= {
        "queueingStrategy": queueing_strategy,
        "resourceGroups": [{"coveredResources": list(COVERED_RESOURCES), "flavors": flavors}],
        "preemption": preemption,
        "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "MayStopSearch"},
        "stopPolicy": "None",
    }
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


def render_local_queue(team: TeamQueueSpec) -> dict:
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "LocalQueue",
        "metadata": {
            "name": LOCAL_QUEUE_NAME,
            "namespace": team.namespace,
            "labels": _labels(**{LABEL_TEAM: team.slug}),
        },
        "spec": {"clusterQueue": cluster_queue_name(team.slug), "stopPolicy": "None"},
    }


def render_workload_priority_classes() -> list[dict]:
    """Kueue's priorities for admission and preemption, named and valued like the pods' PriorityClasses."""
    return [
        {
            "apiVersion": KUEUE_API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": name, "labels": _labels()},
            "value": value,
            "description": f"Reservoir jobs of {name.split('-')[1]} priority",
        }
        for name, value in PRIORITY_VALUES.items()
    ]


def render_budget_admission_check() -> dict:
    """The budget's AdmissionCheck. Kueue counts a ClusterQueue that names it as inactive until its controller (the
    portal) marks it Active (`cluster.kueue_objects.mark_admission_check_active`, right after every apply)."""
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "AdmissionCheck",
        "metadata": {"name": BUDGET_CHECK_NAME, "labels": _labels()},
        "spec": {"controllerName": BUDGET_CONTROLLER_NAME},
    }


def check_limits(pools: list[PoolFlavorSpec]) -> list[str]:
    """What Kueue would refuse in this set of pools, in words (empty when all is well)."""
    problems = []
    if len(pools) > MAX_FLAVORS_PER_GROUP:
        problems.append(f"{len(pools)} pools: a Kueue ClusterQueue takes at most {MAX_FLAVORS_PER_GROUP} flavors")
    for pool in pools:
        if len(pool.node_selector) > MAX_FLAVOR_NODE_LABELS:
            problems.append(f"pool {pool.slug}: more than {MAX_FLAVOR_NODE_LABELS} selector labels")
        if len(pool.taints) > MAX_FLAVOR_TOLERATIONS:
            problems.append(f"pool {pool.slug}: more than {MAX_FLAVOR_TOLERATIONS} taints")
    return problems


def render_projection(pools: list[PoolFlavorSpec], teams: list[TeamQueueSpec]) -> list[dict]:
    """Every object of the projection, in apply order: flavors, priority classes, the budget's admission check,
    cluster queues, local queues."""
    ordered_pools = flavor_order(pools)
    objects = [render_resource_flavor(pool) for pool in ordered_pools]
    objects += render_workload_priority_classes()
    objects.append(render_budget_admission_check())
    ordered_teams = sorted(teams, key=lambda team: team.slug)
    objects += [render_team_cluster_queue(team, ordered_pools) for team in ordered_teams]
    objects += [render_unreserved_cluster_queue(pool) for pool in ordered_pools]
    objects += [render_local_queue(team) for team in ordered_teams]
    return objects


def without_lending(cluster_queue: dict) -> dict | None:
    """A ClusterQueue the portal no longer wants (its team or pool is gone), as it must stay while Kueue still holds it
    for its last Workloads: the same spec, lending nothing (every `lendingLimit` 0). Kueue keeps a deleted queue in the
    cohort until its Workloads are gone, and would go on lending its nominal GPUs meanwhile: GPUs that a new
    reservation or the pool's unreserved queue may already count. None when it already lends nothing."""
    spec = copy.deepcopy(cluster_queue.get("spec") or {})
    changed = False
    for group in spec.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                if str(resource.get("lendingLimit")) != "0":
                    resource["lendingLimit"] = "0"
                    changed = True
    if not changed:
        return None
    metadata = cluster_queue["metadata"]
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": metadata["name"], "labels": dict(metadata.get("labels") or {})},
        "spec": spec,
    }


def object_key(manifest: dict) -> str:
    """`Kind/name` or `Kind/namespace/name`: the identity of an object of the projection."""
    metadata = manifest["metadata"]
    if metadata.get("namespace"):
        return f"{manifest['kind']}/{metadata['namespace']}/{metadata['name']}"
    return f"{manifest['kind']}/{metadata['name']}"
