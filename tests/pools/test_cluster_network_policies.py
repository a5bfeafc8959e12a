"""Team namespaces' network isolation on the real local cluster (issue 24): the portal makes each team namespace's
NetworkPolicies, one per multi-node job for its rendezvous port, puts them back when edited, and deletes a job's
when the job is over.

The local cluster's KWOK nodes have no pod network, so nothing enforces a policy here: these tests read the policies
the apiserver holds and the pods the portal's Jobs made (as listed from the apiserver, with the labels the Job
controller gave them) and evaluate the policies' podSelectors and peers against those pods with tests/netpolicy.py,
a reference of the NetworkPolicy semantics. What they prove is that the objects exist and select the right pods; that
a CNI enforces them is the cluster's part."""

import pytest

from cluster import client
from jobs import services as job_services
from jobs.specs import JobSpec
from pools.models import Pool
from portal.models import AuditEntry
from reconcile import namespaces
from tests.clusterkit import KWOK_DELAY, integration_team, set_quota, wait_for
from tests.netpolicy import Pod, allows_ingress, selects

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

RENDEZVOUS = 29500


@pytest.fixture
def second_team(portal_cluster):
    yield from integration_team("Second")


def submit(team, *, nodes=1, name="job"):
    spec = JobSpec(
        name=name,
        image="registry.example.com/research/train:1.0",
        gpus=1,
        nodes=nodes,
        command=["torchrun", "train.py"],
        pod_annotations={KWOK_DELAY: "10m"},
    )
    return job_services.submit_job(team=team, pool=Pool.objects.get(slug="training"), user=team.researcher, spec=spec)


def policies_of(namespace: str) -> list[dict]:
    api = client.networking()
    items = api.list_namespaced_network_policy(namespace).items
    return [client.api_client().sanitize_for_serialization(item) for item in items]


def pods_of(*namespaces_: str) -> list[Pod]:
    core = client.core()
    return [
        Pod(name=pod.metadata.name, namespace=pod.metadata.namespace, labels=pod.metadata.labels or {})
        for namespace in namespaces_
        for pod in core.list_namespaced_pod(namespace).items
    ]


def test_only_a_gangs_own_pods_reach_its_rendezvous_and_other_teams_reach_nothing(
    portal_cluster, cluster_team, second_team
):
    training = Pool.objects.get(slug="training")
    set_quota(cluster_team, training, 3)
    set_quota(second_team, training, 1)
    gang = submit(cluster_team, nodes=2, name="gang")
    single = submit(cluster_team, name="single")
    theirs = submit(second_team, name="theirs")
    ours, other = cluster_team.namespace, second_team.namespace

    def job_pods():
        pods = pods_of(ours, other)
        by_job = {
            job.pk: [pod for pod in pods if pod.labels.get("reservoir.io/job-id") == str(job.pk)]
            for job in (gang, single, theirs)
        }
        return by_job if [len(by_job[job.pk]) for job in (gang, single, theirs)] == [2, 1, 1] else None

    by_job = wait_for(job_pods, timeout=90, what="the pods of the three jobs")
    (rank0, rank1), (neighbour,), (stranger,) = by_job[gang.pk], by_job[single.pk], by_job[theirs.pk]
    rules = policies_of(ours) + policies_of(other)
    assert {policy["metadata"]["name"] for policy in policies_of(ours)} == {
        "reservoir-isolation",
        "reservoir-gang-isolation",
        f"rsv-{gang.pk}-rendezvous",
    }
    core = client.core()
    labels = {name: core.read_namespace(name).metadata.labels for name in (ours, other)}

    def reaches(source, target, port):
        return allows_ingress(rules, source=source, target=target, port=port, namespaces=labels)

    # The gang's rendezvous: its own pods only.
    assert reaches(rank1, rank0, RENDEZVOUS) and reaches(rank0, rank1, RENDEZVOUS)
    assert not reaches(neighbour, rank0, RENDEZVOUS)
    assert not reaches(stranger, rank0, RENDEZVOUS)
    # The team's pods reach each other on other ports (NCCL), another team's pods reach none of them.
    assert reaches(neighbour, rank0, 43211) and reaches(rank0, neighbour, 8080)
    assert not reaches(stranger, rank0, 43211) and not reaches(stranger, neighbour, 8080)
    assert not reaches(neighbour, stranger, 8080) and not reaches(rank0, stranger, RENDEZVOUS)
    # Every pod of both namespaces is held by exactly one standing policy.
    standing = [p for p in rules if p["metadata"]["name"] in ("reservoir-isolation", "reservoir-gang-isolation")]
    for pod in pods_of(ours, other):
        assert sum(selects(policy, pod) for policy in standing) == 1, pod
    # Egress stays open by default: no policy restricts it.
    assert all(policy["spec"]["policyTypes"] == ["Ingress"] for policy in rules)

    # Once the gang is cancelled its policy goes (the delete task, and the namespace reconcile for any left over).
    job_services.cancel_job(job=gang, user=cluster_team.researcher)
    wait_for(
        lambda: f"rsv-{gang.pk}-rendezvous" not in {p["metadata"]["name"] for p in policies_of(ours)},
        what="the cancelled gang's policy to be deleted",
    )
    assert f"NetworkPolicy/rsv-{gang.pk}-rendezvous" not in namespaces.reconcile(cluster_team)


def test_network_policies_edited_or_deleted_by_hand_are_put_back_and_only_the_portals_are_removed(
    portal_cluster, cluster_team
):
    set_quota(cluster_team, Pool.objects.get(slug="training"), 2)  # reconciles the namespace
    namespace = cluster_team.namespace
    outcome = namespaces.reconcile(cluster_team)
    assert outcome["NetworkPolicy/reservoir-isolation"] == "unchanged"
    assert outcome["NetworkPolicy/reservoir-gang-isolation"] == "unchanged"
    api = client.networking()
    # Someone opens the namespace to every pod of the cluster: put back, and said so.
    policy = api.read_namespaced_network_policy("reservoir-isolation", namespace)
    policy.spec.ingress = [{}]
    api.replace_namespaced_network_policy("reservoir-isolation", namespace, policy)
    api.delete_namespaced_network_policy("reservoir-gang-isolation", namespace)
    # A policy of a job that does not exist (left over), and one the portal did not make.
    stray = {
        "metadata": {
            "name": "rsv-999999-rendezvous",
            "labels": {"app.kubernetes.io/managed-by": "reservoir", "reservoir.io/job-id": "999999"},
        },
        "spec": {"podSelector": {}, "ingress": [{}]},
    }
    theirs = {"metadata": {"name": "allow-monitoring"}, "spec": {"podSelector": {}, "ingress": [{}]}}
    api.create_namespaced_network_policy(namespace, stray)
    api.create_namespaced_network_policy(namespace, theirs)

    outcome = namespaces.reconcile(cluster_team)
    assert outcome["NetworkPolicy/reservoir-isolation"] == "corrected"
    assert outcome["NetworkPolicy/reservoir-gang-isolation"] == "created"
    assert outcome["NetworkPolicy/rsv-999999-rendezvous"] == "deleted"
    names = {item["metadata"]["name"] for item in policies_of(namespace)}
    assert names == {"reservoir-isolation", "reservoir-gang-isolation", "allow-monitoring"}
    restored = client.api_client().sanitize_for_serialization(
        api.read_namespaced_network_policy("reservoir-isolation", namespace)
    )
    assert restored["spec"]["ingress"] == [{"from": [{"podSelector": {}}]}]
    entry = AuditEntry.objects.get(action="namespace.networkpolicy_put_back", object_id=str(cluster_team.pk))
    assert entry.before["ingress"] == [{}]
    assert all(value == "unchanged" for value in namespaces.reconcile(cluster_team).values())
