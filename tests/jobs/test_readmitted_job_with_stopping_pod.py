"""A preempted job that Kueue admitted again while its old pod was still stopping (deletionTimestamp set, phase still
Running, within its grace period) was shown Running, on the old pod's node, although its only pod left was being
killed and its new pod had not even been placed; a gang's stopping pods counted among those that run. Kueue gives a
job's quota back as soon as its pods are being deleted (docs/kueue.md, "Stopping pods"), so this happens whenever the
preempted job is admitted again quickly. Now pods being deleted are not the job's live pods (`settling._live_pods`)."""

from dataclasses import replace
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.choices import JobState
from jobs.models import Job
from tests.factories import JobFactory
from tests.jobs.test_sync_routing import kueue_workload, pod, world  # noqa: F401 - `world` is a fixture

pytestmark = pytest.mark.django_db


def test_a_readmitted_job_whose_old_pod_is_stopping_is_not_running(world):  # noqa: F811
    sync, _pool, alpha, _beta, job = world
    admitted = kueue_workload("wl-1", alpha.namespace, job, pods_ready=True)
    sync.workload_event("MODIFIED", admitted)
    running = pod("p1", alpha.namespace, node_name="gpu-a", job_id=job.pk, owner=job.job_name)
    sync.pod_event("MODIFIED", running)
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING

    # Kueue preempts it: the Workload is evicted and loses its admission, the Job is suspended and its pod deleted
    # (it checkpoints within its grace period: still phase Running, with a deletionTimestamp).
    evicted = replace(
        admitted,
        admitted=False,
        quota_reserved=False,
        evicted_reason="Preempted",
        evicted_message="Preempted to accommodate a workload",
        requeue_count=1,
    )
    sync.workload_event("MODIFIED", evicted)
    sync.pod_event("MODIFIED", replace(running, deleting=True))
    assert Job.objects.get(pk=job.pk).state == JobState.QUEUED

    # Kueue admits it again while the old pod still stops; the Job controller makes a new pod, not placed yet.
    sync.workload_event("MODIFIED", replace(admitted, requeue_count=1))
    sync.pod_event("ADDED", pod("p2", alpha.namespace, phase="Pending", job_id=job.pk, owner=job.job_name))

    job.refresh_from_db()
    # Its pod waits for a node: Pending, not Running on the node of the pod that is being killed.
    assert job.state == JobState.PENDING, (job.state, job.node_name, job.events.latest("pk").message)

    # Once the new pod runs, the job runs (the stopping pod changes nothing of that).
    sync.pod_event("MODIFIED", pod("p2", alpha.namespace, node_name="gpu-a", job_id=job.pk, owner=job.job_name))
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING


def test_a_readmitted_gangs_stopping_pods_do_not_count_among_those_that_run(world):  # noqa: F811
    sync, pool, alpha, _beta, _job = world
    gang = JobFactory(
        team=alpha, pool=pool, nodes=2, state=JobState.QUEUED, cluster_created_at=timezone.now() - timedelta(hours=1)
    )
    sync.workload_event("MODIFIED", kueue_workload("wl-g", alpha.namespace, gang, pods_ready=False))

    def gang_pod(uid, **kwargs):
        return pod(uid, alpha.namespace, job_id=gang.pk, owner=gang.job_name, **kwargs)

    # Its two old pods still stop; of its two new ones, one runs and one waits for a node.
    stopping = [replace(gang_pod(uid, node_name="gpu-a"), deleting=True) for uid in ("old-0", "old-1")]
    sync.pod_events([("MODIFIED", p) for p in stopping])
    sync.pod_events([("ADDED", gang_pod("new-0", node_name="gpu-a")), ("ADDED", gang_pod("new-1", phase="Pending"))])

    gang.refresh_from_db()
    assert gang.state == JobState.PENDING, gang.pending_reason  # one of its two pods runs: not all of them

    sync.pod_event("MODIFIED", gang_pod("new-1", node_name="gpu-a"))
    assert Job.objects.get(pk=gang.pk).state == JobState.RUNNING
