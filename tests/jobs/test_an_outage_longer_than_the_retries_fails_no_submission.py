"""An apiserver (or Kueue webhook) outage that outlasts the submit task's retries used to fail every job submitted
during it ("could not create the Job in the cluster"), although PRODUCT.md promises that accepted work reaches the
cluster without anyone's help once the service is back. Now a submission that runs out of retries on a transient
failure stays Queued, saying the cluster is unreachable and that it will be sent again, and convergence's resend
creates its Job once the apiserver answers: one Job, also when a create whose answer was lost had made it already. A
verdict (the apiserver refusing the Job) still fails the job at once.

The real task chain runs (eager, retried one attempt after the other as a worker would, without the countdowns); the
cluster is faked where the portal calls it (`cluster.resources`, `cluster.kueue_objects`)."""

from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from cluster import kueue_objects, resources
from cluster.errors import ClusterError, TransientClusterError
from jobs.choices import JobState
from jobs.models import Job
from pools.models import TeamNamespace
from reconcile import jobs as convergence
from reconcile.tasks import submit_job_to_cluster
from tests.factories import JobFactory, PoolFactory, TeamFactory

pytestmark = pytest.mark.django_db


class FakeCluster:
    """Jobs by (namespace, name). While down every call fails as the apiserver would when unreachable; `lost_answer`
    names Jobs whose first create is made but its answer lost (a timeout)."""

    def __init__(self):
        self.up = False
        self.jobs: set[tuple[str, str]] = set()
        self.creates: list[str] = []
        self.lost_answer: set[str] = set()
        self.refuse: set[str] = set()

    def create_job(self, manifest: dict) -> bool:
        key = (manifest["metadata"]["namespace"], manifest["metadata"]["name"])
        self.creates.append(key[1])
        if key[1] in self.refuse:
            raise ClusterError("apiserver answered 422 Unprocessable Entity: spec is invalid", status=422)
        if key[1] in self.lost_answer:
            self.lost_answer.discard(key[1])
            self.jobs.add(key)
            raise TransientClusterError("apiserver did not answer in time")
        if not self.up:
            raise TransientClusterError("apiserver unreachable: MaxRetryError")
        if key in self.jobs:
            return False  # AlreadyExists
        self.jobs.add(key)
        return True

    def read_kueue_object(self, kind, name, namespace=None):
        if not self.up and kind != "LocalQueue":
            raise TransientClusterError("apiserver unreachable: MaxRetryError")
        return {"metadata": {"name": name, "namespace": namespace, "creationTimestamp": "2026-01-01T00:00:00Z"}}

    def managed_job_pages(self, **kwargs):
        return iter([])


@pytest.fixture
def cluster(monkeypatch):
    fake = FakeCluster()
    monkeypatch.setattr(resources, "create_job", fake.create_job)
    monkeypatch.setattr(resources, "managed_job_pages", fake.managed_job_pages)
    monkeypatch.setattr(kueue_objects, "read_kueue_object", fake.read_kueue_object)
    monkeypatch.setattr(convergence, "_queues_seen", {})
    # The task chain retries one attempt after the other, as a worker would, and gives up with the error as result.
    monkeypatch.setitem(submit_job_to_cluster.app.conf, "task_eager_propagates", False)
    return fake


@pytest.fixture
def team():
    team = TeamFactory(slug="alpha")
    TeamNamespace.objects.create(team=team, desired_version=1, applied_version=1, applied_at=timezone.now())
    return team


def _submitted(team, **kwargs) -> Job:
    return JobFactory(team=team, pool=PoolFactory(), state=JobState.QUEUED, cluster_created_at=None, **kwargs)


def _later() -> timezone.datetime:
    return timezone.now() + timedelta(seconds=django_settings.CONVERGENCE_GRACE_SECONDS + 1)


def test_a_submission_that_outlasts_its_retries_is_sent_again_once_the_cluster_is_back(
    cluster, team, django_capture_on_commit_callbacks
):
    lost = _submitted(team)  # every create fails: the Job was never made
    made = _submitted(team)  # the first create made the Job, but its answer was lost
    cluster.lost_answer.add(made.job_name)

    for job in (lost, made):
        gave_up = submit_job_to_cluster.apply(args=[job.pk])
        assert gave_up.failed() and isinstance(gave_up.result, TransientClusterError)
    attempts = django_settings.CLUSTER_TASK_MAX_RETRIES + 1
    assert cluster.creates.count(lost.job_name) == attempts  # the chain ran out of retries
    for job in (lost, made):
        job.refresh_from_db()
        assert job.state == JobState.QUEUED and job.cluster_created_at is None
        assert "unreachable" in job.last_error and "sent again" in job.last_error

    # Still down: convergence resends after the grace, and the resent chain gives up again without failing anything.
    with django_capture_on_commit_callbacks(execute=True):
        assert sorted(convergence.converge(now=_later())["resent"]) == sorted([lost.pk, made.pk])
    assert Job.objects.get(pk=lost.pk).state == JobState.QUEUED

    cluster.up = True  # the apiserver is back
    cluster.creates.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert sorted(convergence.converge(now=_later())["resent"]) == sorted([lost.pk, made.pk])
    assert sorted(cluster.creates) == sorted([lost.job_name, made.job_name])  # one attempt each
    assert sorted(name for _namespace, name in cluster.jobs) == sorted([lost.job_name, made.job_name])  # one Job each
    for job in (lost, made):
        job.refresh_from_db()
        assert job.state == JobState.QUEUED and job.cluster_created_at is not None and job.last_error == ""

    assert convergence.missing_job_ids(now=_later()) == []  # nothing more to send


def test_a_verdict_still_fails_the_submission_at_once_with_the_reason(cluster, team):
    cluster.up = True
    refused = _submitted(team)
    cluster.refuse.add(refused.job_name)

    assert submit_job_to_cluster.apply(args=[refused.pk]).failed()

    assert cluster.creates == [refused.job_name]  # not retried
    refused.refresh_from_db()
    assert refused.state == JobState.FAILED
    assert refused.last_error == (
        "could not create the Job in the cluster: apiserver answered 422 Unprocessable Entity: spec is invalid"
    )
