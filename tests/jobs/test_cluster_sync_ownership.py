"""A `reservoir.io/job-id` label proves nothing (issue 14): on the real cluster, Jobs and pods that carry another
job's id — a copy of its Job in another team's namespace, bare pods in either namespace — never move that job,
and are still metered to the team of their own namespace. Also: the job page's live event read, against real
events."""

import uuid

import pytest

from billing.models import UsageInterval
from cluster import client, live
from jobs import services
from jobs.choices import JobState
from jobs.manifests import render
from jobs.models import Job, Pod
from jobs.specs import JobSpec
from pools.models import Node, Pool
from portal.models import Team
from reconcile.namespaces import reconcile
from tests.clusterkit import KWOK_DELAY, create_job_for_kueue, delete_team_namespace, job_state, set_quota, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def submit(team, pool_slug, *, name, runs_for):
    spec = JobSpec(
        name=name,
        image="registry.example.com/research/train:1.0",
        gpus=1,
        command=["python", "train.py"],
        pod_annotations={KWOK_DELAY: runs_for},
    )
    return services.submit_job(team=team, pool=Pool.objects.get(slug=pool_slug), user=team.researcher, spec=spec)


@pytest.fixture
def other_team(portal_cluster):
    """A second team with GPU quota and its own namespace; the namespace is deleted afterwards."""
    team = Team.objects.create(slug=f"it-{uuid.uuid4().hex[:6]}", name="Other")
    for slug in ("reserved-a800", "training"):
        set_quota(team, Pool.objects.get(slug=slug), 8)
    reconcile(team)
    yield team
    delete_team_namespace(team.namespace)


def bare_pod(name: str, job_id: int, *, node_name: str = "", node_selector: dict | None = None) -> dict:
    spec = {
        "containers": [
            {"name": "c", "image": "registry.example.com/x:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        ],
        "tolerations": [{"operator": "Exists"}],
    }
    if node_name:
        spec["nodeName"] = node_name
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"metadata": {"name": name, "labels": {"reservoir.io/job-id": str(job_id)}}, "spec": spec}


def pod_status(namespace: str, name: str):
    return client.core().read_namespaced_pod(name, namespace).status


def test_jobs_and_pods_faking_a_job_id_change_nothing_and_are_metered_to_their_own_team(
    cluster_sync, cluster_team, other_team
):
    core, batch = client.core(), client.batch()
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    victim = submit(cluster_team, "reserved-a800", name="victim", runs_for="10m")
    wait_for(lambda: job_state(victim.pk) == JobState.RUNNING, what="the victim to run")
    victim = Job.objects.get(pk=victim.pk)
    before = (victim.state, victim.node_name, victim.pending_reason)

    # 1. A copy of the victim's own Job (same name, same labels) in the other team's namespace; it completes.
    copied = render(victim)
    copied["metadata"]["namespace"] = other_team.namespace
    copied["spec"]["template"]["metadata"]["annotations"][KWOK_DELAY] = "1s"
    create_job_for_kueue(other_team.namespace, copied)
    wait_for(
        lambda: (batch.read_namespaced_job(victim.job_name, other_team.namespace).status.succeeded or 0) == 1,
        timeout=60,
        what="the copied Job to complete in the cluster",
    )
    # 2. Bare pods carrying the victim's id: one running on a training node in the other namespace, one the
    #    scheduler cannot place in the victim's own namespace (no Job controls either).
    training_node = Node.objects.filter(pool__slug="training").order_by("name").values_list("name", flat=True)[0]
    core.create_namespaced_pod(other_team.namespace, bare_pod("fake-running", victim.pk, node_name=training_node))
    core.create_namespaced_pod(
        cluster_team.namespace, bare_pod("fake-pending", victim.pk, node_selector={"no-such-node": "true"})
    )
    wait_for(lambda: pod_status(other_team.namespace, "fake-running").phase == "Running", what="the fake pod to run")
    wait_for(
        lambda: any(
            c.type == "PodScheduled" for c in pod_status(cluster_team.namespace, "fake-pending").conditions or []
        ),
        what="the scheduler to refuse the fake pending pod",
    )
    # 3. The copied Job goes away (its deletion must not fail the victim).
    batch.delete_namespaced_job(victim.job_name, other_team.namespace, propagation_policy="Background")

    # Everything above happened before this short job of the victim's team: once the sync has recorded its end
    # (the Job watch) and its pod's closed interval (the pod watch), it has handled every event above.
    marker = submit(cluster_team, "reserved-a800", name="marker", runs_for="1s")
    wait_for(lambda: job_state(marker.pk) == JobState.SUCCEEDED, timeout=60, what="the marker job to finish")
    wait_for(
        lambda: UsageInterval.objects.filter(job_id=marker.pk, ended_at__isnull=False).exists(),
        what="the marker's interval to close",
    )

    victim = Job.objects.get(pk=victim.pk)
    assert (victim.state, victim.node_name, victim.pending_reason) == before
    assert not victim.events.filter(message__icontains="outside the portal").exists()
    fakes = {p.name: p for p in Pod.objects.filter(name__in=["fake-running", "fake-pending"])}
    assert set(fakes) == {"fake-running", "fake-pending"}
    assert fakes["fake-running"].job_id is None and fakes["fake-running"].team_id == other_team.pk
    assert fakes["fake-running"].pool.slug == "training"
    assert fakes["fake-pending"].job_id is None and fakes["fake-pending"].team_id == cluster_team.pk
    metered = UsageInterval.objects.get(pod_name="fake-running")
    assert (metered.team_id, metered.job_id, metered.pool.slug) == (other_team.pk, None, "training")
    assert set(Pod.objects.filter(job=victim).values_list("namespace", flat=True)) == {cluster_team.namespace}

    # The job page's events come from the real cluster, bounded: the Job controller created the victim's pod.
    events = live.events_for(cluster_team.namespace, "Job", victim.job_name)
    assert "SuccessfulCreate" in {event.reason for event in events}
    assert all(event.object_kind == "Job" for event in events)
