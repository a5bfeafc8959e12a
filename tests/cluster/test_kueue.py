"""Unit tests of the pure Kueue rendering: flavors, cluster queues, local queues and priority classes."""

import dataclasses
import re

from cluster.kueue import (
    BEST_EFFORT_FIFO,
    BUDGET_CHECK_NAME,
    BUDGET_CONTROLLER_NAME,
    COHORT,
    PoolFlavorSpec,
    TeamPoolShare,
    TeamQueueSpec,
    object_key,
    render_budget_admission_check,
    render_local_queue,
    render_projection,
    render_resource_flavor,
    render_team_cluster_queue,
    render_unreserved_cluster_queue,
    render_workload_priority_classes,
    unreserved_gpus,
    without_lending,
)
from cluster.namespaces import render_priority_classes

TRAINING = PoolFlavorSpec(
    slug="training",
    kind="reserved",
    node_selector={"node-role": "training", "gpu-type": "a100"},
    taints=({"key": "workload", "value": "training", "effect": "NoSchedule"},),
    contracted_gpus=16,
    reserved_gpus=12,
    max_nodes=2,
)
A800 = PoolFlavorSpec(
    slug="reserved-a800",
    kind="reserved",
    node_selector={"scheduling.eks.ebcloud.com/node-pool": "reserved"},
    taints=({"key": "workload", "value": "reserved", "effect": "NoSchedule"},),
    contracted_gpus=32,
    reserved_gpus=24,
)
ELASTIC = PoolFlavorSpec(
    slug="elastic",
    kind="elastic",
    node_selector={"node-role": "elastic"},
    taints=(
        {"key": "workload", "value": "elastic", "effect": "NoSchedule"},
        {"key": "cloud.google.com/gke-spot", "effect": "NoSchedule"},
    ),
    max_nodes=20,
    gpus_per_node=8,
)
INFERENCE = PoolFlavorSpec(slug="inference", kind="shared", node_selector={"node-role": "inference"}, max_nodes=10)
POOLS = [ELASTIC, TRAINING, INFERENCE, A800]  # deliberately out of order
VISION = TeamQueueSpec(
    slug="vision",
    namespace="team-vision",
    cpu_millicores=32_000,
    memory_mib=128 * 1024,
    shares=(
        TeamPoolShare(pool="training", reserved=8, quota=10),
        TeamPoolShare(pool="elastic", reserved=0, quota=4),
    ),
)


def quotas(flavor: dict) -> dict[str, dict]:
    return {resource["name"]: resource for resource in flavor["resources"]}


def test_a_pool_is_a_flavor_of_its_labels_that_tolerates_its_taints():
    flavor = render_resource_flavor(ELASTIC)
    assert flavor["apiVersion"] == "kueue.x-k8s.io/v1beta2" and flavor["kind"] == "ResourceFlavor"
    assert flavor["metadata"]["name"] == "elastic"
    assert flavor["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "reservoir"
    assert flavor["spec"]["nodeLabels"] == {"node-role": "elastic"}
    assert flavor["spec"]["tolerations"] == [
        {"key": "workload", "operator": "Equal", "value": "elastic", "effect": "NoSchedule"},
        {"key": "cloud.google.com/gke-spot", "operator": "Exists", "effect": "NoSchedule"},
    ]
    untainted = PoolFlavorSpec(slug="cpu", kind="shared", node_selector={"node-role": "cpu"})
    assert "tolerations" not in render_resource_flavor(untainted)["spec"]


def test_a_team_queue_lists_reserved_pools_first_then_the_others_by_slug():
    queue = render_team_cluster_queue(VISION, POOLS)
    group = queue["spec"]["resourceGroups"]
    assert len(group) == 1
    assert group[0]["coveredResources"] == ["nvidia.com/gpu", "cpu", "memory"]
    assert [flavor["name"] for flavor in group[0]["flavors"]] == ["reserved-a800", "training", "elastic", "inference"]
    # Kueue wants every flavor to list the covered resources, in the same order.
    for flavor in group[0]["flavors"]:
        assert [resource["name"] for resource in flavor["resources"]] == group[0]["coveredResources"]


def test_gpus_nominal_is_the_reservation_and_the_quota_above_it_is_borrowed():
    flavors = {
        f["name"]: quotas(f) for f in render_team_cluster_queue(VISION, POOLS)["spec"]["resourceGroups"][0]["flavors"]
    }
    training = flavors["training"]["nvidia.com/gpu"]
    assert (training["nominalQuota"], training["borrowingLimit"], training["lendingLimit"]) == ("8", "2", "0")
    elastic = flavors["elastic"]["nvidia.com/gpu"]
    assert (elastic["nominalQuota"], elastic["borrowingLimit"], elastic["lendingLimit"]) == ("0", "4", "0")
    # No quota and no reservation: nothing at all there.
    for pool in ("reserved-a800", "inference"):
        assert {name: (q["nominalQuota"], q["borrowingLimit"]) for name, q in flavors[pool].items()} == {
            "nvidia.com/gpu": ("0", "0"),
            "cpu": ("0", "0"),
            "memory": ("0", "0"),
        }


def test_gpus_lent_are_the_lendable_gpus_of_the_teams_reservations_never_above_its_nominal():
    def lending(share: TeamPoolShare) -> str:
        team = TeamQueueSpec(slug="x", namespace="team-x", cpu_millicores=1000, memory_mib=1024, shares=(share,))
        flavor = render_team_cluster_queue(team, [TRAINING])["spec"]["resourceGroups"][0]["flavors"][0]
        gpu = quotas(flavor)["nvidia.com/gpu"]
        assert gpu["nominalQuota"] == str(share.reserved)
        assert quotas(flavor)["cpu"]["lendingLimit"] == "0"  # cpu and memory never move
        return gpu["lendingLimit"]

    assert lending(TeamPoolShare("training", reserved=8, quota=8, lendable=8)) == "8"  # lend idle GPUs
    assert lending(TeamPoolShare("training", reserved=8, quota=8, lendable=6)) == "6"  # keep 2 protected
    assert lending(TeamPoolShare("training", reserved=8, quota=8, lendable=0)) == "0"  # lend none
    assert lending(TeamPoolShare("training", reserved=4, quota=4, lendable=9)) == "4"  # Kueue refuses more than nominal
    assert lending(TeamPoolShare("training", reserved=0, quota=4, lendable=0)) == "0"  # nothing reserved, nothing lent


def test_a_lender_reclaims_from_any_team_but_a_borrower_never_preempts():
    preemption = render_team_cluster_queue(VISION, POOLS)["spec"]["preemption"]
    assert preemption["reclaimWithinCohort"] == "Any"
    assert preemption["borrowWithinCohort"] == {"policy": "Never"}


def test_a_quota_below_the_reservation_borrows_nothing_and_keeps_the_reservation():
    team = TeamQueueSpec(
        slug="x", namespace="team-x", cpu_millicores=1000, memory_mib=1024, shares=(TeamPoolShare("training", 8, 6),)
    )
    flavor = render_team_cluster_queue(team, [TRAINING])["spec"]["resourceGroups"][0]["flavors"][0]
    gpu = quotas(flavor)["nvidia.com/gpu"]
    assert (gpu["nominalQuota"], gpu["borrowingLimit"]) == ("8", "0")


def test_cpu_and_memory_are_the_namespace_caps_where_the_team_has_gpus_and_never_move_between_teams():
    flavors = {
        f["name"]: quotas(f) for f in render_team_cluster_queue(VISION, POOLS)["spec"]["resourceGroups"][0]["flavors"]
    }
    for pool in ("training", "elastic"):
        assert flavors[pool]["cpu"] == {"name": "cpu", "nominalQuota": "32", "borrowingLimit": "0", "lendingLimit": "0"}
        assert flavors[pool]["memory"] == {
            "name": "memory",
            "nominalQuota": "128Gi",
            "borrowingLimit": "0",
            "lendingLimit": "0",
        }


def test_a_team_queue_takes_only_its_namespace_and_preempts_across_teams_only_to_reclaim():
    spec = render_team_cluster_queue(VISION, POOLS)
    assert spec["metadata"]["name"] == "team-vision"
    assert spec["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "reservoir", "reservoir.io/team": "vision"}
    spec = spec["spec"]
    assert spec["cohortName"] == COHORT == "reservoir"
    assert spec["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "team-vision"}}
    assert spec["preemption"] == {
        "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {"policy": "Never"},
        "withinClusterQueue": "LowerPriority",
    }
    assert spec["flavorFungibility"] == {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "MayStopSearch"}
    assert spec["stopPolicy"] == "None"


def test_queueing_order_is_strict_unless_the_team_chose_best_effort():
    assert render_team_cluster_queue(VISION, POOLS)["spec"]["queueingStrategy"] == "StrictFIFO"
    relaxed = TeamQueueSpec(
        slug="vision", namespace="team-vision", cpu_millicores=1, memory_mib=1, queueing_strategy=BEST_EFFORT_FIFO
    )
    assert render_team_cluster_queue(relaxed, POOLS)["spec"]["queueingStrategy"] == "BestEffortFIFO"


def test_unreserved_gpus_are_the_contract_left_over_or_the_autoscaler_maximum():
    assert unreserved_gpus(TRAINING) == 4
    assert unreserved_gpus(A800) == 8
    assert unreserved_gpus(ELASTIC) == 160
    assert unreserved_gpus(INFERENCE) == 0  # GPUs per node unknown: nothing to lend
    overbooked = PoolFlavorSpec(slug="o", kind="reserved", node_selector={"a": "b"}, contracted_gpus=4, reserved_gpus=6)
    assert unreserved_gpus(overbooked) == 0


def test_the_unreserved_queue_lends_everything_and_takes_no_namespace():
    queue = render_unreserved_cluster_queue(TRAINING)
    assert queue["metadata"]["name"] == "pool-training-unreserved"
    assert queue["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "reservoir", "reservoir.io/pool": "training"}
    spec = queue["spec"]
    assert spec["cohortName"] == "reservoir"
    assert "namespaceSelector" not in spec  # null selects no namespace: nobody submits to it
    [group] = spec["resourceGroups"]
    [flavor] = group["flavors"]
    assert flavor["name"] == "training"
    gpu = quotas(flavor)["nvidia.com/gpu"]
    assert (gpu["nominalQuota"], gpu["lendingLimit"], gpu["borrowingLimit"]) == ("4", "4", "0")
    assert quotas(flavor)["cpu"]["nominalQuota"] == quotas(flavor)["memory"]["nominalQuota"] == "0"


def test_a_queue_that_goes_lends_nothing_while_kueue_holds_it_and_keeps_everything_else():
    lender = dataclasses.replace(VISION, shares=(TeamPoolShare(pool="training", reserved=8, quota=10, lendable=6),))
    listed = render_team_cluster_queue(lender, POOLS)
    listed["metadata"] |= {"uid": "abc", "resourceVersion": "7", "deletionTimestamp": "2026-12-01T00:00:00Z"}
    listed["status"] = {"admittedWorkloads": 1}
    quiet = without_lending(listed)
    assert quiet["metadata"] == {"name": "team-vision", "labels": listed["metadata"]["labels"]}
    assert "status" not in quiet
    for flavor in quiet["spec"]["resourceGroups"][0]["flavors"]:
        assert {resource["lendingLimit"] for resource in flavor["resources"]} == {"0"}
    [training] = [f for f in quiet["spec"]["resourceGroups"][0]["flavors"] if f["name"] == "training"]
    training = quotas(training)["nvidia.com/gpu"]
    assert (training["nominalQuota"], training["borrowingLimit"]) == ("8", "2")
    [before] = [f for f in listed["spec"]["resourceGroups"][0]["flavors"] if f["name"] == "training"]
    assert quotas(before)["nvidia.com/gpu"]["lendingLimit"] == "6"  # the listed object is not changed
    assert without_lending(quiet) is None  # already quiet: nothing to write
    unreserved = render_unreserved_cluster_queue(TRAINING)
    assert (
        quotas(without_lending(unreserved)["spec"]["resourceGroups"][0]["flavors"][0])["nvidia.com/gpu"]["lendingLimit"]
        == "0"
    )
    del unreserved["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["lendingLimit"]  # absent: lends all
    assert without_lending(unreserved) is not None


def test_a_local_queue_in_the_team_namespace_points_at_the_team_queue():
    queue = render_local_queue(VISION)
    assert queue["kind"] == "LocalQueue"
    assert (queue["metadata"]["name"], queue["metadata"]["namespace"]) == ("reservoir", "team-vision")
    assert queue["spec"]["clusterQueue"] == "team-vision"


def test_workload_priorities_match_the_pod_priority_classes_which_never_preempt():
    workload = {c["metadata"]["name"]: c["value"] for c in render_workload_priority_classes()}
    pods = {c["metadata"]["name"]: c["value"] for c in render_priority_classes()}
    assert workload == pods == {"reservoir-low": 1000, "reservoir-normal": 5000, "reservoir-high": 10000}
    assert {c["preemptionPolicy"] for c in render_priority_classes()} == {"Never"}


def test_the_projection_is_in_apply_order_and_every_object_is_the_portals():
    objects = render_projection(POOLS, [VISION, TeamQueueSpec("audio", "team-audio", 1000, 1024)])
    kinds = [obj["kind"] for obj in objects]
    assert kinds == (
        ["ResourceFlavor"] * 4
        + ["WorkloadPriorityClass"] * 3
        + ["AdmissionCheck"]
        + ["ClusterQueue"] * 6
        + ["LocalQueue"] * 2
    )
    keys = [object_key(obj) for obj in objects]
    assert len(set(keys)) == len(keys)
    assert "LocalQueue/team-audio/reservoir" in keys and "ClusterQueue/pool-elastic-unreserved" in keys
    dns_label = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    for obj in objects:
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "reservoir"
        assert dns_label.match(obj["metadata"]["name"]), obj["metadata"]["name"]


def test_the_budget_check_is_the_portals_and_a_team_without_a_budget_does_not_wait_for_it():
    check = render_budget_admission_check()
    assert (check["kind"], check["metadata"]["name"]) == ("AdmissionCheck", BUDGET_CHECK_NAME)
    assert check["spec"] == {"controllerName": BUDGET_CONTROLLER_NAME}
    assert "admissionChecksStrategy" not in render_team_cluster_queue(VISION, POOLS)["spec"]


def test_a_team_with_a_budget_waits_for_the_check_only_on_the_pools_that_cost_by_the_hour():
    queue = render_team_cluster_queue(dataclasses.replace(VISION, budget_checked=True), POOLS)
    assert queue["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": BUDGET_CHECK_NAME, "onFlavors": ["elastic", "inference"]}]
    }
    # With reserved pools only there is nothing to check: an empty onFlavors would mean every flavor.
    only_reserved = render_team_cluster_queue(dataclasses.replace(VISION, budget_checked=True), [TRAINING, A800])
    assert "admissionChecksStrategy" not in only_reserved["spec"]


def test_once_the_budget_is_reached_every_flavor_waits_for_the_check():
    queue = render_team_cluster_queue(dataclasses.replace(VISION, budget_checked=True, budget_reached=True), POOLS)
    [rule] = queue["spec"]["admissionChecksStrategy"]["admissionChecks"]
    assert rule["onFlavors"] == ["reserved-a800", "training", "elastic", "inference"]
