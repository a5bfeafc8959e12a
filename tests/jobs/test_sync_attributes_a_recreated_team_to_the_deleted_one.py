"""A team deleted while the sync runs, then made again with the same slug: what users saw was a metering outage.

The sync caches namespace -> team id (`reconcile.sync.Attribution`). Deleting a team leaves its namespace in the cluster
on purpose ("a team made later with the same slug would find them there"), and the cache kept naming the deleted
team for it. The new team's first GPU pod was recorded under the deleted team's id; the batch broke the pods' foreign
key to the team at commit, the watch read the same events again and failed again, and from then on no pod of any team
was recorded and no GPU time metered, until someone restarted the sync. The new team's own jobs were meanwhile taken
for foreign objects (their namespace was not their team's), so Kueue's admissions never reached their pages.

No cluster: the sync's handlers are given the facts as the watches would parse them."""

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import UsageInterval
from cluster.facts import PodFacts, workload_facts
from jobs.choices import JobState
from jobs.models import Pod
from pools import teams as team_services
from portal.models import Team
from reconcile.sync import ClusterSync
from tests.factories import JobFactory, NodeFactory, PoolFactory


def gpu_pod(namespace: str, node: str, *, uid: str = "0f5c7a52-1111-4c7e-9d5e-000000000001") -> PodFacts:
    started = timezone.now() - timedelta(minutes=5)
    return PodFacts(
        uid=uid,
        namespace=namespace,
        name=f"train-{uid[-1]}",
        job_id=None,
        owner_job="",
        node_name=node,
        gpus=4,
        phase="Running",
        scheduled=True,
        pending_reason="",
        created_at=started,
        bound_at=started,
        finished_at=None,
    )


@pytest.fixture
def no_reconcile(monkeypatch):
    """Team writes send the Kueue reconcile once committed: not here (no cluster)."""
    monkeypatch.setattr("reconcile.tasks.reconcile_kueue.delay", lambda version=None: None)
    monkeypatch.setattr("reconcile.tasks.reconcile_team_namespace.delay", lambda team_id: None)


@pytest.fixture
def node():
    NodeFactory(name="gpu-1", pool=PoolFactory(slug="a800"))
    return "gpu-1"


# A transactional database: the foreign-key check fires at commit, as it does in the running sync.
@pytest.mark.django_db(transaction=True)
def test_the_pods_of_a_team_made_again_with_a_deleted_teams_slug_are_its_own(no_reconcile, node):
    first = team_services.save_team(team=Team(slug="vision", name="Vision"))
    sync = ClusterSync()  # the running sync has seen the team
    team_services.delete_team(team=first)
    again = team_services.save_team(team=Team(slug="vision", name="Vision again"))

    sync.pod_events([("ADDED", gpu_pod(again.namespace, node))])

    assert Pod.objects.get(name="train-1").team_id == again.pk
    assert UsageInterval.objects.get().team_id == again.pk


@pytest.mark.django_db(transaction=True)
def test_a_pod_left_in_a_deleted_teams_namespace_is_no_teams_and_the_others_are_still_recorded(no_reconcile, node):
    gone = team_services.save_team(team=Team(slug="vision", name="Vision"))
    staying = team_services.save_team(team=Team(slug="speech", name="Speech"))
    sync = ClusterSync()
    team_services.delete_team(team=gone)

    sync.pod_events(
        [
            ("ADDED", gpu_pod(gone.namespace, node, uid="0f5c7a52-1111-4c7e-9d5e-000000000001")),
            ("ADDED", gpu_pod(staying.namespace, node, uid="0f5c7a52-1111-4c7e-9d5e-000000000002")),
        ]
    )

    assert dict(Pod.objects.values_list("name", "team_id")) == {"train-1": None, "train-2": staying.pk}


@pytest.mark.django_db
def test_the_jobs_of_a_team_made_again_with_a_deleted_teams_slug_are_its_own(no_reconcile, node):
    first = team_services.save_team(team=Team(slug="vision", name="Vision"))
    sync = ClusterSync()
    team_services.delete_team(team=first)
    again = team_services.save_team(team=Team(slug="vision", name="Vision again"))
    job = JobFactory(team=again, pool=PoolFactory(slug="h100"), state=JobState.QUEUED)
    admitted = "2026-03-02T10:00:05Z"
    workload = workload_facts(
        {
            "metadata": {
                "uid": "wl-1",
                "namespace": again.namespace,
                "name": f"job-{job.job_name}-y",
                "creationTimestamp": admitted,
                "ownerReferences": [{"kind": "Job", "name": job.job_name}],
            },
            "spec": {"priority": 5000},
            "status": {
                "conditions": [
                    {"type": "QuotaReserved", "status": "True", "lastTransitionTime": admitted},
                    {"type": "Admitted", "status": "True", "lastTransitionTime": admitted},
                ],
                "admission": {
                    "clusterQueue": "team-vision",
                    "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "h100"}}],
                },
            },
        }
    )

    sync.workload_events([("ADDED", workload)])

    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
