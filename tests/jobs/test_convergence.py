"""Convergence and the cancel/submit race, against the real local cluster (issue 14).

A lost message is simulated where it is lost in production: the task's `delay` drops it, as a Redis restart
without persistence or a killed worker would; the outbox row is marked sent all the same. Everything the cluster
does is real: Jobs are created, found and deleted in the apiserver.
"""

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from cluster import client, resources
from cluster.facts import job_facts
from cluster.labels import LABEL_JOB_ID, LABEL_MANAGED_BY, MANAGED_BY
from jobs import observations, services
from jobs.choices import JobState
from jobs.models import Job
from jobs.specs import JobSpec
from pools.models import Pool
from portal.models import OutboxMessage
from reconcile import jobs as convergence
from reconcile.jobs import FinalJob, leftovers
from reconcile.tasks import submit_job_to_cluster
from tests.clusterkit import KWOK_DELAY, set_quota, wait_for
from tests.factories import JobFactory

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


# --- the pure comparison ---------------------------------------------------------------------------------------


def _cluster_job(job_id, namespace="team-a", *, name=None, finished=False, deleting=False):
    metadata = {
        "name": name or f"rsv-{job_id}",
        "namespace": namespace,
        "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_JOB_ID: str(job_id)},
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-30T12:00:00Z"
    status = {"conditions": [{"type": "Complete", "status": "True"}]} if finished else {}
    return job_facts({"metadata": metadata, "status": status})


def test_leftovers_are_the_jobs_of_cancelled_jobs_and_unfinished_jobs_of_jobs_final_for_long():
    cutoff = T0
    old, recent = T0 - timedelta(seconds=1), T0 + timedelta(seconds=1)
    final = {
        1: FinalJob("team-a", "rsv-1", JobState.CANCELLED, recent),  # cancelled: always deleted
        2: FinalJob("team-a", "rsv-2", JobState.FAILED, old),  # failed long ago, Job still running: deleted
        3: FinalJob("team-a", "rsv-3", JobState.FAILED, recent),  # failed just now: sync may still be catching up
        4: FinalJob("team-a", "rsv-4", JobState.SUCCEEDED, old),  # finished in the cluster: left to its TTL
        5: FinalJob("team-a", "rsv-5", JobState.CANCELLED, old),  # already being deleted
        6: FinalJob("team-a", "rsv-6", JobState.CANCELLED, old),  # only a look-alike exists elsewhere
    }
    cluster_jobs = [
        _cluster_job(1),
        _cluster_job(2),
        _cluster_job(3),
        _cluster_job(4, finished=True),
        _cluster_job(5, deleting=True),
        _cluster_job(6, namespace="team-b"),  # another team's namespace, with job 6's label
        _cluster_job(6, name="not-rsv-6"),  # right namespace, wrong name
        _cluster_job(7),  # job 7 is not final (absent from `final`)
        job_facts({"metadata": {"name": "x", "namespace": "team-a", "labels": {LABEL_JOB_ID: "abc"}}}),
    ]
    doomed = leftovers(cluster_jobs, final, cutoff=cutoff)
    assert [job.name for job in doomed] == ["rsv-1", "rsv-2"]


# --- against the cluster ------------------------------------------------------------------------------------------


def _submit(team, *, name, gpus=1, runs_for="10m"):
    spec = JobSpec(
        name=name,
        image="registry.example.com/research/train:1.0",
        gpus=gpus,
        pod_annotations={KWOK_DELAY: runs_for},
    )
    return services.submit_job(team=team, pool=Pool.objects.get(slug="reserved-a800"), user=team.researcher, spec=spec)


def _jobs_in_cluster(job) -> list:
    team = job.team
    label = f"{LABEL_JOB_ID}={job.pk}"
    return client.batch().list_namespaced_job(team.namespace, label_selector=label).items


def _later() -> datetime:
    """A moment past the grace, so that what waits for it is due (instead of sleeping through it)."""
    return timezone.now() + timedelta(seconds=django_settings.CONVERGENCE_GRACE_SECONDS + 1)


@pytest.mark.cluster
@pytest.mark.django_db(transaction=True)
def test_jobs_whose_messages_were_lost_are_sent_again_even_with_a_last_error(portal_cluster, cluster_team, monkeypatch):
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    with monkeypatch.context() as lost:
        lost.setattr(submit_job_to_cluster, "delay", lambda *args: None)  # Redis lost them
        plain = _submit(cluster_team, name="lost")
        retrying = _submit(cluster_team, name="lost-retry")
        # This one's first attempt failed and its retry (a countdown in Redis) was lost with it.
        observations.note_submit_problem(
            job_id=retrying.pk, message="apiserver unreachable — retrying in 37s (attempt 1 of 8)", attempt=1
        )
    assert OutboxMessage.objects.get(task="jobs.submit_job", args=[plain.pk]).sent_at is not None  # it did leave
    assert Job.objects.get(pk=retrying.pk).last_error

    # Within the grace nothing is sent twice: a fresh submission is on its way.
    assert convergence.converge()["resent"] == []

    summary = convergence.converge(now=_later())
    assert sorted(summary["resent"]) == sorted([plain.pk, retrying.pk])
    for job in (plain, retrying):
        job = Job.objects.get(pk=job.pk)
        assert job.cluster_created_at is not None and job.last_error == ""
        assert len(_jobs_in_cluster(job)) == 1
    # Once created, nothing more to do; a second pass sends nothing.
    assert convergence.converge(now=_later())["resent"] == []


@pytest.mark.cluster
@pytest.mark.django_db(transaction=True)
def test_the_job_of_a_cancelled_job_is_deleted_and_nothing_that_is_not_the_portals(
    portal_cluster, cluster_team, monkeypatch
):
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    cancelled = _submit(cluster_team, name="cancel-lost")
    failed = _submit(cluster_team, name="failed-but-running")
    for job in (cancelled, failed):
        assert Job.objects.get(pk=job.pk).cluster_created_at is not None
    with monkeypatch.context() as lost:
        lost.setattr("reconcile.tasks.delete_job_from_cluster.delay", lambda *args: None)  # the delete was lost
        services.cancel_job(job=cancelled, user=cluster_team.researcher)
    # The portal gave up on this one ("could not create the Job") although the apiserver had created it.
    observations.fail_job(job_id=failed.pk, message="could not create the Job in the cluster: timed out")
    # A Job in another namespace that claims to be the cancelled job's: not the portal's, never deleted.
    decoy_namespace = f"{cluster_team.namespace}-decoy"
    decoy = _copy_into(cancelled, decoy_namespace)

    first = convergence.converge()
    assert first["deleted"] == [f"{cluster_team.namespace}/{cancelled.job_name}"]
    assert len(_jobs_in_cluster(Job.objects.get(pk=failed.pk))) == 1  # failed only now: within the grace

    second = convergence.converge(now=_later())
    assert second["deleted"] == [f"{cluster_team.namespace}/{failed.job_name}"]
    for job in (cancelled, failed):
        wait_for(lambda job=job: resources.read_job(cluster_team.namespace, job.job_name) is None, what="the Job")
    assert resources.read_job(decoy_namespace, decoy) is not None
    client.core().delete_namespace(decoy_namespace)


def _copy_into(job, namespace: str) -> str:
    core, batch = client.core(), client.batch()
    core.create_namespace({"metadata": {"name": namespace}})
    wait_for(lambda: _has_default_service_account(core, namespace), what="the decoy namespace")
    manifest = _render(job)
    manifest["metadata"]["namespace"] = namespace
    batch.create_namespaced_job(namespace, manifest)
    return manifest["metadata"]["name"]


def _render(job):
    from jobs.manifests import render

    return render(Job.objects.select_related("team", "pool").get(pk=job.pk))


def _has_default_service_account(core, namespace) -> bool:
    try:
        core.read_namespaced_service_account("default", namespace)
        return True
    except Exception:  # noqa: BLE001 - not made yet
        return False


@pytest.mark.django_db
def test_the_submit_tasks_first_read_of_the_job_takes_no_row_lock(django_assert_num_queries):
    """Issue 30: the lock (a transaction and a WAL flush each) guarded nothing the re-check after the create, under
    the lock, does not (the race below)."""
    job = JobFactory(state=JobState.QUEUED)
    with django_assert_num_queries(1) as captured:
        assert convergence._unsent(job.pk) == job
    assert "FOR UPDATE" not in captured.captured_queries[0]["sql"]
    Job.objects.filter(pk=job.pk).update(cluster_created_at=timezone.now())
    assert convergence._unsent(job.pk) is None


@pytest.mark.cluster
@pytest.mark.django_db(transaction=True)
def test_a_cancel_while_the_job_is_being_created_leaves_no_job_running(portal_cluster, cluster_team, monkeypatch):
    """The race of issue 14: the cancel commits after the submit task checked the job and before its Job exists,
    so the cancel's delete finds nothing. The task's re-check under the row lock deletes what it created."""
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    with monkeypatch.context() as queued:
        queued.setattr(submit_job_to_cluster, "delay", lambda *args: None)  # the worker picks it up below
        job = _submit(cluster_team, name="race")
    real_create = resources.create_job
    deletes = []

    def cancel_first_then_create(manifest):
        services.cancel_job(job=Job.objects.get(pk=job.pk), user=cluster_team.researcher)
        deletes.append(resources.read_job(cluster_team.namespace, job.job_name))  # what the cancel's delete saw
        return real_create(manifest)

    monkeypatch.setattr(resources, "create_job", cancel_first_then_create)
    result = submit_job_to_cluster.apply(args=[job.pk]).result

    assert deletes == [None]  # the cancel came first and found no Job to delete
    assert result == "final meanwhile: deleted"
    assert Job.objects.get(pk=job.pk).state == JobState.CANCELLED
    wait_for(lambda: resources.read_job(cluster_team.namespace, job.job_name) is None, what="the Job to be deleted")


@pytest.mark.cluster
@pytest.mark.django_db(transaction=True)
def test_an_unreachable_cluster_postpones_the_comparison_without_failing(
    portal_cluster, cluster_team, settings, tmp_path
):
    broken = tmp_path / "kubeconfig"
    text = portal_cluster.kubeconfig_path.read_text()
    port = re.search(r"server: https://127\.0\.0\.1:(\d+)", text).group(1)
    broken.write_text(text.replace(f"127.0.0.1:{port}", "127.0.0.1:9"))
    settings.KUBECONFIG = str(broken)
    settings.KUBE_CALL_ATTEMPTS = 1
    client.reset()
    summary = convergence.converge()
    assert summary["deleted"] == [] and "unreachable" in summary["cluster_error"]


# --- Jobs Kueue skipped (sweep 3, and the submit task's wait for a fresh queue) ------------------------------------


def test_a_queue_is_fresh_for_15_seconds_and_a_missing_or_undated_one_counts_as_fresh():
    def queue(at):
        return {"metadata": {"creationTimestamp": at}}

    assert convergence.queue_is_fresh(queue("2026-11-30T11:59:46Z"), now=T0)
    assert not convergence.queue_is_fresh(queue("2026-11-30T11:59:45Z"), now=T0)
    assert convergence.queue_is_fresh(None, now=T0)
    assert convergence.queue_is_fresh({"metadata": {}}, now=T0)


def test_an_old_queue_is_remembered_for_a_while_per_team_and_a_fresh_or_missing_one_is_read_each_time(monkeypatch):
    from types import SimpleNamespace

    now = timezone.now()
    old = {"metadata": {"creationTimestamp": (now - timedelta(minutes=5)).isoformat()}}
    fresh = {"metadata": {"creationTimestamp": now.isoformat()}}
    answers = {"team-a": old, "team-b": fresh, "team-c": None}
    reads = []

    def read(job):
        reads.append(job.team.namespace)
        return answers[job.team.namespace]

    monkeypatch.setattr(convergence, "_read_or_make_local_queue", read)
    monkeypatch.setattr(convergence, "_queues_seen", {})
    clock = [100.0]

    def ensure(team_id, namespace):
        job = SimpleNamespace(team_id=team_id, team=SimpleNamespace(namespace=namespace))
        return convergence._ensure_local_queue(job, clock=lambda: clock[0])

    assert ensure(1, "team-a") is old and ensure(1, "team-a") is old
    assert ensure(2, "team-b") is fresh and ensure(2, "team-b") is fresh
    assert ensure(3, "team-c") is None and ensure(3, "team-c") is None
    assert reads == ["team-a", "team-b", "team-b", "team-c", "team-c"]
    # another team with the same namespace (a team made again) is read, not taken from the first one's memory
    ensure(4, "team-a")
    assert reads[-1] == "team-a" and len(reads) == 6
    clock[0] += convergence.QUEUE_MEMO_SECONDS - 0.1
    ensure(1, "team-a")
    assert len(reads) == 6
    clock[0] += 0.2
    ensure(1, "team-a")
    assert len(reads) == 7
    # a queue that is fresh again (made anew) is forgotten, and read again next time
    answers["team-a"] = fresh
    clock[0] += convergence.QUEUE_MEMO_SECONDS
    ensure(1, "team-a")
    ensure(1, "team-a")
    assert len(reads) == 9


def test_workload_owners_are_the_batch_jobs_that_own_workloads():
    from cluster.kueue_objects import workload_owners

    def workload(namespace, *owners):
        return {"metadata": {"namespace": namespace, "ownerReferences": list(owners)}}

    job = {"apiVersion": "batch/v1", "kind": "Job", "name": "rsv-1"}
    other = {"apiVersion": "example.com/v1", "kind": "Job", "name": "rsv-2"}  # not a batch Job
    assert workload_owners([workload("team-a", job), workload("team-b", other), {"metadata": {"namespace": "x"}}]) == {
        ("team-a", "rsv-1")
    }


class _Kueue:
    """Stands in for the cluster in the pure tests of the wait: a Workload appears after `appears_after` looks."""

    def __init__(self, monkeypatch, *, appears_after: int, job_there: bool = True):
        self.looks = 0
        self.nudges = []
        self.now = 0.0
        self.appears_after = appears_after
        self.job_there = job_there
        monkeypatch.setattr("cluster.kueue_objects.job_has_workload", self.has_workload)
        monkeypatch.setattr("cluster.resources.nudge_job", self.nudge)

    def has_workload(self, namespace, name):
        self.looks += 1
        return self.looks > self.appears_after

    def nudge(self, namespace, name, *, at):
        self.nudges.append((self.now, f"{namespace}/{name}"))
        return self.job_there

    def sleep(self, seconds):
        self.now += seconds

    def clock(self):
        return self.now


def test_the_wait_nudges_the_job_only_after_a_second_without_a_workload_and_stops_when_one_is_there(monkeypatch):
    kueue = _Kueue(monkeypatch, appears_after=7)
    assert convergence.wait_until_kueue_takes("team-a", "rsv-1", sleep=kueue.sleep, clock=kueue.clock)
    # looks at 0, 0.05, 0.15, 0.35, 0.75, 1.55 and 3.15 s; the eighth finds the Workload
    assert [(pytest.approx(at), job) for at, job in kueue.nudges] == [(1.55, "team-a/rsv-1"), (3.15, "team-a/rsv-1")]
    assert kueue.looks == 8

    at_once = _Kueue(monkeypatch, appears_after=0)
    assert convergence.wait_until_kueue_takes("team-a", "rsv-1", sleep=at_once.sleep, clock=at_once.clock)
    assert at_once.nudges == [] and at_once.looks == 1


def test_the_wait_gives_up_after_its_time_or_when_the_job_is_gone(monkeypatch):
    never = _Kueue(monkeypatch, appears_after=10**6)
    assert not convergence.wait_until_kueue_takes("team-a", "rsv-1", wait=20, sleep=never.sleep, clock=never.clock)
    assert never.now <= 20 and len(never.nudges) >= 4

    gone = _Kueue(monkeypatch, appears_after=10**6, job_there=False)
    assert not convergence.wait_until_kueue_takes("team-a", "rsv-1", sleep=gone.sleep, clock=gone.clock)
    assert len(gone.nudges) == 1


@pytest.mark.cluster
@pytest.mark.django_db(transaction=True)
def test_a_new_teams_first_job_has_its_workload_when_the_submit_task_returns(portal_cluster, cluster_team, monkeypatch):
    """The team's namespace and queue were made a moment ago: the submit task waits until Kueue has taken the Job
    (nudging it if Kueue's cache had not seen the namespace yet), so its Workload is there at once. Once the queue is
    15 s old, the task does not wait."""
    from cluster.kueue_objects import job_has_workload

    waits = []
    real_wait = convergence.wait_until_kueue_takes

    def wait(namespace, name, **kwargs):
        waits.append((name, real_wait(namespace, name, **kwargs)))
        return waits[-1][1]

    monkeypatch.setattr(convergence, "wait_until_kueue_takes", wait)
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    first = _submit(cluster_team, name="first")  # the task runs eagerly in the tests
    assert Job.objects.get(pk=first.pk).cluster_created_at is not None
    assert waits == [(first.job_name, True)]
    assert job_has_workload(cluster_team.namespace, first.job_name)

    monkeypatch.setattr(convergence, "FRESH_QUEUE_SECONDS", 0)  # as if the queue were older
    later = _submit(cluster_team, name="later")
    assert Job.objects.get(pk=later.pk).cluster_created_at is not None
    assert waits == [(first.job_name, True)]


@pytest.mark.cluster
@pytest.mark.django_db(transaction=True)
def test_convergence_nudges_the_job_kueue_made_no_workload_for_and_no_other(portal_cluster, cluster_team, monkeypatch):
    """No sync runs, so the database knows no Workload of either job. One Job has a Workload in the cluster; the
    other's Kueue ignores (made without its queue label, as a Job Kueue skipped stays): only that one is nudged."""
    from cluster.kueue_objects import job_has_workload
    from cluster.labels import KUEUE_QUEUE_LABEL, NUDGED_ANNOTATION

    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    taken = _submit(cluster_team, name="taken")
    with monkeypatch.context() as held:
        held.setattr(submit_job_to_cluster, "delay", lambda *args: None)
        skipped = _submit(cluster_team, name="skipped")
    manifest = _render(skipped)
    del manifest["metadata"]["labels"][KUEUE_QUEUE_LABEL]
    assert manifest["spec"]["suspend"] is True
    client.batch().create_namespaced_job(cluster_team.namespace, manifest)
    observations.mark_created_in_cluster(job_id=skipped.pk, created=True)
    wait_for(lambda: job_has_workload(cluster_team.namespace, taken.job_name), what="the taken job's Workload")

    assert convergence.converge()["nudged"] == []  # within the grace: Kueue may still be on its way
    assert convergence.converge(now=_later())["nudged"] == [f"{cluster_team.namespace}/{skipped.job_name}"]

    def annotations(job):
        return resources.read_job(cluster_team.namespace, job.job_name).metadata.annotations or {}

    assert NUDGED_ANNOTATION in annotations(skipped)
    assert NUDGED_ANNOTATION not in annotations(taken)
