"""The admission queue: quota-bounded, ordered, race-free, and self-advancing when GPUs free up.

These tests are about the portal's own bookkeeping, so the send-to-cluster task is replaced by a recorder;
tests/jobs/test_cluster_jobs.py covers the same paths against the real cluster.
"""

import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from jobs import services
from jobs.choices import JobState, Placement, Priority
from jobs.models import Job
from jobs.specs import JobSpec
from pools import services as pool_services
from portal.choices import Role
from tests.factories import MembershipFactory, NodeFactory, PoolFactory, TeamFactory, UserFactory


@pytest.fixture
def sent(monkeypatch):
    """Job ids handed to the submission task (instead of a cluster)."""
    calls: list[int] = []
    monkeypatch.setattr("jobs.tasks.submit_job_to_cluster.delay", lambda job_id: calls.append(job_id))
    monkeypatch.setattr("jobs.tasks.delete_job_from_cluster.delay", lambda job_id: None)
    monkeypatch.setattr(
        "jobs.tasks.admit_queued_jobs.delay",
        lambda team_id, pool_id: services.admit_queued(team_id=team_id, pool_id=pool_id),
    )
    monkeypatch.setattr("pools.tasks.reconcile_team_namespace.delay", lambda team_id: None)
    return calls


@pytest.fixture
def pool(db):
    pool = PoolFactory(slug="a800", contracted_gpus=32)
    NodeFactory(pool=pool, gpu_capacity=8, gpu_allocatable=8)
    return pool


def spec(name="train", gpus=1, **kwargs):
    return JobSpec(name=name, image="registry.example.com/llm/train:1.0", gpus=gpus, **kwargs)


def quota(team, pool, gpus):
    pool_services.set_quota(team=team, pool=pool, max_gpus=gpus)


def test_job_within_quota_is_admitted_and_sent(django_capture_on_commit_callbacks, sent, team, researcher, pool):
    quota(team, pool, 8)
    with django_capture_on_commit_callbacks(execute=True):
        job = services.submit_job(team=team, pool=pool, user=researcher, spec=spec(gpus=4))
    assert job.state == JobState.SUBMITTED
    assert sent == [job.pk]
    assert [e.to_state for e in job.events.all()] == [JobState.QUEUED, JobState.SUBMITTED]


def test_job_over_remaining_quota_is_queued_with_position(sent, team, researcher, pool):
    quota(team, pool, 8)
    first = services.submit_job(team=team, pool=pool, user=researcher, spec=spec("a", gpus=6))
    second = services.submit_job(team=team, pool=pool, user=researcher, spec=spec("b", gpus=4))
    third = services.submit_job(team=team, pool=pool, user=researcher, spec=spec("c", gpus=1))
    assert first.state == JobState.SUBMITTED
    assert second.state == JobState.QUEUED
    # Strict queue order: the 1-GPU job would fit, but waits behind the 4-GPU one so that it cannot starve.
    assert third.state == JobState.QUEUED
    assert services.queue_position(second) == 1
    assert services.queue_position(third) == 2


def test_higher_priority_goes_first_in_the_queue(sent, team, researcher, lead, pool):
    quota(team, pool, 2)
    services.submit_job(team=team, pool=pool, user=researcher, spec=spec("running", gpus=2))
    normal = services.submit_job(team=team, pool=pool, user=researcher, spec=spec("normal", gpus=2))
    urgent = services.submit_job(team=team, pool=pool, user=lead, spec=spec("urgent", gpus=2, priority=Priority.HIGH))
    assert services.queue_position(urgent) == 1
    assert services.queue_position(normal) == 2


def test_queued_jobs_are_admitted_when_gpus_free_up(django_capture_on_commit_callbacks, sent, team, researcher, pool):
    quota(team, pool, 4)
    running = services.submit_job(team=team, pool=pool, user=researcher, spec=spec("a", gpus=4))
    waiting = services.submit_job(team=team, pool=pool, user=researcher, spec=spec("b", gpus=2))
    assert waiting.state == JobState.QUEUED
    with django_capture_on_commit_callbacks(execute=True):
        services.observe(job_id=running.pk, observation=services.Observation(state=JobState.SUCCEEDED))
    waiting.refresh_from_db()
    assert waiting.state == JobState.SUBMITTED


def test_cancelling_a_queued_job_frees_its_place(sent, team, researcher, pool):
    quota(team, pool, 1)
    services.submit_job(team=team, pool=pool, user=researcher, spec=spec("a"))
    b = services.submit_job(team=team, pool=pool, user=researcher, spec=spec("b"))
    c = services.submit_job(team=team, pool=pool, user=researcher, spec=spec("c"))
    services.cancel_job(job=b, user=researcher)
    assert services.queue_position(c) == 1
    with pytest.raises(ValidationError):
        services.cancel_job(job=b, user=researcher)


def test_what_can_never_run_is_refused_at_once(sent, team, researcher, pool):
    with pytest.raises(ValidationError) as no_quota:
        services.submit_job(team=team, pool=pool, user=researcher, spec=spec())
    assert "no GPU quota" in str(no_quota.value)
    quota(team, pool, 16)
    with pytest.raises(ValidationError) as too_big_for_quota:
        services.submit_job(team=team, pool=pool, user=researcher, spec=spec(gpus=17))
    assert "at most 16 GPUs at once" in str(too_big_for_quota.value)
    with pytest.raises(ValidationError) as too_big_for_node:
        services.submit_job(team=team, pool=pool, user=researcher, spec=spec(gpus=12))
    assert "largest node" in str(too_big_for_node.value)
    pool_services.set_namespace_limits(team=team, container_max_gpus=2)
    with pytest.raises(ValidationError) as container_max:
        services.submit_job(team=team, pool=pool, user=researcher, spec=spec(gpus=4))
    assert "per container" in str(container_max.value)
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("field", "value", "error_field"),
    [
        ("image", "Not An Image!", "image"),
        ("name", "Bad_Name", "name"),
        ("gpus", 0, "gpus"),
        ("gpus", 1.5, "gpus"),
        ("gpus", -2, "gpus"),
        ("placement", "sideways", "placement"),
    ],
)
def test_invalid_specs_say_which_field(sent, team, researcher, pool, field, value, error_field):
    quota(team, pool, 8)
    values = {"name": "ok", "image": "registry.example.com/a/b:1", "gpus": 1, field: value}
    with pytest.raises(ValidationError) as error:
        services.submit_job(team=team, pool=pool, user=researcher, spec=JobSpec(**values))
    assert error_field in error.value.message_dict


def test_spill_placement_needs_a_pool_to_spill_into(sent, team, researcher, pool):
    quota(team, pool, 8)
    with pytest.raises(ValidationError) as error:
        services.submit_job(team=team, pool=pool, user=researcher, spec=spec(placement=Placement.SOFT))
    assert "no pools to spill into" in str(error.value)


def test_only_members_submit(sent, team, outsider, pool):
    quota(team, pool, 8)
    with pytest.raises(ValidationError) as error:
        services.submit_job(team=team, pool=pool, user=outsider, spec=spec())
    assert "not a member" in str(error.value)


def test_resubmit_copies_the_spec(sent, team, researcher, pool):
    quota(team, pool, 8)
    job = services.submit_job(team=team, pool=pool, user=researcher, spec=spec(gpus=2, env={"A": "1"}))
    services.cancel_job(job=job, user=researcher)
    again = services.resubmit_job(job=Job.objects.get(pk=job.pk), user=researcher)
    assert again.pk != job.pk
    assert (again.gpus, again.env, again.resubmitted_from_id) == (2, {"A": "1"}, job.pk)


@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_submissions_never_exceed_a_quota_of_eight(sent):
    """50 threads, each with its own database connection, submit a 1-GPU job at the same moment."""
    team = TeamFactory(slug="race")
    pool = PoolFactory(slug="race-pool", contracted_gpus=64)
    NodeFactory(pool=pool)
    users = [UserFactory(username=f"racer{i}") for i in range(50)]
    for user in users:
        MembershipFactory(team=team, user=user, role=Role.RESEARCHER)
    quota(team, pool, 8)
    barrier = threading.Barrier(len(users))
    errors: list[BaseException] = []

    def submit(user):
        try:
            barrier.wait(timeout=30)
            services.submit_job(team=team, pool=pool, user=user, spec=spec(f"job-{user.username}"))
        except BaseException as error:  # noqa: BLE001 - collected and asserted below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=submit, args=(user,)) for user in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert errors == []
    states = list(Job.objects.filter(team=team).values_list("state", flat=True))
    assert len(states) == 50
    assert states.count(JobState.SUBMITTED) == 8
    assert states.count(JobState.QUEUED) == 42
    assert sorted(set(sent)) == sorted(Job.objects.filter(state=JobState.SUBMITTED).values_list("pk", flat=True))


def test_submit_and_cancel_are_audited_whatever_the_caller(sent, team, researcher, pool):
    from portal.models import AuditEntry

    quota(team, pool, 8)
    job = services.submit_job(team=team, pool=pool, user=researcher, spec=spec())
    services.cancel_job(job=job, user=researcher)
    entries = list(AuditEntry.objects.filter(object_type="jobs.job", object_id=str(job.pk)).order_by("at", "id"))
    assert [(e.action, e.actor) for e in entries] == [("job.submit", researcher), ("job.cancel", researcher)]
    assert entries[1].before["state"] == JobState.SUBMITTED
    assert entries[1].after["state"] == JobState.CANCELLED


def test_demo_jobs_fill_the_demo_once(sent, db):
    import io

    from django.core.management import call_command

    call_command("seed_demo", stdout=io.StringIO())
    out = io.StringIO()
    call_command("demo_jobs", stdout=out, stderr=out)
    states = dict(Job.objects.values_list("name", "state"))
    assert len(states) == 9, out.getvalue()
    assert states["llama-pretrain-shard-c"] == JobState.QUEUED  # over the team's quota: shows the queue
    assert sum(state == JobState.SUBMITTED for state in states.values()) == 8
    call_command("demo_jobs", stdout=io.StringIO())
    assert Job.objects.count() == 9
