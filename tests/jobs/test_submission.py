"""Submission before the cluster: validation, queue order, audit, and the job state that Kueue's Workloads and
the job's pods imply (`settling.settle_job`, fed with rows as the sync writes them).

These tests are about the portal's own bookkeeping, so the send-to-cluster task is replaced by a recorder;
tests/jobs/test_kueue_admission.py covers admission itself against the real cluster and real Kueue.
"""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from cluster.facts import workload_facts
from jobs import services, settling
from jobs.choices import TRANSITIONS, JobState, Placement, Priority
from jobs.models import TRANSITION_FIELDS, Job, Pod
from jobs.specs import JobSpec
from pools import services as pool_services
from tests.factories import JobFactory, NodeFactory, PoolFactory


@pytest.fixture
def sent(monkeypatch):
    """Job ids handed to the submission task (instead of a cluster)."""
    calls: list[int] = []
    monkeypatch.setattr("reconcile.tasks.submit_job_to_cluster.delay", lambda job_id: calls.append(job_id))
    monkeypatch.setattr("reconcile.tasks.delete_job_from_cluster.delay", lambda job_id: None)
    monkeypatch.setattr("reconcile.tasks.reconcile_team_namespace.delay", lambda team_id: None)
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


def test_a_job_is_saved_queued_and_sent_to_the_cluster(
    django_capture_on_commit_callbacks, sent, team, researcher, pool
):
    quota(team, pool, 8)
    with django_capture_on_commit_callbacks(execute=True):
        job = services.submit_job(team=team, pool=pool, user=researcher, spec=spec(gpus=4))
    assert job.state == JobState.QUEUED
    assert sent == [job.pk]
    assert [e.to_state for e in job.events.all()] == [JobState.QUEUED]


def test_nothing_is_sent_when_the_submission_is_refused(
    django_capture_on_commit_callbacks, sent, team, researcher, pool
):
    quota(team, pool, 8)
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(ValidationError):
        services.submit_job(team=team, pool=pool, user=researcher, spec=spec(gpus=9))
    assert sent == []
    assert not Job.objects.exists()


def test_queue_position_is_kueues_order_in_the_team_queue(sent, team, researcher, lead, pool):
    other_pool = PoolFactory(slug="h100", contracted_gpus=16)
    NodeFactory(pool=other_pool, gpu_capacity=8, gpu_allocatable=8)
    quota(team, pool, 2)
    quota(team, other_pool, 2)
    normal = services.submit_job(team=team, pool=pool, user=researcher, spec=spec("normal", gpus=2))
    elsewhere = services.submit_job(team=team, pool=other_pool, user=researcher, spec=spec("elsewhere", gpus=1))
    urgent = services.submit_job(team=team, pool=pool, user=lead, spec=spec("urgent", gpus=2, priority=Priority.HIGH))
    # One ClusterQueue per team: its queue spans the team's pools, higher priority first, then oldest first.
    assert services.queue_position(urgent) == 1
    assert services.queue_position(normal) == 2
    assert services.queue_position(elsewhere) == 3


def test_cancelling_a_queued_job_frees_its_place(sent, team, researcher, pool):
    quota(team, pool, 1)
    services.submit_job(team=team, pool=pool, user=researcher, spec=spec("a"))
    b = services.submit_job(team=team, pool=pool, user=researcher, spec=spec("b"))
    c = services.submit_job(team=team, pool=pool, user=researcher, spec=spec("c"))
    assert services.queue_position(c) == 3
    services.cancel_job(job=b, user=researcher)
    assert services.queue_position(c) == 2
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
    with pytest.raises(ValidationError) as above_the_default_container_max:  # no limits of its own: the defaults'
        services.submit_job(team=team, pool=pool, user=researcher, spec=spec(gpus=12))
    assert "at most 8 GPUs per container" in str(above_the_default_container_max.value)
    pool_services.set_namespace_limits(team=team, container_max_gpus=16)
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


# Each check constraint of a job, and what a submission that would break it asks for (spec fields, notify): the service
# refuses each by its field before the database is asked anything, so it need not ask the database to check them again
# (a query in a savepoint each, half of a submission's CPU). The state is the service's own (Queued).
BREAKS_A_CONSTRAINT = {
    "jobs_job_gpus_positive": ({"gpus": 0}, None, "gpus"),
    "jobs_job_nodes_positive": ({"nodes": 0}, None, "nodes"),
    "jobs_job_spill_after_has_minutes": (
        {"placement": Placement.SPILL_AFTER, "spill_after_minutes": None},
        None,
        "spill_after_minutes",
    ),
    "jobs_job_valid_notify": ({}, ["start", "sometimes"], "notify"),
}


def test_every_check_constraint_of_a_job_is_a_check_the_submission_makes_first():
    names = {constraint.name for constraint in Job._meta.constraints if hasattr(constraint, "condition")}
    assert names == set(BREAKS_A_CONSTRAINT) | {"jobs_job_valid_state"}


@pytest.mark.parametrize("constraint", sorted(BREAKS_A_CONSTRAINT))
def test_a_submission_that_would_break_a_constraint_is_refused_by_its_field(sent, team, researcher, pool, constraint):
    fields, notify, error_field = BREAKS_A_CONSTRAINT[constraint]
    quota(team, pool, 8)
    with pytest.raises(ValidationError) as error:
        services.submit_job(team=team, pool=pool, user=researcher, spec=spec(**fields), notify=notify)
    assert error_field in error.value.message_dict
    assert not Job.objects.exists()


def test_a_submission_asks_nothing_it_already_knows(sent, team, researcher, pool):
    quota(team, pool, 8)
    with CaptureQueriesContext(connection) as queries:
        job = services.submit_job(team=team, pool=pool, user=researcher, spec=spec(), notify=["end"])
    statements = [query["sql"] for query in queries.captured_queries]
    assert not [sql for sql in statements if '"_check"' in sql]
    for table in ("portal_team", "pools_pool", "portal_user"):
        assert not [sql for sql in statements if sql.startswith(f'SELECT 1 AS "a" FROM "{table}"')]
    assert Job.objects.get(pk=job.pk).notify == ["end"]


@pytest.mark.parametrize(("source", "target"), [(a, b) for a, edges in TRANSITIONS.items() for b in edges])
def test_a_transition_changes_only_the_columns_it_says(db, source, target):
    """The sync saves a settled job's transition with only the columns that changed (`TRANSITION_FIELDS` and its own):
    a column `transition_to` wrote outside them would be lost."""
    job = JobFactory(state=source, state_changed_at=timezone.now() - timedelta(hours=1))
    before = {field.attname: getattr(job, field.attname) for field in Job._meta.concrete_fields}
    job.transition_to(target, message="step")
    after = {field.attname: getattr(job, field.attname) for field in Job._meta.concrete_fields}
    assert {name for name in before if before[name] != after[name]} <= set(TRANSITION_FIELDS)


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


def test_submit_and_cancel_are_audited_whatever_the_caller(sent, team, researcher, pool):
    from portal.models import AuditEntry

    quota(team, pool, 8)
    job = services.submit_job(team=team, pool=pool, user=researcher, spec=spec())
    services.cancel_job(job=job, user=researcher)
    entries = list(AuditEntry.objects.filter(object_type="jobs.job", object_id=str(job.pk)).order_by("at", "id"))
    assert [(e.action, e.actor) for e in entries] == [("job.submit", researcher), ("job.cancel", researcher)]
    assert entries[1].before["state"] == JobState.QUEUED
    assert entries[1].after["state"] == JobState.CANCELLED


def test_demo_jobs_fill_the_demo_once(sent, db):
    import io

    from django.core.management import call_command

    call_command("seed_demo", stdout=io.StringIO())
    out = io.StringIO()
    call_command("demo_jobs", stdout=out, stderr=out)
    states = dict(Job.objects.values_list("name", "state"))
    assert len(states) == 9, out.getvalue()
    assert set(states.values()) == {JobState.QUEUED}  # Kueue admits them once they are in the cluster
    call_command("demo_jobs", stdout=io.StringIO())
    assert Job.objects.count() == 9


@pytest.mark.cluster
def test_demo_jobs_come_again_on_a_cluster_that_has_none_of_the_jobs(sent, db, portal_cluster):
    """`make dev` starts an empty local cluster every time: jobs of the run before are not in it, so the demo is
    submitted again; on the same cluster, never twice."""
    import io

    from django.core.management import call_command

    from cluster import resources

    born = resources.cluster_born_at()
    assert born <= timezone.now()
    Job.objects.all().delete()
    call_command("demo_jobs", stdout=io.StringIO())
    Job.objects.update(created_at=born - timedelta(minutes=5))  # as if submitted to the cluster of the run before
    call_command("demo_jobs", stdout=io.StringIO())
    assert Job.objects.count() == 9  # without --new-cluster: only on an empty job table
    call_command("demo_jobs", "--new-cluster", stdout=io.StringIO())
    assert Job.objects.count() == 18
    call_command("demo_jobs", "--new-cluster", stdout=io.StringIO())
    assert Job.objects.count() == 18


# --- the state Kueue's Workload and the pods imply -------------------------------------------------------------


def workload(job, *, uid="wl-1", admitted=False, message="", flavor="a800", evicted=None, created=None):
    """A Workload as the apiserver returns it (only the fields the portal reads)."""
    created = created or timezone.now() - timedelta(minutes=5)
    conditions = []
    if admitted:
        conditions += [
            {"type": "QuotaReserved", "status": "True", "lastTransitionTime": created.isoformat()},
            {"type": "Admitted", "status": "True", "lastTransitionTime": created.isoformat()},
        ]
    else:
        conditions.append({"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": message})
    if evicted:
        conditions.append({"type": "Evicted", "status": "True", **evicted})
        if evicted["reason"] == "Preempted":
            conditions.append({"type": "Preempted", "status": "True", **evicted})
    status = {"conditions": conditions}
    if admitted:
        status["admission"] = {
            "clusterQueue": f"team-{job.team.slug}",
            "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": flavor, "cpu": flavor}}],
        }
    return workload_facts(
        {
            "metadata": {
                "uid": uid,
                "namespace": job.team.namespace,
                "name": f"job-{job.job_name}-abcde",
                "creationTimestamp": created.isoformat(),
                "ownerReferences": [{"kind": "Job", "name": job.job_name}],
            },
            "spec": {"priority": 5000},
            "status": status,
        }
    )


def test_a_waiting_workload_keeps_the_job_queued_with_kueues_reason_in_words(sent, team, researcher, pool):
    quota(team, pool, 8)
    job = services.submit_job(team=team, pool=pool, user=researcher, spec=spec(gpus=4))
    message = (
        "couldn't assign flavors to pod set main: flavor elastic doesn't match node affinity, "
        "insufficient unused quota for nvidia.com/gpu in flavor a800, 2 more needed"
    )
    settling.record_workload(facts=workload(job, message=message), job_id=job.pk)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED
    assert job.pending_reason.startswith(f"Waiting for its team's quota in {pool.name}: 2 more GPUs needed")
    assert "elastic" not in job.pending_reason  # a flavor the placement excludes is no reason


def test_admission_then_pods_move_the_job_along_in_any_order(sent, team, researcher, pool):
    quota(team, pool, 8)
    job = services.submit_job(team=team, pool=pool, user=researcher, spec=spec(gpus=4))
    node = NodeFactory(pool=pool, name="gpu-a800-1")
    now = timezone.now()
    # The pod's Running event arrives before the Workload's Admitted event: nothing moves on the pod alone.
    Pod.objects.create(
        uid="pod-1",
        namespace=team.namespace,
        name=f"{job.job_name}-x",
        team=team,
        pool=pool,
        job=job,
        node_name=node.name,
        gpus=4,
        phase="Running",
        scheduled=True,
        created_at=now,
        bound_at=now,
    )
    assert not settling.settle_job(job_id=job.pk)
    assert job.running_seen_at is None
    seen_after = timezone.now()
    settling.record_workload(facts=workload(job, admitted=True), job_id=job.pk)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert (job.node_name, job.admitted_pool) == (node.name, pool)
    assert [e.to_state for e in job.events.all()] == [JobState.QUEUED, JobState.RUNNING]
    # When the portal saw it Running, on its own clock (the start-time quote's path delay is read off it).
    assert seen_after <= job.running_seen_at <= timezone.now()


def test_an_admitted_job_without_pods_is_admitted(sent, team, researcher, pool):
    quota(team, pool, 8)
    job = services.submit_job(team=team, pool=pool, user=researcher, spec=spec(gpus=4))
    settling.record_workload(facts=workload(job, admitted=True), job_id=job.pk)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    assert "admitted by Kueue in" in job.events.last().message


def test_a_preempted_job_goes_back_to_the_queue_saying_for_whom(sent, team, researcher, lead, pool):
    quota(team, pool, 8)
    low = services.submit_job(team=team, pool=pool, user=researcher, spec=spec("low", gpus=4))
    high = services.submit_job(team=team, pool=pool, user=lead, spec=spec("high", gpus=8, priority=100))
    settling.record_workload(facts=workload(low, uid="0f3a-0001", admitted=True), job_id=low.pk)
    settling.record_workload(facts=workload(high, uid="0f3a-beef"), job_id=high.pk)
    preempted = {
        "reason": "Preempted",
        "message": "Preempted to accommodate a workload (UID: 0f3a-beef, JobUID: j-1) due to prioritization in the "
        "ClusterQueue; preemptor path: /reservoir/team-alpha; preemptee path: /reservoir/team-alpha",
    }
    settling.record_workload(facts=workload(low, uid="0f3a-0001", evicted=preempted), job_id=low.pk)
    low.refresh_from_db()
    assert low.state == JobState.QUEUED
    assert low.preemptions == 1
    assert low.admitted_pool is None
    assert f"Preempted for job #{high.pk} of the same team" in low.events.last().message


def test_each_step_of_a_workload_is_written_in_one_statement(sent, team, researcher, pool):
    """The sync writes a row for every step of every Workload: one upsert, not update_or_create's savepoint, locking
    read and write (bench/admission.py)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from jobs.models import Workload

    quota(team, pool, 8)
    job = services.submit_job(team=team, pool=pool, user=researcher, spec=spec(gpus=4))
    settling.record_workload(facts=workload(job), job_id=job.pk)
    queued_seen = Workload.objects.get(uid="wl-1").seen_at
    with CaptureQueriesContext(connection) as queries:
        settling.record_workload(facts=workload(job, admitted=True), job_id=job.pk)
    on_workloads = [
        query["sql"]
        for query in queries
        if 'INTO "jobs_workload"' in query["sql"]
        or ('FROM "jobs_workload"' in query["sql"] and "FOR UPDATE" in query["sql"])
        or query["sql"].startswith('UPDATE "jobs_workload"')
    ]
    assert len(on_workloads) == 1 and "ON CONFLICT" in on_workloads[0]
    row = Workload.objects.get(uid="wl-1")
    assert (row.job_id, row.admitted, row.flavors) == (job.pk, True, ["a800"])
    assert row.seen_at > queued_seen
    assert Workload.objects.count() == 1


def test_a_finished_job_never_moves_again(sent, team, researcher, pool):
    quota(team, pool, 8)
    job = services.submit_job(team=team, pool=pool, user=researcher, spec=spec(gpus=4))
    services.cancel_job(job=job, user=researcher)
    settling.record_workload(facts=workload(job, admitted=True), job_id=job.pk)
    assert Job.objects.get(pk=job.pk).state == JobState.CANCELLED


# --- Kueue's words, as a researcher reads them ------------------------------------------------------------------


def test_kueue_messages_become_sentences_with_pool_names():
    from jobs.reasons import kueue_reason

    names = {"reserved-a800": "Reserved A800", "elastic": "Elastic"}
    maximum = (
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor reserved-a800, "
        "previously considered podsets requests (0) + current podset request (24) > maximum capacity (16)"
    )
    assert kueue_reason(maximum, names) == (
        "It needs 24 GPUs in Reserved A800, more than the team may ever use there (16)."
    )
    preempting = (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor "
        "reserved-a800, 4 more needed. Pending the preemption of 2 workload(s)"
    )
    assert kueue_reason(preempting, names).endswith("Kueue is preempting 2 jobs to make room for it.")
    only_affinity = "couldn't assign flavors to pod set main: flavor elastic doesn't match node affinity"
    assert kueue_reason(only_affinity, names) == "No pool the team has quota in matches the job's placement."
    assert kueue_reason("ClusterQueue team-x is inactive", names).startswith("The team's queue in the cluster")
    assert kueue_reason("something new", names) == "The cluster says: something new"
    assert kueue_reason("", names) == "Waiting for Kueue to admit it against the team's quota."


def test_the_hint_for_a_queued_job_says_what_would_let_it_in():
    from jobs.reasons import quota_hint

    assert quota_hint(in_use=0, quota=4, gpus=8, available=4) == "over team quota: it can never fit in 4 GPUs"
    assert quota_hint(in_use=18, quota=20, gpus=8, available=2) == "starts when 6 GPUs of the team's quota are freed"
    assert (
        quota_hint(in_use=2, quota=20, gpus=1, position=3, available=18)
        == "the team's quota has room; 2 jobs of the team are ahead of it"
    )
    # The quota has room but the cohort has none: what is missing is its reservation or the pool's GPUs it could
    # borrow, whoever holds them (the team itself included), so the hint names no culprit; its number is Kueue's.
    assert quota_hint(in_use=18, quota=28, gpus=8, position=1, available=0) == (
        "starts when 8 GPUs of the team's reservation or of what it may borrow are freed"
    )
    assert quota_hint(in_use=2, quota=20, gpus=1, position=1, available=18) == (
        "the team's quota and the pool have room now: Kueue admits it at its next pass"
    )


def test_a_reclaim_names_the_team_that_took_its_gpus_back():
    from jobs.reasons import eviction_reason

    text = eviction_reason(
        reason="Preempted",
        message="Preempted to accommodate a workload (UID: 1, JobUID: 2) due to reclamation within the cohort",
        preemptor_job_id=7,
        preemptor_same_team=False,
        preemptor_team="Vision",
    )
    assert text == "Preempted: Vision reclaimed GPUs of its reservation; requeued."
    timeout = eviction_reason(
        reason="PodsReadyTimeout",
        message="Exceeded the PodsReady timeout ns/job",
        preemptor_job_id=None,
        preemptor_same_team=False,
        preemptor_team="",
    )
    assert "did not all start in time" in timeout


def test_the_preview_says_queued_when_the_gpus_to_borrow_are_taken_by_another_team(sent, team, other_team, researcher):
    from jobs.outlook import borrowable_gpus, submit_outlook
    from tests.factories import JobFactory

    pool = PoolFactory(slug="a800", contracted_gpus=16)
    NodeFactory(pool=pool, gpu_capacity=8, gpu_allocatable=8)
    now = timezone.now()
    pool_services.create_reservation(
        team=other_team, pool=pool, gpus=8, starts_at=now - timedelta(days=1), ends_at=now + timedelta(days=30)
    )
    quota(team, pool, 8)
    quota(other_team, pool, 16)
    assert borrowable_gpus(pool) == 16  # 8 nobody reserved, and the other team's 8 lent while idle (its default)
    # The other team runs 14 GPUs: its 8 reserved (nothing idle to lend) and 6 borrowed of the 8 nobody reserved.
    JobFactory(team=other_team, pool=pool, state=JobState.RUNNING, gpus=8, admitted_pool=pool)
    JobFactory(team=other_team, pool=pool, state=JobState.RUNNING, gpus=6, admitted_pool=pool)
    assert borrowable_gpus(pool) == 2
    fits = submit_outlook(team=team, pool=pool, spec=spec(gpus=2))
    assert fits.start != "queued"
    waits = submit_outlook(team=team, pool=pool, spec=spec(gpus=4))
    assert waits.start == "queued"
    assert "unreserved and lent GPUs are in use" in waits.start_text
