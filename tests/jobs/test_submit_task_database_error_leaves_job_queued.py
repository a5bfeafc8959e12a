"""A submit task that stops on a database error leaves the accepted job Queued for convergence to send again; only the
apiserver's verdict fails it.

Users saw: PostgreSQL refused the submit task a connection for a moment (restarting, "too many clients", a statement
cancelled by an operator), and their accepted job went to Failed with "could not create the Job in the cluster:
OperationalError: ..."; it never ran (and had its Job been made, convergence deleted it). `SubmitTask.gave_up` took
every error that was not a transient cluster failure for a verdict. PRODUCT.md, "Promises under failure": accepted
means persisted and reaches the cluster without anyone's help; docs/failures.md: only a verdict (400, 403, 422, an
invalid spec) fails a job at once.

The real task runs (eager, as the sibling tests in tests/jobs run it); its first database query fails as a refused
connection would, the next ones work (the database is back by the time the task gives up). The positive control: a
Job the apiserver refuses (422) through the same task still fails the job."""

import pytest
from django.db import OperationalError
from django.utils import timezone

from cluster import kueue_objects, resources
from cluster.errors import ClusterError
from jobs.choices import JobState
from jobs.models import Job
from pools.models import TeamNamespace
from reconcile import jobs as reconcile_jobs
from reconcile.tasks import submit_job_to_cluster
from tests.factories import JobFactory, PoolFactory, TeamFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(monkeypatch):
    made: list[str] = []

    def create_job(manifest: dict) -> bool:
        made.append(manifest["metadata"]["name"])
        return True

    monkeypatch.setattr(resources, "create_job", create_job)
    monkeypatch.setattr(
        kueue_objects,
        "read_kueue_object",
        lambda kind, name, namespace=None: {
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": "2026-01-01T00:00:00Z"}
        },
    )
    monkeypatch.setattr(reconcile_jobs, "_queues_seen", {})
    # A worker: the task's failure is its result, not an exception in the caller.
    monkeypatch.setitem(submit_job_to_cluster.app.conf, "task_eager_propagates", False)
    return made


def test_a_database_hiccup_in_the_submit_task_does_not_fail_the_accepted_job(cluster, monkeypatch):
    team = TeamFactory(slug="alpha")
    TeamNamespace.objects.create(team=team, desired_version=1, applied_version=1, applied_at=timezone.now())
    job = JobFactory(team=team, pool=PoolFactory(), state=JobState.QUEUED, cluster_created_at=None)

    real_unsent = reconcile_jobs._unsent
    calls = {"n": 0}

    def unsent_once_refused(job_id):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OperationalError("connection failed: FATAL:  sorry, too many clients already")
        return real_unsent(job_id)

    monkeypatch.setattr(reconcile_jobs, "_unsent", unsent_once_refused)

    result = submit_job_to_cluster.apply(args=[job.pk])
    assert result.failed()  # the task itself stopped on the database error

    job = Job.objects.get(pk=job.pk)
    # Nothing was refused by the cluster: the job stays Queued for convergence to send again, and says so.
    assert job.state == JobState.QUEUED, f"job {job.state}: {job.last_error}"
    assert "too many clients" in job.last_error and "sent again" in job.last_error


def test_a_job_the_apiserver_refuses_still_fails(cluster, monkeypatch):
    team = TeamFactory(slug="alpha")
    TeamNamespace.objects.create(team=team, desired_version=1, applied_version=1, applied_at=timezone.now())
    job = JobFactory(team=team, pool=PoolFactory(), state=JobState.QUEUED, cluster_created_at=None)

    def refused(manifest: dict) -> bool:
        raise ClusterError("apiserver answered 422 Unprocessable Entity: spec.template is invalid", status=422)

    monkeypatch.setattr(resources, "create_job", refused)

    result = submit_job_to_cluster.apply(args=[job.pk])
    assert result.failed()

    job = Job.objects.get(pk=job.pk)
    assert job.state == JobState.FAILED
    assert "422" in job.last_error
