"""The Kueue projection against the real cluster with real Kueue: the demo's pools and teams become flavors, cluster
queues and local queues that Kueue accepts; changes, reservation boundaries, hand edits and deleted pools reach it;
what the portal did not create is left alone."""

import time
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from kubernetes.client.exceptions import ApiException

from cluster import client
from cluster.kueue import KUEUE_GROUP, KUEUE_VERSION
from pools import projection
from pools import services as pool_services
from pools.choices import PoolKind
from pools.models import KueueProjection, Pool
from portal.models import AuditEntry, Team
from reconcile import kueue, namespaces
from reconcile.tasks import reconcile_kueue_at_reservation_boundary
from tests.clusterkit import KWOK_DELAY, create_job_for_kueue, delete_team_namespace, lend_none, set_quota, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

PLURALS = {
    "ResourceFlavor": "resourceflavors",
    "ClusterQueue": "clusterqueues",
    "WorkloadPriorityClass": "workloadpriorityclasses",
}


def read(kind: str, name: str) -> dict | None:
    try:
        return client.custom_objects().get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, PLURALS[kind], name)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def read_local_queue(namespace: str) -> dict:
    return client.custom_objects().get_namespaced_custom_object(
        KUEUE_GROUP, KUEUE_VERSION, namespace, "localqueues", "reservoir"
    )


def gpu_quota(queue_name: str, flavor: str) -> dict:
    queue = read("ClusterQueue", queue_name)
    [group] = queue["spec"]["resourceGroups"]
    [found] = [f for f in group["flavors"] if f["name"] == flavor]
    return next(r for r in found["resources"] if r["name"] == "nvidia.com/gpu")


def is_active(obj: dict | None) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)


def test_the_demo_projection_is_in_the_cluster_and_kueue_accepts_it(portal_cluster):
    # seed_demo (in the fixture) made its changes through the services: each sent a reconcile after commit.
    assert projection.kueue_state()["applied"] is True
    for slug in ("inference", "training", "elastic", "reserved-a800"):
        flavor = read("ResourceFlavor", slug)
        assert flavor["spec"]["nodeLabels"] == Pool.objects.get(slug=slug).node_selector
    assert read("ResourceFlavor", "elastic")["spec"]["tolerations"] == [
        {"key": "workload", "operator": "Equal", "value": "elastic", "effect": "NoSchedule"},
        {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
    ]
    # llm: 16 of reserved-a800 reserved, quota 20 → 4 borrowed; elastic: quota 8, all borrowed.
    assert [f["name"] for f in read("ClusterQueue", "team-llm")["spec"]["resourceGroups"][0]["flavors"]] == [
        "reserved-a800",
        "training",
        "elastic",
        "inference",
    ]
    llm = gpu_quota("team-llm", "reserved-a800")
    # It lends its idle reserved GPUs (the default setting).
    assert (str(llm["nominalQuota"]), str(llm["borrowingLimit"]), str(llm["lendingLimit"])) == ("16", "4", "16")
    assert (
        str(gpu_quota("team-llm", "elastic")["nominalQuota"]),
        str(gpu_quota("team-llm", "elastic")["borrowingLimit"]),
    ) == ("0", "8")
    # What nobody reserved: a800 32 − 16 − 8, training 16 − 8 − 4, elastic 20 nodes × 8, inference 10 × 8.
    assert {
        slug: str(gpu_quota(f"pool-{slug}-unreserved", slug)["nominalQuota"])
        for slug in ("reserved-a800", "training", "elastic", "inference")
    } == {"reserved-a800": "8", "training": "4", "elastic": "160", "inference": "80"}
    for team in ("llm", "vision", "speech"):
        assert read_local_queue(f"team-{team}")["spec"]["clusterQueue"] == f"team-{team}"
    assert {name: read("WorkloadPriorityClass", name)["value"] for name in ("reservoir-low", "reservoir-high")} == {
        "reservoir-low": 1000,
        "reservoir-high": 10000,
    }
    # Kueue accepts every queue: Active (its flavors exist, its spec is valid), local queues too.
    queues = ["team-llm", "team-vision", "team-speech"] + [
        f"pool-{slug}-unreserved" for slug in ("reserved-a800", "training", "elastic", "inference")
    ]
    for name in queues:
        wait_for(
            lambda name=name: is_active(read("ClusterQueue", name)), timeout=30, what=f"ClusterQueue {name} Active"
        )
    for team in ("llm", "vision", "speech"):
        wait_for(
            lambda team=team: is_active(read_local_queue(f"team-{team}")), timeout=30, what=f"LocalQueue of {team}"
        )
    # Reconciling again changes nothing: what the apiserver and Kueue default is not mistaken for drift.
    outcome = kueue.reconcile()
    assert set(outcome.values()) == {"unchanged"}, {
        key: value for key, value in outcome.items() if value != "unchanged"
    }


def test_the_pods_priority_classes_never_preempt_and_a_drifted_one_is_made_again(portal_cluster, cluster_team):
    scheduling = client.scheduling()
    set_quota(cluster_team, Pool.objects.get(slug="training"), 1)  # reconciles the namespace and its classes
    assert scheduling.read_priority_class("reservoir-normal").preemption_policy == "Never"
    # A class of the portal's with the wrong (immutable) value: deleted and created again.
    scheduling.delete_priority_class("reservoir-low")
    scheduling.create_priority_class(
        {
            "metadata": {"name": "reservoir-low", "labels": {"app.kubernetes.io/managed-by": "reservoir"}},
            "value": 999,
            "preemptionPolicy": "PreemptLowerPriority",
        }
    )
    namespaces.reconcile(cluster_team)
    low = scheduling.read_priority_class("reservoir-low")
    assert (low.value, low.preemption_policy) == (1000, "Never")


def test_a_quota_change_changes_the_borrowing_limit(portal_cluster, cluster_team):
    a800 = Pool.objects.get(slug="reserved-a800")
    queue = f"team-{cluster_team.slug}"
    set_quota(cluster_team, a800, 3)
    assert (
        str(gpu_quota(queue, "reserved-a800")["nominalQuota"]),
        str(gpu_quota(queue, "reserved-a800")["borrowingLimit"]),
    ) == ("0", "3")
    assert read_local_queue(cluster_team.namespace)["spec"]["clusterQueue"] == queue
    set_quota(cluster_team, a800, 5)
    assert str(gpu_quota(queue, "reserved-a800")["borrowingLimit"]) == "5"
    assert projection.kueue_state()["applied"] is True
    wait_for(lambda: is_active(read("ClusterQueue", queue)), timeout=30, what=f"{queue} Active")


def test_a_reservation_starting_changes_nominal_quota_at_that_moment(portal_cluster, cluster_team):
    training = Pool.objects.get(slug="training")
    queue = f"team-{cluster_team.slug}"
    set_quota(cluster_team, training, 2)
    starts_at = timezone.now() + timedelta(seconds=4)
    pool_services.create_reservation(
        team=cluster_team, pool=training, gpus=2, starts_at=starts_at, ends_at=starts_at + timedelta(days=1)
    )
    # Committed: Kueue has the reservation's team, not yet its GPUs (it has not started).
    assert str(gpu_quota(queue, "training")["nominalQuota"]) == "0"
    assert str(gpu_quota("pool-training-unreserved", "training")["nominalQuota"]) == "4"
    # What beat does every few seconds, here every half second.
    checks_before = 0
    while timezone.now() < starts_at - timedelta(milliseconds=300):
        assert reconcile_kueue_at_reservation_boundary() is None
        assert str(gpu_quota(queue, "training")["nominalQuota"]) == "0"
        assert projection.kueue_state()["applied"] is True
        checks_before += 1
        time.sleep(0.5)
    assert checks_before >= 3
    while timezone.now() < starts_at:
        time.sleep(0.05)
    assert projection.kueue_state()["applied"] is False  # the reservation started: Kueue does not know yet
    # The first check after the start (beat's next tick, within 5 s) brings it to Kueue.
    outcome = reconcile_kueue_at_reservation_boundary()
    assert sorted(outcome["corrected"]) == sorted([f"ClusterQueue/{queue}", "ClusterQueue/pool-training-unreserved"])
    quota = gpu_quota(queue, "training")
    assert (str(quota["nominalQuota"]), str(quota["borrowingLimit"])) == ("2", "0")
    assert str(gpu_quota("pool-training-unreserved", "training")["nominalQuota"]) == "2"
    assert projection.kueue_state()["applied"] is True
    # Nothing was a hand edit.
    assert not AuditEntry.objects.filter(action__startswith="kueue.").exists()


def test_a_hand_edited_cluster_queue_is_put_back_and_audited(portal_cluster):
    api = client.custom_objects()
    for attempt in range(5):  # Kueue writes the queue's status meanwhile: retry on a conflict, as kubectl would
        queue = read("ClusterQueue", "team-llm")
        flavor = next(f for f in queue["spec"]["resourceGroups"][0]["flavors"] if f["name"] == "reserved-a800")
        next(r for r in flavor["resources"] if r["name"] == "nvidia.com/gpu")["nominalQuota"] = "99"
        try:
            api.replace_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", "team-llm", queue)
            break
        except ApiException as error:
            if error.status != 409 or attempt == 4:
                raise
    assert str(gpu_quota("team-llm", "reserved-a800")["nominalQuota"]) == "99"

    outcome = kueue.reconcile()  # what the minute's beat runs
    assert outcome["ClusterQueue/team-llm"] == "corrected"
    assert str(gpu_quota("team-llm", "reserved-a800")["nominalQuota"]) == "16"
    entry = AuditEntry.objects.get(action="kueue.clusterqueue_put_back")
    assert entry.object_type == "portal.team" and entry.object_id == str(Team.objects.get(slug="llm").pk)
    assert entry.actor is None
    hand = next(f for f in entry.before["spec"]["resourceGroups"][0]["flavors"] if f["name"] == "reserved-a800")
    assert next(r for r in hand["resources"] if r["name"] == "nvidia.com/gpu")["nominalQuota"] == "99"
    assert kueue.reconcile()["ClusterQueue/team-llm"] == "unchanged"


def test_a_deleted_pool_loses_its_flavor_and_its_unreserved_queue(portal_cluster):
    scratch = pool_services.save_pool(
        pool=Pool(
            slug=f"scratch-{uuid.uuid4().hex[:4]}",
            name="Scratch",
            kind=PoolKind.SHARED,
            gpu_model="NVIDIA-T4",
            node_selector={"node-role": "scratch"},
            max_nodes=2,
            gpus_per_node=4,
        )
    )
    slug = scratch.slug
    assert read("ResourceFlavor", slug)["spec"]["nodeLabels"] == {"node-role": "scratch"}
    assert str(gpu_quota(f"pool-{slug}-unreserved", slug)["nominalQuota"]) == "8"
    assert slug in [f["name"] for f in read("ClusterQueue", "team-llm")["spec"]["resourceGroups"][0]["flavors"]]
    wait_for(lambda: is_active(read("ClusterQueue", f"pool-{slug}-unreserved")), timeout=30, what="the pool's queue")

    pool_services.delete_pool(pool=scratch)
    assert slug not in [f["name"] for f in read("ClusterQueue", "team-llm")["spec"]["resourceGroups"][0]["flavors"]]
    # Kueue's finalizers hold a queue and a flavor until nothing uses them; then they are gone.
    wait_for(lambda: read("ClusterQueue", f"pool-{slug}-unreserved") is None, timeout=30, what="the queue gone")
    wait_for(lambda: read("ResourceFlavor", slug) is None, timeout=30, what="the flavor gone")
    assert projection.kueue_state()["applied"] is True


FLAVOR = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor"}


@pytest.fixture
def hand_made(portal_cluster):
    """Kueue objects made by hand (no portal label), deleted afterwards."""
    api = client.custom_objects()
    suffix = uuid.uuid4().hex[:5]
    names = {"flavor": f"hand-made-{suffix}", "queue": f"hand-made-{suffix}", "taken": f"taken-{suffix}"}
    api.create_cluster_custom_object(
        KUEUE_GROUP,
        KUEUE_VERSION,
        "resourceflavors",
        {**FLAVOR, "metadata": {"name": names["flavor"]}, "spec": {"nodeLabels": {"node-role": "hand"}}},
    )
    api.create_cluster_custom_object(
        KUEUE_GROUP,
        KUEUE_VERSION,
        "clusterqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": names["queue"]},
            "spec": {
                "cohortName": "reservoir",
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {"name": names["flavor"], "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 1}]}
                        ],
                    }
                ],
            },
        },
    )
    # A flavor by hand under a name a pool will want.
    api.create_cluster_custom_object(
        KUEUE_GROUP,
        KUEUE_VERSION,
        "resourceflavors",
        {**FLAVOR, "metadata": {"name": names["taken"]}, "spec": {"nodeLabels": {"node-role": "theirs"}}},
    )
    yield names
    for plural, name in (
        ("clusterqueues", names["queue"]),
        ("resourceflavors", names["flavor"]),
        ("resourceflavors", names["taken"]),
    ):
        try:
            api.delete_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, name)
        except ApiException as error:
            if error.status != 404:
                raise


def test_objects_the_portal_did_not_create_are_left_alone(hand_made):
    outcome = kueue.reconcile()
    assert not any(hand_made["flavor"] in key or hand_made["queue"] in key for key in outcome)
    assert read("ResourceFlavor", hand_made["flavor"])["spec"]["nodeLabels"] == {"node-role": "hand"}
    assert read("ClusterQueue", hand_made["queue"])["spec"]["namespaceSelector"] == {}

    # A pool named like somebody's flavor: the portal reports it and does not take the flavor over.
    pool = pool_services.save_pool(
        pool=Pool(
            slug=hand_made["taken"],
            name="Taken",
            kind=PoolKind.SHARED,
            gpu_model="T4",
            node_selector={"node-role": "x"},
        )
    )
    state = projection.kueue_state()
    assert state["applied"] is False
    assert f"ResourceFlavor {hand_made['taken']} exists and was not created by the portal" in state["last_error"]
    assert read("ResourceFlavor", hand_made["taken"])["spec"]["nodeLabels"] == {"node-role": "theirs"}
    assert "app.kubernetes.io/managed-by" not in (
        read("ResourceFlavor", hand_made["taken"])["metadata"].get("labels") or {}
    )
    # Everything else was still written.
    assert read("ClusterQueue", f"pool-{pool.slug}-unreserved") is not None
    pool_services.delete_pool(pool=pool)
    assert projection.kueue_state()["applied"] is True
    assert KueueProjection.objects.get().last_error == ""


def test_reconcile_cluster_command_puts_every_queue_in_place(portal_cluster):
    """`make dev` runs it before the worker starts: the demo teams' namespaces, LocalQueues and ClusterQueues."""
    import io

    from django.core.management import call_command

    out = io.StringIO()
    call_command("reconcile_cluster", stdout=out)
    assert "the cluster holds what the portal says" in out.getvalue()
    api = client.custom_objects()
    for slug in ("llm", "vision", "speech"):
        api.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", f"team-{slug}", "localqueues", "reservoir")
        api.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", f"team-{slug}")


def raw_job(name: str, *, gpus: int, priority: str) -> dict:
    """A Job submitted around the portal into a team's LocalQueue, for the reserved A800 pool."""
    terms = [
        {
            "matchExpressions": [
                {"key": "scheduling.eks.ebcloud.com/node-pool", "operator": "In", "values": ["reserved"]}
            ]
        }
    ]
    resources = {"nvidia.com/gpu": str(gpus), "cpu": "1", "memory": "1Gi"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {"kueue.x-k8s.io/queue-name": "reservoir", "kueue.x-k8s.io/priority-class": priority},
        },
        "spec": {
            "suspend": True,
            "template": {
                "metadata": {"annotations": {KWOK_DELAY: "10m"}},
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [
                        {"key": "workload", "operator": "Equal", "value": "reserved", "effect": "NoSchedule"}
                    ],
                    "affinity": {
                        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
                    },
                    "containers": [
                        {"name": "main", "image": "busybox", "resources": {"requests": resources, "limits": resources}}
                    ],
                },
            },
        },
    }


def quota_reserved(namespace: str, job_name: str) -> tuple[str, str] | None:
    """(status, message) of the QuotaReserved condition of the Job's Workload, None before Kueue has looked."""
    items = client.custom_objects().list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads")
    for item in items["items"]:
        owners = item["metadata"].get("ownerReferences") or []
        if any(owner["name"] == job_name for owner in owners):
            for condition in (item.get("status") or {}).get("conditions") or []:
                if condition["type"] == "QuotaReserved":
                    return condition["status"], condition.get("message", "")
    return None


@pytest.fixture
def other_cluster_team(portal_cluster):
    """A second fresh team, made through the service (so Kueue gets its queues), deleted afterwards."""
    from pools import teams as team_services

    team = team_services.save_team(team=Team(slug=f"it-{uuid.uuid4().hex[:6]}", name="Other"))
    yield team
    delete_team_namespace(team.namespace)


def test_a_borrowing_job_never_preempts_another_teams_job(portal_cluster, cluster_team, other_cluster_team):
    """Both teams borrow from the pool's 8 unreserved GPUs; a high-priority job of one must wait for the other's
    low-priority job rather than preempt it (borrowWithinCohort's threshold is below every priority)."""
    a800 = Pool.objects.get(slug="reserved-a800")
    lend_none(a800)
    set_quota(cluster_team, a800, 8)
    set_quota(other_cluster_team, a800, 8)
    create_job_for_kueue(cluster_team.namespace, raw_job("low", gpus=4, priority="reservoir-low"))
    wait_for(lambda: (quota_reserved(cluster_team.namespace, "low") or ("",))[0] == "True", what="the low job admitted")

    create_job_for_kueue(other_cluster_team.namespace, raw_job("high", gpus=8, priority="reservoir-high"))
    verdict = wait_for(
        lambda: (quota_reserved(other_cluster_team.namespace, "high") or ("", ""))[1],
        what="Kueue's verdict on the other team's high-priority job",
    )
    assert "insufficient unused quota for nvidia.com/gpu in flavor reserved-a800" in verdict
    time.sleep(5)  # several scheduling cycles
    assert quota_reserved(cluster_team.namespace, "low")[0] == "True"
    assert quota_reserved(other_cluster_team.namespace, "high")[0] == "False"
    assert client.batch().read_namespaced_job("low", cluster_team.namespace).spec.suspend is False


def test_a_queue_the_portal_no_longer_wants_lends_nothing_while_kueue_holds_it(portal_cluster):
    """A team or pool gone: its ClusterQueue is deleted, and while Kueue keeps it (here a finalizer of the test's own
    stands for its last Workloads) it lends nothing to the cohort."""
    api = client.custom_objects()
    name = f"team-gone-{uuid.uuid4().hex[:5]}"
    gpus = {"name": "nvidia.com/gpu", "nominalQuota": "1", "borrowingLimit": "0", "lendingLimit": "1"}
    api.create_cluster_custom_object(
        KUEUE_GROUP,
        KUEUE_VERSION,
        "clusterqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {
                "name": name,
                "labels": {"app.kubernetes.io/managed-by": "reservoir", "reservoir.io/team": name[5:]},
                "finalizers": ["reservoir.test/hold"],
            },
            "spec": {
                "cohortName": "reservoir",
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}},
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [{"name": "reserved-a800", "resources": [gpus]}],
                    }
                ],
            },
        },
    )
    try:
        outcome = kueue.reconcile()
        assert outcome[f"ClusterQueue/{name}"] == "deleted"
        held = read("ClusterQueue", name)
        assert held["metadata"].get("deletionTimestamp")
        [gpu] = held["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
        assert (str(gpu["nominalQuota"]), str(gpu["lendingLimit"])) == ("1", "0")
        assert kueue.reconcile()[f"ClusterQueue/{name}"] == "deleting"  # and nothing more to write
    finally:
        api.patch_cluster_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", name, {"metadata": {"finalizers": None}}
        )
    wait_for(lambda: read("ClusterQueue", name) is None, timeout=30, what="the queue gone")


def test_a_queue_kueue_keeps_deleting_is_nudged_until_it_goes(portal_cluster):
    """Kueue v0.17.0 may keep a deleted ClusterQueue's finalizer although nothing uses it any more (an admission that
    failed because its Workload went with its namespace: kueue#10759); any change of the object makes Kueue look at
    it again. The reconcile leaves a queue alone while it has been deleting for less than
    `STUCK_DELETING_SECONDS`, then writes the time into an annotation at each reconcile until the queue is gone.
    (A finalizer of the test's own stands for Kueue's here: Kueue's race cannot be timed from a test.)"""
    import time_machine

    api = client.custom_objects()
    name = f"team-stuck-{uuid.uuid4().hex[:5]}"
    api.create_cluster_custom_object(
        KUEUE_GROUP,
        KUEUE_VERSION,
        "clusterqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {
                "name": name,
                "labels": {"app.kubernetes.io/managed-by": "reservoir", "reservoir.io/team": name[5:]},
                "finalizers": ["reservoir.test/hold"],
            },
            "spec": {"cohortName": "reservoir", "resourceGroups": []},
        },
    )
    try:
        assert kueue.reconcile()[f"ClusterQueue/{name}"] == "deleted"
        assert kueue.reconcile()[f"ClusterQueue/{name}"] == "deleting"
        annotations = read("ClusterQueue", name)["metadata"].get("annotations") or {}
        assert kueue.NUDGE_ANNOTATION not in annotations  # deleted a moment ago: Kueue is given its time
        later = timezone.now() + timedelta(seconds=kueue.STUCK_DELETING_SECONDS + 1)
        with time_machine.travel(later, tick=False):
            assert kueue.reconcile()[f"ClusterQueue/{name}"] == "deleting"
        nudged = read("ClusterQueue", name)["metadata"]["annotations"][kueue.NUDGE_ANNOTATION]
        assert nudged == later.isoformat()
    finally:
        api.patch_cluster_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", name, {"metadata": {"finalizers": None}}
        )
    wait_for(lambda: read("ClusterQueue", name) is None, timeout=30, what="the queue gone")
