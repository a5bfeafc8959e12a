"""When the submit task gives up (`SubmitTask.gave_up`, after CLUSTER_TASK_MAX_RETRIES transient failures or at the
first verdict), it used to fail the job whatever the cluster had made of it meanwhile. A create whose answer timed out
has often made the Job: Kueue admits it and the sync records it Admitted or Running, while every retry fails again
before the Job is recorded as made (an overloaded apiserver, the gang Service or the namespace step failing). Users saw
a healthy running job turn Failed ("could not create the Job in the cluster"), and convergence then deleted its Job.
Now a job Kueue has taken is never failed by the submit task: a transient failure leaves it to convergence's resend, a
verdict records the Job as made."""

import pytest
from django.utils import timezone

from cluster.errors import ClusterError, TransientClusterError
from jobs.choices import JobState
from jobs.models import Job, Workload
from reconcile.tasks import submit_job_to_cluster
from tests.factories import JobFactory, PoolFactory, TeamFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def team_and_pool():
    return TeamFactory(slug="alpha"), PoolFactory(slug="train")


def test_a_job_the_cluster_already_runs_is_not_failed_when_its_submit_task_gives_up(team_and_pool):
    team, pool = team_and_pool
    # The first create reached the apiserver but its answer timed out: the Job exists, Kueue admitted it and the sync
    # saw its pod run; no retry of the task got far enough to record `cluster_created_at`.
    job = JobFactory(
        team=team,
        pool=pool,
        state=JobState.RUNNING,
        started_at=timezone.now(),
        node_name="gpu-a",
        cluster_created_at=None,
    )

    submit_job_to_cluster.gave_up(TransientClusterError("apiserver did not answer in time"), job.pk)

    job.refresh_from_db()
    assert job.state == JobState.RUNNING, job.last_error
    assert job.cluster_created_at is None  # left to convergence, which finishes the submission
    assert "will be sent again" in job.last_error


def test_a_verdict_on_a_job_kueue_holds_records_its_job_as_made(team_and_pool):
    team, pool = team_and_pool
    job = JobFactory(team=team, pool=pool, state=JobState.QUEUED, cluster_created_at=None)
    Workload.objects.create(
        uid="wl-1", namespace=team.namespace, name="job-rsv-1", job=job, created_at=timezone.now()
    )  # waiting in Kueue's queue: its Job exists

    submit_job_to_cluster.gave_up(ClusterError("apiserver answered 403 Forbidden", status=403), job.pk)

    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.cluster_created_at is not None
    assert job.events.filter(message__contains="403 Forbidden").exists()


def test_a_verdict_on_a_job_the_cluster_never_took_fails_it_with_the_reason(team_and_pool):
    team, pool = team_and_pool
    job = JobFactory(team=team, pool=pool, state=JobState.QUEUED, cluster_created_at=None)

    submit_job_to_cluster.gave_up(ClusterError("apiserver answered 422 Unprocessable Entity", status=422), job.pk)

    job = Job.objects.get(pk=job.pk)
    assert job.state == JobState.FAILED
    assert job.last_error == "could not create the Job in the cluster: apiserver answered 422 Unprocessable Entity"
