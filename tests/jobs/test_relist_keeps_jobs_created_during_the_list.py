"""A relist of the portal's Jobs used to fail, as "deleted from the cluster outside the portal", healthy jobs whose Job
was created after the list's snapshot, as soon as fetching and recording the list took longer than
`reconcile.sync.JUST_CREATED` (30 s): the cutoff was counted from when the list had been recorded. Convergence then
deleted their still-running Jobs. At the scale PRODUCT.md asks for (~24,000 Jobs kept by their TTL, 48 pages) a relist
takes that long, and the sync relists at every start and after an apiserver restart. The cutoff now counts from when
the list asked for its first page (`ListWatch.on_list_start`)."""

import json
import threading
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone

from jobs.choices import JobState
from jobs.models import Job
from reconcile.management.commands import sync_cluster
from reconcile.sync import ClusterSync
from tests.factories import JobFactory, PoolFactory, TeamFactory

pytestmark = pytest.mark.django_db


class Response:
    def __init__(self, body: dict):
        self.data = json.dumps(body).encode()

    def release_conn(self):
        pass


def k8s_job(job) -> dict:
    return {
        "metadata": {
            "namespace": job.team.namespace,
            "name": job.job_name,
            "labels": {"reservoir.io/job-id": str(job.pk), "app.kubernetes.io/managed-by": "reservoir"},
        },
        "status": {},
    }


def test_a_job_created_after_the_lists_snapshot_is_not_failed_by_a_long_relist(monkeypatch):
    pool, team = PoolFactory(slug="train"), TeamFactory(slug="alpha")
    start = timezone.now()
    clock = {"now": start}
    monkeypatch.setattr(timezone, "now", lambda: clock["now"])

    listed = JobFactory(team=team, pool=pool, state=JobState.RUNNING, cluster_created_at=start - timedelta(hours=1))
    # Control: created well before the snapshot and in no page of it, so its Job really is gone.
    vanished = JobFactory(team=team, pool=pool, state=JobState.RUNNING, cluster_created_at=start - timedelta(minutes=2))
    # Submitted a moment after the list's first page (its snapshot) was served: its Job is in no page of that list.
    newcomer = JobFactory(team=team, pool=pool, state=JobState.RUNNING, cluster_created_at=start + timedelta(seconds=5))

    lock = threading.Lock()

    def list_jobs(**kwargs):
        with lock:
            if not kwargs.get("_continue"):  # page 1: the snapshot, served at `start`
                return Response(
                    {
                        "kind": "JobList",
                        "apiVersion": "batch/v1",
                        "metadata": {"resourceVersion": "100", "continue": "page-2"},
                        "items": [k8s_job(listed)],
                    }
                )
            # The rest of a large list (thousands of Jobs, many pages) comes 45 s later, from the same snapshot.
            clock["now"] = start + timedelta(seconds=45)
            return Response(
                {"kind": "JobList", "apiVersion": "batch/v1", "metadata": {"resourceVersion": "100"}, "items": []}
            )

    def unused(*args, **kwargs):
        raise AssertionError("only the jobs are listed here")

    fake_client = SimpleNamespace(
        core=lambda: SimpleNamespace(list_node=unused, list_pod_for_all_namespaces=unused),
        batch=lambda: SimpleNamespace(list_job_for_all_namespaces=list_jobs),
        custom_objects=lambda: SimpleNamespace(list_cluster_custom_object=unused),
    )
    monkeypatch.setattr(sync_cluster, "client", fake_client)
    watches = {watch.name: watch for watch in sync_cluster.build_watches(ClusterSync(), threading.Event())}

    watches["jobs"].relist()

    assert Job.objects.get(pk=listed.pk).state == JobState.RUNNING
    vanished.refresh_from_db()
    assert vanished.state == JobState.FAILED and "outside the portal" in vanished.last_error
    newcomer.refresh_from_db()
    # Its Job was created after the snapshot: the list cannot say it is gone.
    assert newcomer.state == JobState.RUNNING, newcomer.last_error
